#!/usr/bin/env bash
# The Lush demo, run by `make demo`: everything on the embedded default (SQLite decision log, the
# npm filesystem server installed in .tools/node), no network, no external service.
#   1. build the quickstart into a content-addressed manifest and OPA bundle
#   2. show what a broken project gets: every error at once, each with file:line and a fix
#   3. run the quickstart's Rego unit tests, with coverage
#   4. explain two decisions of the compiled policy
#   5. serve the gateway in front of the real filesystem MCP server, and call it as three
#      principals: an allowed read, a denied call (no grant), a stubbed write, and — with live
#      writes on — a live write and a write the project's own policy refuses
#   6. a server that needs a credential (the notes server, bearer tokens): a call fails with
#      "missing credential" and its fix, `lushctl auth add` stores the token, the call succeeds
#   7. OAuth: alice's MCP client (the official TypeScript SDK) knows only the gateway's URL; it
#      discovers the local authorization server (Ory Hydra) from the gateway, alice logs in, and
#      the notes server gets a token for her that the gateway obtained by token exchange
#   8. agents: a chat with the orchestrator on the offline scripted model (no model runs): it
#      calls the researcher through lush:// (a child invocation, as the same principal), a write
#      the project's policy refuses, and a write that is stubbed; then their decisions
#   9. loops: lushctl run fires them; trigger one, read its history
#  10. mesh: the same run serves Envoy's ext_authz; send it the CheckRequests a sidecar sends
#  11. A2A, one call each way: (in) lushctl a2a reads the researcher's Agent Card and sends it a
#      message as bob (allowed), and the notifier one (denied by its ACL); (out) the localizer calls
#      the partner's remote A2A agent (examples/partner-agent) through the gateway: stubbed, then
#      live with the partner's token injected; then their decisions
#  12. print the decision log
# It works on a copy of examples/quickstart, so the repository is left as it was. Its servers (the
# notes server, the partner's A2A agent, the authorization servers, the gateway) listen on loopback
# only.
set -euo pipefail

LUSHCTL=${LUSHCTL:-lushctl}
NOTES=${NOTES:-notes}
PARTNER=${PARTNER:-partner-agent}
AUTHSERVER=${AUTHSERVER:-authserver}
NODE=${LUSH_NODE_PREFIX:+$LUSH_NODE_PREFIX/node_modules/.bin/node}
NODE=${NODE:-node}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
gateway_pid=""
notes_pid=""
partner_pid=""
authserver_pid=""
cleanup() {
  for pid in "$gateway_pid" "$notes_pid" "$partner_pid" "$authserver_pid"; do
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
cp -r "$here/quickstart" "$work/quickstart"
rm -rf "$work/quickstart/.lush"
cp -r "$here/errors" "$work/errors"
cd "$work"

# free_port prints a loopback port that nothing listens on (a connection to it is refused).
free_port() {
  local p
  for p in $(shuf -i 20000-60999 -n 200); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  echo "no free loopback port" >&2
  return 1
}
# wait_line waits until a process's log has a line matching a pattern: wait_line PID FILE PATTERN WHAT.
wait_line() {
  for _ in $(seq 1 300); do
    grep -q "$3" "$2" && return
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  echo "$4 did not start:"; cat "$2"; exit 1
}

# The authorization servers of step 7 (examples/authserver; started first, so that the notes
# server can trust the one that exchanges tokens): Ory Hydra, with a login app that signs alice
# (group:engineering) in without a browser, and an RFC 8693 token-exchange server that trusts the
# gateway's actor key. Tokens are issued only for resources named up front: the researcher's
# endpoint on step 7's gateway and the notes server, whose ports are picked here.
oauth_port=$(free_port)
notes_port=$(free_port)
notes_url=http://127.0.0.1:$notes_port/mcp
"$LUSHCTL" auth actor-key --dir "$work/actor" > actor.jwks.json 2> /dev/null
printf 'lush-gateway demo-exchange-secret-not-a-secret\n' > exchange.clients
(umask 077; printf 'demo-exchange-secret-not-a-secret\n' > exchange.secret)
"$AUTHSERVER" --quiet --user alice:alice@example.com:engineering --scope mcp:tools \
  --resource "http://127.0.0.1:$oauth_port/agents/researcher/mcp" --resource "$notes_url" \
  --exchange-clients exchange.clients --actor-keys actor.jwks.json 2> authserver.log &
authserver_pid=$!
wait_line "$authserver_pid" authserver.log '^authserver: issuer=' "the authorization server"
issuer=$(sed -n 's/^authserver: issuer=\([^ ]*\).*/\1/p' authserver.log)
exchange=$(sed -n 's/^authserver: .* exchange=\([^ ]*\).*/\1/p' authserver.log)
# The quickstart's gateway config names the authorization server at http://127.0.0.1:4444; this
# one's issuer is where it listens. The gateway exchanges tokens there as client lush-gateway.
sed -i "s|issuer: http://127.0.0.1:4444|issuer: $issuer|" quickstart/gateway.yaml
printf '\ncredentials:\n  oauth:\n    token_exchange:\n      issuer: %s\n      client_id: lush-gateway\n      client_secret_file: %s\n      actor:\n        key_file: %s\n' \
  "$exchange" "$work/exchange.secret" "$work/actor/actor.key" >> quickstart/gateway.yaml

# The notes server (examples/notes) stands in for the remote mcp://notes.example.com/mcp: it
# requires a bearer token per account, or (alice's way in) an access token of the exchange server
# for its URL. The copy of lush.yaml is pointed at it.
BOB_NOTES_TOKEN=demo-bob-notes-token-not-a-secret
printf 'bob %s\ndigest-bot %s\n' "$BOB_NOTES_TOKEN" demo-bot-notes-token-not-a-secret > notes.tokens
printf '{"bob": ["Q3 planning: ship the gateway", "Q3 retro: fewer pages"], "alice": ["Q3 hiring: two SREs"]}' > notes.seed
"$NOTES" --addr "127.0.0.1:$notes_port" --tokens-file notes.tokens --seed notes.seed \
  --oauth-issuer "$exchange" --oauth-jwks "$exchange/keys" --oauth-audience "$notes_url" 2> notes.log &
notes_pid=$!
wait_line "$notes_pid" notes.log 'serving http' "the notes server"
sed -i "s|url: http://127.0.0.1:8931/mcp|url: $notes_url|" quickstart/lush.yaml

# The partner agent (examples/partner-agent, a translator on a2a-go's A2A server) stands in for the
# remote A2A agent a2a://partner.example.com/agents/translator: it requires the bearer token the
# partner issued to us. servers: cannot move an A2A agent yet, so the copy of the project names it
# at its loopback address (a2a+http://, plain HTTP for this machine only).
PARTNER_TOKEN=demo-partner-token-not-a-secret
printf 'lush %s\n' "$PARTNER_TOKEN" > partner.tokens
partner_port=$(free_port)
"$PARTNER" --addr "127.0.0.1:$partner_port" --tokens-file partner.tokens 2> partner.log &
partner_pid=$!
wait_line "$partner_pid" partner.log 'serving http' "the partner agent"
partner_ref=a2a+http://127.0.0.1:$partner_port/agents/translator
sed -i "s|a2a://partner.example.com/agents/translator|$partner_ref|" quickstart/lush.yaml quickstart/agents/localizer/spec.yaml

if [ -t 1 ]; then bold=$'\033[1m'; dim=$'\033[2m'; off=$'\033[0m'; else bold=; dim=; off=; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$off"; }
show() { local shown="$*"; printf "%s$ %s%s\n" "$dim" "${shown//$LUSHCTL/lushctl}" "$off"; "$@"; }
# expect_fail runs a command that should fail and says so.
expect_fail() { if "$@"; then echo "(unexpectedly succeeded)"; exit 1; fi; }

step "1. Build the quickstart: 4 agents, 2 loops, grants, a skill, a local tool, a custom policy"
echo "(--offline skips reaching the MCP servers here; the gateway starts them below)"
show "$LUSHCTL" build --offline quickstart
hash=$("$LUSHCTL" build --offline -q quickstart)
echo "Building again gives the same hash: $("$LUSHCTL" build --offline -q quickstart)"

step "2. A broken project: every problem in one run, with file:line and a suggestion"
show expect_fail "$LUSHCTL" build --check --offline errors/acl

step "3. The quickstart's own Rego tests, against its compiled bundle, with coverage"
show "$LUSHCTL" policy test -v quickstart

step "4. Explain a decision: may bob (group:engineering) write a draft through the orchestrator?"
show "$LUSHCTL" policy eval quickstart --build "${hash:0:12}" \
  --principal user:bob --group group:engineering --agent orchestrator \
  --tool mcp://npx/@modelcontextprotocol/server-filesystem --tool-name write_file \
  --args '{"path":"drafts/plan.md","content":"..."}'

# Demo API keys (published in examples/quickstart/gateway.yaml as SHA-256 digests; demo only).
BOB=demo-bob-key-not-a-secret           # user:bob, group:engineering: reads
CAROL=demo-carol-key-not-a-secret       # user:carol, group:contractors: may run the researcher, holds no grant
BOT=demo-digest-bot-key-not-a-secret    # serviceaccount:digest-bot: writes drafts

start_gateway() {
  rm -f ready
  "$LUSHCTL" gateway --config quickstart/gateway.yaml --listen "${LISTEN:-127.0.0.1:0}" --ready-file ready \
    --build "$hash" --log-level warn "$@" quickstart > gateway.log 2>&1 &
  gateway_pid=$!
  for _ in $(seq 1 300); do
    [ -s ready ] && break
    kill -0 "$gateway_pid" 2>/dev/null || { cat gateway.log; exit 1; }
    sleep 0.1
  done
  [ -s ready ] || { echo "the gateway did not start"; cat gateway.log; exit 1; }
  grep -v '^time=' gateway.log | sed -n '1,4p'
  base="http://$(cat ready)/agents"
}
stop_gateway() { kill "$gateway_pid"; wait "$gateway_pid" 2>/dev/null || true; gateway_pid=""; }

step "5. The gateway in front of the real filesystem MCP server (stdio, started by the gateway)"
start_gateway
echo
echo "bob lists the researcher's tools (only the ones he may call):"
show "$LUSHCTL" mcp tools "$base/researcher/mcp" --api-key "$BOB"
echo
echo "5a. An allowed read: bob reads q3.md through the researcher"
show "$LUSHCTL" mcp call "$base/researcher/mcp" read_text_file --args '{"path":"q3.md"}' --api-key "$BOB"
echo
echo "5b. A denied call: carol may run the researcher but holds no grant on the filesystem"
show expect_fail "$LUSHCTL" mcp call "$base/researcher/mcp" read_text_file --args '{"path":"q3.md"}' --api-key "$CAROL"
echo
echo "5c. A stubbed write: live writes are off, so the digest bot's write does not run"
show "$LUSHCTL" mcp call "$base/orchestrator/mcp" write_file --args '{"path":"drafts/digest.md","content":"Q3: revenue +4%."}' --api-key "$BOT"
show ls quickstart/data/drafts
stop_gateway

echo
echo "5d. The gateway again, with live writes on for the filesystem server"
start_gateway --live-writes=mcp://npx/@modelcontextprotocol/server-filesystem
show "$LUSHCTL" mcp call "$base/orchestrator/mcp" write_file --args '{"path":"drafts/digest.md","content":"Q3: revenue +4%."}' --api-key "$BOT"
show cat quickstart/data/drafts/digest.md
echo
echo "5e. The project's own policy (policies/drafts.rego) keeps writes under drafts/:"
show expect_fail "$LUSHCTL" mcp call "$base/orchestrator/mcp" write_file --args '{"path":"q3.md","content":"overwritten"}' --api-key "$BOT"

step "6. Credentials: the notes server needs a bearer token; the gateway injects it, agents never see it"
echo "bob searches the team notes through the researcher; he has not configured a token yet:"
show expect_fail "$LUSHCTL" mcp call "$base/researcher/mcp" search_notes --args '{"query":"Q3"}' --api-key "$BOB"
echo
echo "The fix the message names (the token is read from stdin or a prompt, never from argv):"
show_auth_add() { printf '%s' "$BOB_NOTES_TOKEN" | "$LUSHCTL" auth add mcp://notes.example.com/mcp --principal user:bob -C quickstart; }
printf "%s$ printf '%%s' \"\$BOB_NOTES_TOKEN\" | lushctl auth add mcp://notes.example.com/mcp --principal user:bob -C quickstart%s\n" "$dim" "$off"
show_auth_add
show "$LUSHCTL" auth list -C quickstart
echo
echo "The same call again, without restarting the gateway:"
show "$LUSHCTL" mcp call "$base/researcher/mcp" search_notes --args '{"query":"Q3"}' --api-key "$BOB"
stop_gateway

step "7. OAuth: alice logs in with the company's authorization server; the notes server gets a token for her"
LISTEN=127.0.0.1:$oauth_port start_gateway
echo
echo "alice's MCP client knows only the researcher's URL. A call without a token gets 401 naming the"
echo "endpoint's protected resource metadata (RFC 9728), and that names the authorization server:"
fetch() { "$NODE" -e 'fetch(process.argv[1], {method: process.argv[2]}).then(async (r) => console.log(r.status, r.headers.get("www-authenticate") ?? "", r.ok ? await r.text() : ""))' "$@"; }
show fetch "$base/researcher/mcp" POST
show fetch "http://127.0.0.1:$oauth_port/.well-known/oauth-protected-resource/agents/researcher/mcp" GET
echo
echo "The official TypeScript SDK (@modelcontextprotocol/client) follows them: it discovers Hydra,"
echo "registers itself (RFC 7591), and alice logs in with authorization code and PKCE (the demo's"
echo "login app approves her: no browser). She lists the researcher's tools and searches the notes:"
cp "$here/../test/node/oauth-client.mjs" .
ln -sfn "${LUSH_NODE_PREFIX:?set LUSH_NODE_PREFIX to where make node-tools installs the MCP SDKs, or run make demo}/node_modules" node_modules
printf '%s$ node oauth-client.mjs v2 code %s/researcher/mcp …  # then tools/list, and search_notes {"query":"Q3"}%s\n' "$dim" "$base" "$off"
"$NODE" oauth-client.mjs v2 code "$base/researcher/mcp" '{"redirectUrl":"http://127.0.0.1:9/callback","scope":"mcp:tools"}' \
  '[{"list":true},{"call":"search_notes","arguments":{"query":"Q3"}}]'
echo
echo "The gateway exchanged alice's access token (RFC 8693) for one whose audience is the notes server,"
echo "naming the researcher as the agent that acts for her. The notes server got that token, never hers"
echo "(one log line for each of the gateway's requests to it, the same each time):"
grep 'OAuth access token' notes.log | sed 's/^time=[^ ]* level=[A-Z]* //' | sort -u
echo
echo "The decisions of her calls name alice, signed in with OAuth; the search's records how its"
echo "upstream credential was obtained (never a token):"
show "$LUSHCTL" audit query --log quickstart/.lush/decisions.db --principal user:alice --action tools/call --oldest
show_credential() {
  "$LUSHCTL" audit query --log quickstart/.lush/decisions.db --principal user:alice --tool-name search_notes --outcome allow -o json |
    "$NODE" -e 'let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => { const e = JSON.parse(s.split("\n")[0]).event;
      console.log(JSON.stringify({ principal: e.input.principal, credential: e.credential })); })'
}
printf '%s$ lushctl audit query --log … --principal user:alice --tool-name search_notes --outcome allow -o json  # its principal and credential:%s\n' "$dim" "$off"
show_credential
stop_gateway

step "8. Agents: chat with the orchestrator (offline: the scripted provider replays quickstart/scripts/)"
echo "The digest bot asks the orchestrator for a Q3 summary. Every tool call goes through the gateway,"
echo "as the digest bot; the researcher runs as a child invocation, under its own ACL:"
since=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
printf "%s$ echo 'Summarize Q3 into drafts/' | lushctl chat orchestrator quickstart --provider scripted --as serviceaccount:digest-bot%s\n" "$dim" "$off"
echo 'Summarize Q3 into drafts/' | "$LUSHCTL" chat orchestrator quickstart --provider scripted --as serviceaccount:digest-bot
echo
echo "The decisions of that chat: two invocations (agentd), the researcher's read, the refused and the stubbed write (gateway):"
show "$LUSHCTL" audit query --log quickstart/.lush/decisions.db --since "$since" --action agent/invoke --oldest
show "$LUSHCTL" audit query --log quickstart/.lush/decisions.db --since "$since" --action tools/call --oldest

step "9. Loops: lushctl run fires them on schedule; trigger one now, read its history"
echo "The quickstart served by lushctl run (gateway, agents and the scheduler on one port), as olga of"
echo "group:ops, who holds execute on the hourly-notes loop. The loop runs the notifier as the digest bot;"
echo "its post_note is a write, so it is stubbed:"
rm -f ready
"$LUSHCTL" run quickstart --provider scripted --listen 127.0.0.1:0 --ready-file ready --log-level warn \
  --config quickstart/gateway.yaml --dev-principal user:olga --dev-group group:ops --ext-authz 127.0.0.1:0 > run.log 2>&1 &
gateway_pid=$!
for _ in $(seq 1 300); do
  [ -s ready ] && break
  kill -0 "$gateway_pid" 2>/dev/null || { cat run.log; exit 1; }
  sleep 0.1
done
[ -s ready ] || { echo "lushctl run did not start"; cat run.log; exit 1; }
export LUSH_URL="http://$(cat ready)"
show "$LUSHCTL" loop list
show "$LUSHCTL" loop trigger hourly-notes
show "$LUSHCTL" loop history hourly-notes
unset LUSH_URL
echo
echo "Who may trigger it is policy: carol (group:contractors) may not, and the decision says why:"
show "$LUSHCTL" policy eval quickstart --loop hourly-notes --principal user:carol --group group:contractors

step "10. Mesh: the same decisions at an Envoy sidecar (ext_authz), for calls that never pass the gateway"
echo "The same lushctl run also serves Envoy's ext_authz API (--ext-authz). These are the CheckRequests a"
echo "sidecar in front of the notes server sends (quickstart/mesh/*.json); lushctl mesh check sends them"
echo "and shows what the sidecar does: forward with the credential added, refuse, or answer a stubbed write:"
authz_addr=$(sed -n 's/^  ext_authz (Envoy, gRPC): \([^ ,]*\).*/\1/p' run.log)
[ -n "$authz_addr" ] || { echo "no ext_authz address in run.log"; cat run.log; exit 1; }
show "$LUSHCTL" mesh check --ext-authz "$authz_addr" quickstart/mesh/bob-searches-notes.json \
  quickstart/mesh/carol-searches-notes.json quickstart/mesh/bot-posts-a-note.json
stop_gateway

step "11. A2A, one call each way: the quickstart's agents are A2A agents; a remote A2A agent is a tool"
echo "lushctl run serves every agent over A2A too (docs/a2a.md), under its ACL. The researcher is the"
echo "quickstart's A2A agent. Anyone may read its public Agent Card: who it is, where, how to authenticate:"
rm -f ready
"$LUSHCTL" run quickstart --provider scripted --listen 127.0.0.1:0 --ready-file ready --log-level warn \
  --config quickstart/gateway.yaml > run.log 2>&1 &
gateway_pid=$!
for _ in $(seq 1 300); do
  [ -s ready ] && break
  kill -0 "$gateway_pid" 2>/dev/null || { cat run.log; exit 1; }
  sleep 0.1
done
[ -s ready ] || { echo "lushctl run did not start"; cat run.log; exit 1; }
agents="http://$(cat ready)/agents"
show "$LUSHCTL" a2a card "$agents/researcher"
echo
echo "(in) bob sends the researcher an A2A message (message/send): decided as agent/invoke by its ACL,"
echo "then run as a chat is; the researcher reads q3.md through the gateway, as bob:"
show "$LUSHCTL" a2a send "$agents/researcher" "What does q3.md say?" --api-key "$BOB"
echo
echo "The notifier's ACL names only the digest bot: bob's message is refused, with the decision's reasons:"
show expect_fail "$LUSHCTL" a2a send "$agents/notifier" "Post a note" --api-key "$BOB"
stop_gateway
echo
echo "(out) The localizer's one tool is the partner's translator, a remote A2A agent. The digest bot asks"
echo "the localizer for a translation; live writes are off, so the gateway stubs the message (sending one"
echo "is a write): nothing reaches the partner:"
since=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
printf "%s$ echo 'Translate the Q3 summary' | lushctl chat localizer quickstart --provider scripted --as serviceaccount:digest-bot%s\n" "$dim" "$off"
echo 'Translate the Q3 summary' | "$LUSHCTL" chat localizer quickstart --provider scripted --as serviceaccount:digest-bot
echo
echo "Live, the call needs the partner's token for the digest bot (Vault in production; the local file here):"
printf "%s$ printf '%%s' \"\$PARTNER_TOKEN\" | lushctl auth add %s --principal serviceaccount:digest-bot -C quickstart%s\n" "$dim" "$partner_ref" "$off"
printf '%s' "$PARTNER_TOKEN" | "$LUSHCTL" auth add "$partner_ref" --principal serviceaccount:digest-bot -C quickstart
printf "%s$ echo 'Translate the Q3 summary' | lushctl chat localizer quickstart --provider scripted --as serviceaccount:digest-bot --live-writes=%s%s\n" "$dim" "$partner_ref" "$off"
echo 'Translate the Q3 summary' | "$LUSHCTL" chat localizer quickstart --provider scripted --as serviceaccount:digest-bot --live-writes="$partner_ref"
echo
echo "The partner got one message, with the token (its account: lush) and who asks through which agent"
echo "(the gateway's delegation metadata); the localizer and the model never saw the token:"
grep 'msg=message' partner.log | sed 's/^time=[^ ]* level=[A-Z]* //'
echo
echo "The decisions of both calls to the partner: the stubbed one, and the live one:"
show "$LUSHCTL" audit query --log quickstart/.lush/decisions.db --since "$since" --tool "$partner_ref" --action tools/call --oldest

step "12. The decision log: every call, who made it, what was decided and what happened (gateway and ext_authz)"
show "$LUSHCTL" audit query --log quickstart/.lush/decisions.db --action tools/call --oldest
echo "Every entry is hash-chained and the chain head is signed at each checkpoint (and at every clean"
echo "shutdown): verify proves the log complete and unaltered up to the last checkpoint, against the"
echo "checkpoint key's public half, and says how many entries come after it."
show "$LUSHCTL" audit verify -q --log quickstart/.lush/decisions.db --public-key quickstart/.lush/checkpoint.key.pub

printf '\n%sDone.%s Bundle: a standard OPA bundle, revision %s.\n' "$bold" "$off" "${hash:0:12}"
