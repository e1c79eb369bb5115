// A client built on the official MCP TypeScript SDK, for Lush's end-to-end tests.
// Usage: node client.mjs <url> <header-json> <script-json>
// The script is a list of steps: {"list": true} or {"call": "<tool>", "arguments": {...}}.
// Prints one JSON line per step: {"tools": [...]} or {"result": {...}} or {"error": "..."}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, headerJSON, scriptJSON] = process.argv.slice(2);
const headers = JSON.parse(headerJSON || "{}");
const script = JSON.parse(scriptJSON || "[]");

const client = new Client({ name: "lush-e2e-ts-sdk", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
await client.connect(transport);
for (const step of script) {
  try {
    if (step.list) {
      const { tools } = await client.listTools();
      console.log(JSON.stringify({ tools: tools.map((t) => t.name) }));
    } else {
      const result = await client.callTool({ name: step.call, arguments: step.arguments ?? {} });
      console.log(JSON.stringify({ result }));
    }
  } catch (e) {
    console.log(JSON.stringify({ error: String(e?.message ?? e) }));
  }
}
await client.close();
