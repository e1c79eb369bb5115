#!/usr/bin/env bash
# The Lush demo, run by `make demo`: everything on the embedded default, no network, no service.
#   1. build the quickstart project into a content-addressed manifest and OPA bundle
#   2. show what a broken project gets: every error at once, each with file:line and a fix
#   3. run the quickstart's Rego unit tests, with coverage
#   4. explain two decisions of the compiled policy: a denial and a stubbed write
set -euo pipefail

LUSHCTL=${LUSHCTL:-lushctl}
cd "$(dirname "$0")"

if [ -t 1 ]; then bold=$'\033[1m'; dim=$'\033[2m'; off=$'\033[0m'; else bold=; dim=; off=; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$off"; }
show() { local shown="$*"; printf "%s$ %s%s\n" "$dim" "${shown//$LUSHCTL/lushctl}" "$off"; "$@"; }

step "1. Build examples/quickstart: 3 agents, 2 loops, grants, a skill, a local tool, a custom policy"
echo "(--offline skips reaching the MCP servers; make test checks reachability against real ones)"
show "$LUSHCTL" build --offline quickstart
hash=$("$LUSHCTL" build --offline -q quickstart)
echo "Building again gives the same hash: $("$LUSHCTL" build --offline -q quickstart)"
show "$LUSHCTL" builds quickstart

step "2. A broken project: every problem in one run, with file:line and a suggestion"
set +e
show "$LUSHCTL" build --check --offline errors/acl
status=$?
set -e
echo "(exit status $status: the build failed, as it should)"

step "3. The quickstart's own Rego tests, against its compiled bundle, with coverage"
show "$LUSHCTL" policy test -v quickstart

step "4a. May bob (group:engineering) write a draft through the orchestrator agent?"
show "$LUSHCTL" policy eval quickstart --build "${hash:0:12}" \
  --principal user:bob --group group:engineering --agent orchestrator \
  --tool mcp://npx/@modelcontextprotocol/server-filesystem --tool-name write_file \
  --args '{"path":"data/drafts/plan.md","content":"..."}'

step "4b. And the digest-bot service account, which holds a write grant on write_file?"
show "$LUSHCTL" policy eval quickstart --build "${hash:0:12}" \
  --principal serviceaccount:digest-bot --agent orchestrator \
  --tool mcp://npx/@modelcontextprotocol/server-filesystem --tool-name write_file \
  --args '{"path":"data/drafts/plan.md","content":"..."}'

printf '\n%sDone.%s The bundle is a standard OPA bundle: quickstart/.lush/build/%s.tar.gz\n' "$bold" "$off" "$hash"
