package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/vault"
)

const botA2AToken = "bot-a2a-token-5c1d"

// a2aAgent is a remote A2A agent on loopback (a2a-go's server): it answers "echo: <text>" and
// records what reached it.
type a2aAgent struct {
	mu       sync.Mutex
	auth     []string         // the Authorization header of each JSON-RPC request
	metadata []map[string]any // the metadata of each message
	cards    int              // Agent Card requests
	rpc      string           // the path of the JSON-RPC endpoint the card names; /agent/rpc when ""
	gone     map[string]bool  // JSON-RPC paths that answer 404
}

func (a *a2aAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a.mu.Lock()
	a.metadata = append(a.metadata, rc.Message.Metadata)
	a.mu.Unlock()
	var text string
	for _, p := range rc.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			text += tp.Text
		}
	}
	return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "echo: " + text}))
}

func (a *a2aAgent) Cancel(context.Context, *a2asrv.RequestContext, eventqueue.Queue) error {
	return nil
}

func (a *a2aAgent) seen() ([]string, []map[string]any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.auth...), append([]map[string]any(nil), a.metadata...)
}

// startA2AAgent serves a on loopback and returns its a2a+http:// reference. With cardHost set,
// the card names its endpoint on that host (the same server, under another name).
func startA2AAgent(t *testing.T, a *a2aAgent, cardHost string) string {
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	host := srv.URL
	if cardHost != "" {
		host = "http://" + cardHost + ":" + srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	}
	mux.Handle("GET /agent"+a2asrv.WellKnownAgentCardPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.cards++
		path := a.rpc
		a.mu.Unlock()
		if path == "" {
			path = "/agent/rpc"
		}
		card := &a2a.AgentCard{Name: "echo", Description: "echoes", URL: host + path, Version: "1", ProtocolVersion: "0.3.0",
			PreferredTransport: a2a.TransportProtocolJSONRPC, DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
			Skills: []a2a.AgentSkill{{ID: "echo", Name: "echo", Description: "echoes", Tags: []string{"echo"}}}}
		a2asrv.NewStaticAgentCardHandler(card).ServeHTTP(w, r)
	}))
	rpc := a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(a))
	mux.Handle("POST /agent/{rpc}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		gone := a.gone[r.URL.Path]
		if !gone {
			a.auth = append(a.auth, r.Header.Get("Authorization"))
		}
		a.mu.Unlock()
		if gone {
			http.NotFound(w, r)
			return
		}
		rpc.ServeHTTP(w, r)
	}))
	return "a2a+http://" + strings.TrimPrefix(srv.URL, "http://") + "/agent"
}

// TestA2ATool: a remote A2A agent used as a tool through the gateway: a call is decided and
// logged like any tools/call; allowed and live, the message reaches the agent with the caller's
// credential and the principal and agent chain in its metadata; a write with live writes off is
// stubbed and reaches nothing; a principal granted only read is denied (sending a message is a
// write unless classified).
func TestA2ATool(t *testing.T) {
	agent := &a2aAgent{}
	ref := startA2AAgent(t, agent, "")
	dir := a2aProject(t, ref)
	keys := []identity.APIKeyConfig{
		{Name: "alice", SHA256: sha(aliceKey), Principal: "user:alice", Groups: []string{"group:eng"}},
		{Name: "bot", SHA256: sha(botKey), Principal: "serviceaccount:bot"},
	}
	live := gateway.Config{}
	live.Auth.APIKeys = keys
	live.LiveWrites.Tools = []string{ref}
	stubbed := gateway.Config{}
	stubbed.Auth.APIKeys = keys

	tests := []struct {
		name    string
		cfg     gateway.Config
		key     string
		outcome string // in the decision log
		want    string // in the result's text
		reached bool   // the message reached the agent
		listed  bool   // tools/list offers the agent
	}{
		{"allowed", live, botKey, "allow", "echo: hello", true, true},
		{"stubbed", stubbed, botKey, "stub", "stub", false, true},
		// Granted read only: an unclassified A2A agent is a write, so it is not listed, and a
		// call is denied (as a tool the agent does not have: it is logged without the reference).
		{"denied", live, aliceKey, "deny", "Lush denied this call", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := agent.seen()
			h := &harness{t: t, dir: dir}
			h.serve(tt.cfg)
			c := h.client("assistant", tt.key)
			if names := toolNames(t, c); tt.listed != (len(names) == 1 && names[0] == "agent") {
				t.Fatalf("tools/list: %v", names)
			}
			res := callTool(t, c, "agent", map[string]any{"message": "hello"})
			if got := text(res); !strings.Contains(got, tt.want) || res.IsError != (tt.outcome == "deny") {
				t.Errorf("result (isError %v): %s", res.IsError, got)
			}
			auth, meta := agent.seen()
			if reached := len(auth) > len(before); reached != tt.reached {
				t.Fatalf("reached the agent: %v, want %v", reached, tt.reached)
			}
			if tt.reached {
				if auth[len(auth)-1] != "Bearer "+botA2AToken {
					t.Errorf("Authorization = %q", auth[len(auth)-1])
				}
				d, _ := meta[len(meta)-1]["dev.lush/delegation"].(map[string]any)
				if d["principal"] != "serviceaccount:bot" || len(d["chain"].([]any)) != 1 || d["chain"].([]any)[0] != "assistant" || d["depth"] != 1.0 {
					t.Errorf("metadata = %v", meta[len(meta)-1])
				}
				if strings.Contains(text(res), botA2AToken) {
					t.Error("the credential reached the result")
				}
			}
			recs := h.events(decisionlog.Filter{Action: "tools/call"})
			if len(recs) != 1 {
				t.Fatalf("decision log: %d tools/call records", len(recs))
			}
			if ev := recs[0].Event; ev.Outcome != tt.outcome || (tt.listed && ev.Tool != ref) || (ev.Credential != nil) != tt.reached {
				t.Errorf("decision log: outcome %s tool %s credential %+v", ev.Outcome, ev.Tool, ev.Credential)
			}
		})
	}
}

// a2aProject writes a project whose agent "assistant" uses the A2A agent ref: serviceaccount:bot
// may write (with a bearer credential), group:eng only read.
func a2aProject(t *testing.T, ref string) string {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "agents/assistant/spec.yaml"), `name: assistant
model: gemini-2.5-flash
description: Asks a remote agent.
tools:
  - server: `+ref+`
    access: write
acl:
  - {principal: group:eng, role: execute}
  - {principal: serviceaccount:bot, role: execute}
`, 0o644)
	writeFile(t, filepath.Join(dir, "lush.yaml"), `project: a2a
service_accounts: [bot]
tool_grants:
  - tool: `+ref+`
    grants:
      - {principal: serviceaccount:bot, access: write}
      - {principal: group:eng, access: read}
mcp_credentials:
  `+ref+`:
    serviceaccount:bot: {type: bearer}
`, 0o644)
	file := vault.OpenFile(filepath.Join(dir, vault.LocalFile))
	if _, err := file.Add(vault.FileEntry{Tool: ref, Principal: "serviceaccount:bot", Credential: vault.Credential{Type: "bearer", Token: botA2AToken}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestA2ACredentialStaysOnItsHost: when the Agent Card names an endpoint on another host than
// the reference, a call that carries a credential fails and sends nothing.
func TestA2ACredentialStaysOnItsHost(t *testing.T) {
	agent := &a2aAgent{}
	ref := startA2AAgent(t, agent, "localhost") // the reference names 127.0.0.1
	cfg := gateway.Config{}
	cfg.Auth.APIKeys = []identity.APIKeyConfig{{Name: "bot", SHA256: sha(botKey), Principal: "serviceaccount:bot"}}
	cfg.LiveWrites.Tools = []string{ref}
	h := &harness{t: t, dir: a2aProject(t, ref)}
	h.serve(cfg)
	res := callTool(t, h.client("assistant", botKey), "agent", map[string]any{"message": "hello"})
	if !res.IsError || !strings.Contains(text(res), "another host") || strings.Count(text(res), "is unavailable") != 1 {
		t.Errorf("result (isError %v): %s", res.IsError, text(res))
	}
	if auth, _ := agent.seen(); len(auth) != 0 {
		t.Errorf("requests reached the agent: %q", auth)
	}
}

// TestA2ACardCache: the gateway fetches a remote agent's card once for many calls; when the
// endpoint of the cached card answers 404 (the agent moved), the card is fetched again and the
// message sent to the new endpoint; when the fresh card names the same endpoint, the message is
// not sent twice and the call fails.
func TestA2ACardCache(t *testing.T) {
	agent := &a2aAgent{}
	ref := startA2AAgent(t, agent, "")
	cfg := gateway.Config{}
	cfg.Auth.APIKeys = []identity.APIKeyConfig{{Name: "bot", SHA256: sha(botKey), Principal: "serviceaccount:bot"}}
	cfg.LiveWrites.Tools = []string{ref}
	h := &harness{t: t, dir: a2aProject(t, ref)}
	h.serve(cfg)
	c := h.client("assistant", botKey)
	state := func() (cards, sent int) {
		agent.mu.Lock()
		defer agent.mu.Unlock()
		return agent.cards, len(agent.auth)
	}

	steps := []struct {
		name        string
		move        func() // changes the agent before the call
		cards, sent int    // totals after the call
		ok          bool
	}{
		{"first call fetches the card", nil, 1, 1, true},
		{"second call uses the cached card", nil, 1, 2, true},
		{"third call too", nil, 1, 3, true},
		{"endpoint moved: refetch and send to the new one", func() { agent.rpc, agent.gone = "/agent/rpc2", map[string]bool{"/agent/rpc": true} }, 2, 4, true},
		{"the new endpoint is cached", nil, 2, 5, true},
		{"endpoint gone, card unchanged: refetch, no second send", func() { agent.gone["/agent/rpc2"] = true }, 3, 5, false},
	}
	for _, s := range steps {
		if s.move != nil {
			agent.mu.Lock()
			s.move()
			agent.mu.Unlock()
		}
		res := callTool(t, c, "agent", map[string]any{"message": "hello"})
		if res.IsError == s.ok || (s.ok && !strings.Contains(text(res), "echo: hello")) {
			t.Errorf("%s: result (isError %v): %s", s.name, res.IsError, text(res))
		}
		if cards, sent := state(); cards != s.cards || sent != s.sent {
			t.Errorf("%s: %d card fetches, %d messages; want %d, %d", s.name, cards, sent, s.cards, s.sent)
		}
	}
}

// TestA2AMessageLength: the message's bound is in characters, as the tool's schema says
// (maxLength 65536): a message of 65536 two-byte characters (128 KiB) reaches the agent whole;
// one more character is refused before anything is sent.
func TestA2AMessageLength(t *testing.T) {
	agent := &a2aAgent{}
	ref := startA2AAgent(t, agent, "")
	cfg := gateway.Config{}
	cfg.Auth.APIKeys = []identity.APIKeyConfig{{Name: "bot", SHA256: sha(botKey), Principal: "serviceaccount:bot"}}
	cfg.LiveWrites.Tools = []string{ref}
	cfg.Limits.Arguments.MaxBytes = 1 << 20
	h := &harness{t: t, dir: a2aProject(t, ref)}
	h.serve(cfg)
	c := h.client("assistant", botKey)
	const limit = 64 << 10
	tests := []struct {
		name    string
		message string
		reached bool
	}{
		{"at the bound", strings.Repeat("é", limit), true},
		{"one character more", strings.Repeat("é", limit+1), false},
		{"ascii at the bound", strings.Repeat("a", limit), true},
	}
	for _, tt := range tests {
		before, _ := agent.seen()
		res := callTool(t, c, "agent", map[string]any{"message": tt.message})
		auth, _ := agent.seen()
		if reached := len(auth) > len(before); reached != tt.reached || res.IsError == tt.reached {
			t.Errorf("%s: reached %v, isError %v: %.200s", tt.name, reached, res.IsError, text(res))
		}
		if tt.reached && !strings.Contains(text(res), "echo: "+tt.message) {
			t.Errorf("%s: the answer does not hold the whole message", tt.name)
		}
	}
}
