// a2a-client.mjs <agent endpoint URL> <headers JSON> <command: send|stream|get> [text|taskId]
import { ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from "@a2a-js/sdk/client";
import { Role } from "@a2a-js/sdk";
import { randomUUID } from "node:crypto";

const [base, headersJSON, command, arg] = process.argv.slice(2);
const fetchImpl = (url, init = {}) => {
  const headers = new Headers(init.headers);
  for (const [k, v] of Object.entries(JSON.parse(headersJSON))) headers.set(k, v);
  return fetch(url, { ...init, headers });
};
const factory = new ClientFactory({
  cardResolver: new DefaultAgentCardResolver({ fetchImpl, legacyCompat: { enabled: true } }),
  transports: [new JsonRpcTransportFactory({ fetchImpl, legacyCompat: { enabled: true } })],
});
const out = (o) => console.log(JSON.stringify(o));
try {
  const client = await factory.createFromUrl(base);
  const message = { messageId: randomUUID(), role: Role.ROLE_USER, parts: [{ content: { $case: "text", value: arg ?? "" } }] };
  if (command === "send") out({ result: await client.sendMessage({ message }) });
  else if (command === "stream") for await (const ev of client.sendMessageStream({ message })) out({ event: ev });
  else if (command === "get") out({ task: await client.getTask({ id: arg }) });
} catch (e) {
  out({ error: String(e?.message ?? e), name: e?.constructor?.name });
}
