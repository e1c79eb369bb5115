// a2a-agent.mjs: a remote A2A agent served by the A2A JavaScript SDK (@a2a-js/sdk), for the
// tests that use a remote A2A agent as a Lush tool (test/a2a_remote_e2e_test.go).
//
// The SDK is A2A 1.0-native; Lush's client (a2a-go v0.3.3) speaks A2A 0.3, so the agent turns on
// the SDK's server-side 0.3 compatibility layer (`legacyCompat: {enabled: true}` on the card and
// JSON-RPC handlers, and a 0.3 JSONRPC interface in the card): a request without an A2A-Version
// header, or with 0.3, gets the 0.3 card and the 0.3 JSON-RPC methods (message/send, ...).
//
// It listens on 127.0.0.1:0 and prints "a2a agent listening on http://127.0.0.1:<port>/echo".
// Routes: GET /echo/.well-known/agent-card.json (public), POST /echo/rpc (JSON-RPC; requires
// "Authorization: Bearer $A2A_AGENT_TOKEN", else 401), GET /received (what reached it: one entry
// per JSON-RPC request with how it was authenticated, and one per message with its text and
// metadata; the token itself is never recorded or printed).
// It answers each message with "echo: <text> (from <principal in dev.lush/delegation>)".
import express from "express";
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from "@a2a-js/sdk/server";
import { agentCardHandler, jsonRpcHandler, UserBuilder } from "@a2a-js/sdk/server/express";
import { duplicateInterfacesForLegacy } from "@a2a-js/sdk/compat/v0_3";
import { Role } from "@a2a-js/sdk";
import { randomUUID } from "node:crypto";

const token = process.env.A2A_AGENT_TOKEN;
if (!token) {
  console.error("a2a-agent.mjs: set A2A_AGENT_TOKEN to the bearer token the agent requires");
  process.exit(2);
}
const requests = []; // {auth: "bearer" | "missing" | "wrong"}
const messages = []; // {text, metadata}

const executor = {
  async execute(ctx, bus) {
    const msg = ctx.userMessage;
    const text = msg.parts.filter((p) => p.content?.$case === "text").map((p) => p.content.value).join("");
    messages.push({ text, metadata: msg.metadata ?? null });
    const principal = msg.metadata?.["dev.lush/delegation"]?.principal ?? "nobody";
    bus.publish(AgentEvent.message({
      messageId: randomUUID(), contextId: ctx.contextId, taskId: "", role: Role.ROLE_AGENT,
      parts: [{ content: { $case: "text", value: `echo: ${text} (from ${principal})` } }],
      metadata: undefined, extensions: [], referenceTaskIds: [],
    }));
    bus.finished();
  },
  async cancelTask() {},
};

const app = express();
const server = app.listen(0, "127.0.0.1", () => {
  const base = `http://127.0.0.1:${server.address().port}/echo`;
  const card = {
    name: "echo", description: "Echoes a message with the principal it was sent for.", version: "1.0.0",
    supportedInterfaces: duplicateInterfacesForLegacy(
      [{ url: `${base}/rpc`, protocolBinding: "JSONRPC", tenant: "", protocolVersion: "1.0" }], ["JSONRPC"]),
    provider: undefined, capabilities: { streaming: false, pushNotifications: false, extensions: [] },
    securitySchemes: {}, securityRequirements: [], defaultInputModes: ["text/plain"], defaultOutputModes: ["text/plain"],
    skills: [{ id: "echo", name: "echo", description: "Echoes the message.", tags: ["echo"], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
  app.get("/received", (_req, res) => res.json({ requests, messages }));
  app.use("/echo/.well-known/agent-card.json", agentCardHandler({ agentCardProvider: handler, legacyCompat: { enabled: true } }));
  app.use("/echo/rpc", (req, res, next) => {
    const auth = req.get("authorization");
    const how = auth === undefined ? "missing" : auth === `Bearer ${token}` ? "bearer" : "wrong";
    requests.push({ auth: how });
    if (how !== "bearer") return res.status(401).json({ error: "a bearer token is required" });
    next();
  });
  app.use("/echo/rpc", jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication, legacyCompat: { enabled: true } }));
  console.log(`a2a agent listening on ${base}`);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => server.close(() => process.exit(0)));
