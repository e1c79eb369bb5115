// An MCP client on one of the official TypeScript SDKs, for Lush's end-to-end tests of what clients
// do through the gateway: list and call tools, answer an upstream's elicitation, and follow an
// in-band approval (an elicitation in URL mode: a request of the server, or an input request of an
// input_required result, which the v2 SDK fulfils and retries by itself).
// Usage: node clients.mjs <v1|v2|v2-auto> <url> <headers-json> <script-json>
// v2 connects as the v2 SDK does by default (initialize, 2025-11-25); v2-auto negotiates the era
// (server/discover first: 2026-07-28 when the server offers it).
// The script is a list of steps: {"list": true} or {"call": "<tool>", "arguments": {...}}.
// Declares elicitation in form and URL mode. A form elicitation is answered accept with
// {"name": "Ada"}; a URL one is accepted (the user opens the page) after printing it.
// Prints one JSON line per event: {"connected": {"protocol"}}, {"elicitation": {"mode", "message",
// "url", "elicitationId"}}, {"tools": [...]}, {"result": {...}} or {"error": "..."}.
const [sdk, url, headerJSON, scriptJSON] = process.argv.slice(2);
const headers = JSON.parse(headerJSON || "{}");
const script = JSON.parse(scriptJSON || "[]");

const print = (v) => console.log(JSON.stringify(v));

async function elicit(request) {
  const p = request.params ?? {};
  if (p.mode === "url") {
    print({ elicitation: { mode: "url", message: p.message, url: p.url, elicitationId: p.elicitationId } });
    return { action: "accept" };
  }
  print({ elicitation: { mode: "form", message: p.message } });
  return { action: "accept", content: { name: "Ada" } };
}

const info = { name: "lush-e2e-" + sdk, version: "1.0.0" };
const capabilities = { elicitation: { form: {}, url: {} } };
let client, transport;
if (sdk.startsWith("v2")) {
  const { Client, StreamableHTTPClientTransport } = await import("@modelcontextprotocol/client");
  client = new Client(info, sdk === "v2-auto" ? { capabilities, versionNegotiation: { mode: "auto" } } : { capabilities });
  client.setRequestHandler("elicitation/create", elicit);
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
} else {
  const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
  const { StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
  const { ElicitRequestSchema } = await import("@modelcontextprotocol/sdk/types.js");
  client = new Client(info, { capabilities });
  client.setRequestHandler(ElicitRequestSchema, elicit);
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
}
await client.connect(transport);
print({ connected: { protocol: transport.protocolVersion ?? null } });
for (const step of script) {
  try {
    if (step.list) {
      const { tools } = await client.listTools();
      print({ tools: tools.map((t) => t.name) });
    } else {
      const params = { name: step.call, arguments: step.arguments ?? {} };
      const options = { timeout: 120000 };
      // v1: callTool(params, resultSchema, options); v2: callTool(params, options).
      const result = sdk.startsWith("v2") ? await client.callTool(params, options) : await client.callTool(params, undefined, options);
      print({ result });
    }
  } catch (e) {
    print({ error: String(e?.message ?? e) });
  }
}
await client.close();
