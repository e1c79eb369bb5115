// An MCP client that logs in with OAuth through the official TypeScript SDKs, for Lush's
// end-to-end tests: it knows only the gateway URL; the SDK discovers the authorization server from
// the gateway (RFC 9728), registers (RFC 7591) or uses the given client, and logs in.
// Usage: node oauth-client.mjs <v1|v2> <code|client_credentials> <url> <options-json> <script-json>
// Options: {"clientId", "clientSecret", "expectedIssuer", "scope"} (client_credentials), {"redirectUrl", "scope",
// "clientMetadata"} (code), and for both "tokenFile": a file the tokens the client obtained are
// written to (so the test can look for them in the gateway's output; they are never printed). The authorization code flow is headless: the authorization URL is
// followed with a cookie jar until it redirects to redirectUrl (the test's consent app approves).
// The script is a list of steps: {"list": true} or {"call": "<tool>", "arguments": {...}}.
// Prints one JSON line per step ({"tools": [...]}, {"result": {...}} or {"error": "..."}), and
// first {"login": {"registered": bool}}; an error before the steps prints {"fatal": "..."}.
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";

const [sdk, flow, url, optionsJSON, scriptJSON] = process.argv.slice(2);
const opts = JSON.parse(optionsJSON || "{}");
const script = JSON.parse(scriptJSON || "[]");

const mod =
  sdk === "v2"
    ? await import("@modelcontextprotocol/client")
    : {
        ...(await import("@modelcontextprotocol/sdk/client/index.js")),
        ...(await import("@modelcontextprotocol/sdk/client/streamableHttp.js")),
        ...(await import("@modelcontextprotocol/sdk/client/auth.js")),
        ...(await import("@modelcontextprotocol/sdk/client/auth-extensions.js")),
      };
const { Client, StreamableHTTPClientTransport, UnauthorizedError, ClientCredentialsProvider } = mod;

// A provider for the authorization code flow that keeps everything in memory and, instead of
// opening a browser, follows the authorization URL itself.
class HeadlessProvider {
  constructor(redirectUrl, metadata) {
    this._redirect = redirectUrl;
    this._metadata = metadata;
    this.registered = false;
    this.code = undefined;
  }
  get redirectUrl() { return this._redirect; }
  // state: the SDKs send one only when the provider gives it; Hydra requires at least 8 characters.
  state() { return randomBytes(16).toString("hex"); }
  get clientMetadata() { return this._metadata; }
  clientInformation() { return this._client; }
  saveClientInformation(info) { this._client = info; this.registered = true; }
  tokens() { return this._tokens; }
  saveTokens(tokens) { this._tokens = tokens; }
  saveDiscoveryState(state) { this._discovery = state; }
  discoveryState() { return this._discovery; }
  saveCodeVerifier(v) { this._verifier = v; }
  codeVerifier() { return this._verifier; }
  async redirectToAuthorization(authorizationUrl) {
    this.params = await follow(authorizationUrl, this._redirect);
    this.code = this.params.get("code");
    if (!this.code) {
      const error = this.params.get("error") ?? "no code and no error";
      const description = this.params.get("error_description");
      throw new Error(`authorization failed: ${error}${description ? ` (${description})` : ""}`);
    }
  }
}

// follow GETs url and its redirects with a cookie jar until a redirect to target, whose query it
// returns.
async function follow(url, target) {
  const jar = new Map();
  let next = String(url);
  for (let i = 0; i < 20; i++) {
    if (next.startsWith(target)) return new URL(next).searchParams;
    const u = new URL(next);
    const cookie = [...(jar.get(u.host) ?? new Map())].map(([k, v]) => `${k}=${v}`).join("; ");
    const res = await fetch(u, { redirect: "manual", headers: cookie ? { cookie } : {} });
    for (const c of res.headers.getSetCookie?.() ?? []) {
      const [pair] = c.split(";");
      const eq = pair.indexOf("=");
      if (!jar.has(u.host)) jar.set(u.host, new Map());
      jar.get(u.host).set(pair.slice(0, eq).trim(), pair.slice(eq + 1).trim());
    }
    const loc = res.headers.get("location");
    if (res.status < 300 || res.status >= 400 || !loc) {
      throw new Error(`authorization stopped at ${u.origin}${u.pathname}: HTTP ${res.status} ${(await res.text()).slice(0, 300)}`);
    }
    next = new URL(loc, u).toString();
  }
  throw new Error("authorization: too many redirects");
}

async function connect() {
  const client = new Client({ name: "lush-e2e-oauth-" + sdk, version: "1.0.0" });
  if (flow === "client_credentials") {
    const provider = new ClientCredentialsProvider({ clientId: opts.clientId, clientSecret: opts.clientSecret, scope: opts.scope,
      expectedIssuer: opts.expectedIssuer });
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
    return { client, provider, login: { flow } };
  }
  const metadata = { client_name: "lush-e2e-" + sdk, redirect_uris: [opts.redirectUrl], grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"], token_endpoint_auth_method: "none", scope: opts.scope, ...(opts.clientMetadata ?? {}) };
  const provider = new HeadlessProvider(opts.redirectUrl, metadata);
  const first = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  try {
    await client.connect(first);
    return { client, provider, login: { flow, registered: provider.registered, interactive: false } };
  } catch (e) {
    if (!(e instanceof UnauthorizedError) || !provider.code) throw e;
  }
  await first.finishAuth(sdk === "v2" ? provider.params : provider.code);
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
  return { client, provider, login: { flow, registered: provider.registered, interactive: true, refresh: Boolean(provider.tokens()?.refresh_token) } };
}

let client;
try {
  const c = await connect();
  client = c.client;
  if (opts.tokenFile) {
    const t = c.provider.tokens() ?? {};
    writeFileSync(opts.tokenFile, JSON.stringify({ access_token: t.access_token, refresh_token: t.refresh_token }), { mode: 0o600 });
  }
  console.log(JSON.stringify({ login: c.login }));
} catch (e) {
  console.log(JSON.stringify({ fatal: String(e?.message ?? e) }));
  process.exit(1);
}
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
