// An MCP client on the official TypeScript SDK that knows nothing but the endpoint's URL and logs
// in with OAuth as the SDK does it: on the gateway's 401 it reads the protected resource metadata,
// discovers the authorization server, gets a token and retries. For Lush's end-to-end tests.
//
// Usage:
//   node oauth_client.mjs <url> client_credentials <client-id> <client-secret> <text>
//   node oauth_client.mjs <url> authorization_code <redirect-url> <text>
// authorization_code registers a client dynamically and plays the browser headlessly: it follows
// the authorization server's redirects (with their cookies) through the login and consent app,
// which approves its default user, to the redirect URL, and finishes the login with the code.
// Prints one JSON line: {"tools": [...], "echo": "<text echoed>"} or {"error": "..."}.
import { randomBytes } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { ClientCredentialsProvider } from "@modelcontextprotocol/sdk/client/auth-extensions.js";

const [url, grant, ...rest] = process.argv.slice(2);

// A provider for the authorization code flow with dynamic registration, kept in memory.
class HeadlessProvider {
  constructor(redirectUrl) {
    this._redirectUrl = redirectUrl;
    this.code = undefined;
  }
  get redirectUrl() { return this._redirectUrl; }
  get clientMetadata() {
    return { client_name: "lush-e2e-headless", redirect_uris: [this._redirectUrl], grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"], token_endpoint_auth_method: "client_secret_basic" };
  }
  clientInformation() { return this._client; }
  saveClientInformation(info) { this._client = info; }
  tokens() { return this._tokens; }
  saveTokens(tokens) { this._tokens = tokens; }
  // Hydra refuses authorization requests without a state of at least 8 characters.
  state() { return randomBytes(16).toString("hex"); }
  saveCodeVerifier(v) { this._verifier = v; }
  codeVerifier() { return this._verifier; }
  // The browser: follow redirects with a cookie jar until the redirect URL, keep the code.
  async redirectToAuthorization(authUrl) {
    const jar = new Map();
    let next = authUrl.toString();
    for (let i = 0; i < 20; i++) {
      if (next.startsWith(this._redirectUrl)) {
        const u = new URL(next);
        if (u.searchParams.get("error")) throw new Error("authorization failed: " + u.searchParams.get("error"));
        this.code = u.searchParams.get("code");
        return;
      }
      const cookie = [...jar].map(([k, v]) => `${k}=${v}`).join("; ");
      const res = await fetch(next, { redirect: "manual", headers: cookie ? { cookie } : {} });
      for (const c of res.headers.getSetCookie()) {
        const [pair] = c.split(";");
        const i = pair.indexOf("=");
        jar.set(pair.slice(0, i).trim(), pair.slice(i + 1).trim());
      }
      const loc = res.headers.get("location");
      if (res.status < 300 || res.status >= 400 || !loc) throw new Error(`the authorization flow stopped at ${res.status}`);
      next = new URL(loc, next).toString();
    }
    throw new Error("more than 20 redirects");
  }
}

async function session(authProvider) {
  const client = new Client({ name: "lush-e2e-oauth", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider });
  return { client, transport };
}

try {
  let provider, text;
  if (grant === "client_credentials") {
    const [clientId, clientSecret, t] = rest;
    // SDK 1.32 asks for the scope of the client's metadata only (not the challenge's) in
    // non-interactive flows: a machine client names its scope.
    provider = new ClientCredentialsProvider({ clientId, clientSecret, scope: "mcp:tools" });
    text = t;
  } else {
    const [redirectUrl, t] = rest;
    provider = new HeadlessProvider(redirectUrl);
    text = t;
  }
  let { client, transport } = await session(provider);
  try {
    await client.connect(transport);
  } catch (e) {
    if (!(e instanceof UnauthorizedError) || !provider.code) throw e;
    await transport.finishAuth(provider.code); // the SDK exchanges the code (PKCE) for tokens
    ({ client, transport } = await session(provider));
    await client.connect(transport);
  }
  const { tools } = await client.listTools();
  const result = await client.callTool({ name: "echo", arguments: { text } });
  console.log(JSON.stringify({ tools: tools.map((t) => t.name), echo: result.content?.[0]?.text ?? "", isError: !!result.isError }));
  await client.close();
} catch (e) {
  console.log(JSON.stringify({ error: String(e?.message ?? e) }));
}
