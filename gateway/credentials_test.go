package gateway_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/examples/notes/notes"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/test/mcpserver"
	"github.com/lush-agents/lush/test/vaultserver"
	"github.com/lush-agents/lush/vault"
)

// Secrets of the credentials tests: tokens the notes server knows, and values a stdio server
// receives in its environment. None may appear anywhere but in the upstream requests.
const (
	aliceNotesToken = "alice-notes-token-5ef1c2a9"
	carolNotesToken = "carol-notes-token-83d0b7e4"
	botNotesToken   = "bot-notes-token-0a4c6f19"
	aliceEnvSecret  = "alice-env-secret-7d2e"
	carolEnvSecret  = "carol-env-secret-19fb"
	carolKey        = "carol-key-0123456789"
	notesRef        = "mcp://notes.test/mcp"
)

// credHarness is a gateway whose agent uses the notes server (bearer tokens, over streamable
// HTTP) and the stdio test server (a variable in its environment), both declared in
// mcp_credentials.
type credHarness struct {
	*harness
	notes *notes.Server
	file  *vault.File
}

func startCredentials(t *testing.T, cfg gateway.Config, lushExtra string) *credHarness {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, tokens, "alice "+aliceNotesToken+"\ncarol "+carolNotesToken+"\nbot "+botNotesToken+"\n", 0o600)
	ns, err := notes.New(notes.Options{TokensFile: tokens, Logger: slog.New(slog.DiscardHandler), Seed: map[string][]string{"alice": {"alice's plan"}, "carol": {"carol's plan"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ns.Handler())
	t.Cleanup(func() { ns.Close(); srv.Close() })

	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bin/server"), mcpserver.StdioScript(), 0o755)
	writeFile(t, filepath.Join(dir, "agents/assistant/spec.yaml"), `name: assistant
model: gemini-2.5-flash
description: Takes notes.
tools:
  - server: `+notesRef+`
    access: write
  - server: mcp://stdio/bin/server
    access: read
    tools: [env]
acl:
  - {principal: group:eng, role: execute}
  - {principal: serviceaccount:bot, role: execute}
`, 0o644)
	writeFile(t, filepath.Join(dir, "lush.yaml"), `project: creds
service_accounts: [bot]
servers:
  `+notesRef+`:
    url: `+srv.URL+`/mcp
tool_classes:
  `+notesRef+`:
    search_notes: read
    whoami: read
    post_note: write
  mcp://stdio/bin/server:
    env: read
tool_grants:
  - tool: `+notesRef+`
    grants:
      - {principal: group:eng, access: read}
      - {principal: serviceaccount:bot, access: write}
  - tool: mcp://stdio/bin/server
    grants:
      - {principal: group:eng, access: read}
mcp_credentials:
  `+notesRef+`:
    group:eng: {type: bearer}
    serviceaccount:bot: {type: bearer}
  mcp://stdio/bin/server:
    group:eng: {type: env, env: [LUSH_TEST_SECRET]}
`+lushExtra, 0o644)
	file := vault.OpenFile(filepath.Join(dir, vault.LocalFile))
	for _, e := range []vault.FileEntry{
		{Tool: notesRef, Principal: "user:alice", Credential: vault.Credential{Type: "bearer", Token: aliceNotesToken}},
		{Tool: "mcp://stdio/bin/server", Principal: "user:alice", Credential: vault.Credential{Type: "env", Env: map[string]string{"LUSH_TEST_SECRET": aliceEnvSecret}}},
		{Tool: "mcp://stdio/bin/server", Principal: "user:carol", Credential: vault.Credential{Type: "env", Env: map[string]string{"LUSH_TEST_SECRET": carolEnvSecret}}},
	} {
		if _, err := file.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Auth.APIKeys = []identity.APIKeyConfig{
		{Name: "alice", SHA256: sha(aliceKey), Principal: "user:alice", Groups: []string{"group:eng"}},
		{Name: "carol", SHA256: sha(carolKey), Principal: "user:carol", Groups: []string{"group:eng"}},
		{Name: "bot", SHA256: sha(botKey), Principal: "serviceaccount:bot"},
	}
	h := &harness{t: t, dir: dir}
	h.serve(cfg)
	return &credHarness{harness: h, notes: ns, file: file}
}

func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// TestCredentialsReachOnlyTheirUpstream: each principal's own token reaches the notes server as a
// bearer header, a principal without one is denied with the command that fixes it (and the
// denial is logged), and after `auth add` the same call succeeds, without a restart.
func TestCredentialsReachOnlyTheirUpstream(t *testing.T) {
	h := startCredentials(t, gateway.Config{}, "")
	alice := h.client("assistant", aliceKey)
	carol := h.client("assistant", carolKey)

	if got := text(callTool(t, alice, "whoami", nil)); got != "alice" {
		t.Fatalf("alice's whoami = %q", got)
	}
	res := callTool(t, carol, "whoami", nil)
	msg := text(res)
	if !res.IsError || !strings.Contains(msg, "needs a bearer credential for user:carol") ||
		!strings.Contains(msg, "lushctl auth add "+notesRef+" --principal user:carol --type bearer") {
		t.Fatalf("carol without a token: %s", msg)
	}
	if slices.Contains(h.notes.Seen(), "carol") {
		t.Fatal("carol reached the notes server without a credential")
	}
	denied := h.events(decisionlog.Filter{Principal: "user:carol", Action: "tools/call"})
	if len(denied) != 1 || denied[0].Event.Outcome != "deny" || !slices.Contains(denied[0].Event.Rules, vault.RuleMissing) ||
		denied[0].Event.Access != "read" || !strings.Contains(denied[0].Event.Error, "none is configured") {
		t.Fatalf("logged denial: %+v", denied)
	}

	if _, err := h.file.Add(vault.FileEntry{Tool: notesRef, Principal: "user:carol", Credential: vault.Credential{Type: "bearer", Token: carolNotesToken}}); err != nil {
		t.Fatal(err)
	}
	if got := text(callTool(t, carol, "search_notes", map[string]any{"query": "plan"})); !strings.Contains(got, "notes of carol") || strings.Contains(got, "alice") {
		t.Fatalf("carol's search after auth add: %q", got)
	}
	if got := text(callTool(t, alice, "search_notes", map[string]any{"query": "plan"})); !strings.Contains(got, "alice's plan") || strings.Contains(got, "carol") {
		t.Fatalf("alice's search: %q", got)
	}
	if seen := slices.Compact(slices.Sorted(slices.Values(h.notes.Seen()))); !slices.Equal(seen, []string{"alice", "carol"}) {
		t.Errorf("accounts seen by the notes server: %v", seen)
	}
	allowed := h.events(decisionlog.Filter{Principal: "user:carol", Action: "tools/call", Outcome: "allow"})
	if len(allowed) != 1 || allowed[0].Completion == nil || allowed[0].Completion.Status != decisionlog.StatusOK {
		t.Errorf("carol's allowed call: %+v", allowed)
	}
	h.assertNoSecrets()
}

// TestCredentialsInStdioEnvironment: a stdio server runs once per principal's credential, with
// that credential in its environment and nobody else's.
func TestCredentialsInStdioEnvironment(t *testing.T) {
	h := startCredentials(t, gateway.Config{}, "")
	envOf := func(key string) string {
		t.Helper()
		res := callTool(t, h.client("assistant", key), "env", nil)
		if res.IsError {
			t.Fatalf("env: %s", text(res))
		}
		return text(res)
	}
	a, c := envOf(aliceKey), envOf(carolKey)
	if !strings.Contains(a, "LUSH_TEST_SECRET="+aliceEnvSecret) || strings.Contains(a, carolEnvSecret) {
		t.Errorf("alice's server environment is wrong (%d bytes)", len(a))
	}
	if !strings.Contains(c, "LUSH_TEST_SECRET="+carolEnvSecret) || strings.Contains(c, aliceEnvSecret) {
		t.Errorf("carol's server environment is wrong (%d bytes)", len(c))
	}
	states := h.gw.Upstreams()
	for _, who := range []string{"user:alice", "user:carol"} {
		if st, ok := states["mcp://stdio/bin/server as "+who]; !ok || !st.Up {
			t.Errorf("no private server for %s: %v", who, states)
		}
	}
	if _, shared := states["mcp://stdio/bin/server"]; shared {
		t.Error("a server that needs a credential has a shared connection")
	}
	// The bot has no declaration for the stdio server and no grant either: denied by policy,
	// before any credential is looked up.
	res := callTool(t, h.client("assistant", botKey), "env", nil)
	if !res.IsError || strings.Contains(text(res), "credential") {
		t.Errorf("bot: %s", text(res))
	}
	h.assertNoSecrets()
}

// TestCredentialToolsListedBeforeConnecting: before anyone has connected to a server that needs a
// credential, its declared tools are listed (so a call can say what is missing); once a caller
// with a credential lists tools, the server's own descriptions appear.
func TestCredentialToolsListedBeforeConnecting(t *testing.T) {
	h := startCredentials(t, gateway.Config{}, "")
	res, err := h.client("assistant", carolKey).ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	descs := map[string]string{}
	for _, tool := range res.Tools {
		descs[tool.Name] = tool.Description
	}
	if !strings.Contains(descs["whoami"], "once a credential for the server is configured") {
		t.Fatalf("carol's list before any connection: %v", descs)
	}
	if _, ok := descs["post_note"]; ok {
		t.Error("carol may not write, yet post_note is listed")
	}
	res, err = h.client("assistant", aliceKey).ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name == "whoami" && strings.Contains(tool.Description, "once a credential") {
			t.Errorf("alice's list still shows the placeholder: %q", tool.Description)
		}
	}
}

// assertNoSecrets scans every output of the run for the credentials' values.
func (h *credHarness) assertNoSecrets() {
	h.t.Helper()
	for where, out := range h.outputs() {
		for _, secret := range []string{aliceNotesToken, carolNotesToken, botNotesToken, aliceEnvSecret, carolEnvSecret} {
			if strings.Contains(out, secret) {
				h.t.Errorf("the %s contains a credential (%.12s…)", where, secret)
			}
		}
	}
}

// TestCredentialsFromVault: a service account's token comes from Vault (the test server, driven
// through the real vault/api client) at the default path, and reaches the upstream as a header.
func TestCredentialsFromVault(t *testing.T) {
	vs := vaultserver.Start(t)
	if _, err := vs.Client(t, vs.RootToken()).KVv2("secret").Put(context.Background(),
		"lush/creds/notes.test/mcp/serviceaccount/bot", map[string]any{"token": botNotesToken}); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "vault-token")
	writeFile(t, tokenFile, vs.RootToken(), 0o600)
	h := startCredentials(t, gateway.Config{Credentials: vault.Config{Vault: &vault.VaultConfig{
		Address: vs.Addr(), Auth: vault.VaultAuth{TokenFile: tokenFile}}}}, "")
	if got := text(callTool(t, h.client("assistant", botKey), "whoami", nil)); got != "bot" {
		t.Fatalf("the bot's whoami = %q", got)
	}
	// People still use the local file.
	if got := text(callTool(t, h.client("assistant", aliceKey), "whoami", nil)); got != "alice" {
		t.Fatalf("alice's whoami = %q", got)
	}
	// With Vault down and nothing cached (a gateway that just started), the call is denied, and
	// the caller is told so without internals.
	vs.SetDown(true)
	h2 := startCredentials(t, gateway.Config{Credentials: vault.Config{Vault: &vault.VaultConfig{
		Address: vs.Addr(), Auth: vault.VaultAuth{TokenFile: tokenFile}}}}, "")
	res := callTool(t, h2.client("assistant", botKey), "whoami", nil)
	if !res.IsError || !strings.Contains(text(res), "cannot be fetched right now") || strings.Contains(text(res), vs.Addr()) {
		t.Fatalf("Vault down: %s", text(res))
	}
	// Calls that need no credential are not affected: the stdio server for alice uses the file.
	if res := callTool(t, h2.client("assistant", aliceKey), "env", nil); res.IsError {
		t.Fatalf("a call that needs no Vault failed: %s", text(res))
	}
	ev := h2.events(decisionlog.Filter{Principal: "serviceaccount:bot", Action: "tools/call"})
	if len(ev) != 1 || !slices.Contains(ev[0].Event.Rules, vault.RuleUnavailable) || !strings.Contains(ev[0].Event.Error, "Vault answered 503") {
		t.Fatalf("logged: %+v", ev)
	}
	h.assertNoSecrets()
	h2.assertNoSecrets()
}
