package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/server"

	"github.com/lush-agents/lush/examples/authserver/authserver"
	"github.com/lush-agents/lush/test/authtest"
	"github.com/lush-agents/lush/test/mcpserver"
)

const introspectionSecret = "lush-rs-introspection-secret-0123456789"

// headerRecorder is an upstream MCP server (test/mcpserver's tools over streamable HTTP) that
// remembers every Authorization header it receives.
type headerRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (h *headerRecorder) start(t *testing.T) string {
	mcp := server.NewStreamableHTTPServer(mcpserver.New())
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.seen = append(h.seen, r.Header.Values("Authorization")...)
		h.mu.Unlock()
		mcp.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

func (h *headerRecorder) headers() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

// oauthGateway is `lushctl gateway` in front of an upstream that records Authorization headers,
// accepting the tokens of a real authorization server (Hydra, test/authtest) for its agents
// assistant and other.
type oauthGateway struct {
	as              *authserver.Server
	base            string // the gateway's URL
	resource, other string // the agents' MCP endpoints
	rec             *headerRecorder
	dir             string
	p               *proc
}

func startOAuthGateway(t *testing.T) *oauthGateway {
	t.Helper()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	g := &oauthGateway{base: base, resource: base + "/agents/assistant/mcp", other: base + "/agents/other/mcp", rec: &headerRecorder{}}
	g.as = authtest.Start(t, authtest.WithAllowedResources(g.resource, g.other), authtest.WithScopes("mcp:tools"))
	as := g.as
	secretFile := filepath.Join(t.TempDir(), "introspection-secret")
	if err := os.WriteFile(secretFile, []byte(introspectionSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	upstream := g.rec.start(t)
	g.dir = writeProject(t, map[string]string{
		"lush.yaml": `project: oauth-e2e
service_accounts:
  - name: ci-bot
  - name: batch
servers:
  mcp://notes.internal/mcp:
    url: ` + upstream + `
tool_classes:
  mcp://notes.internal/mcp:
    echo: read
tool_grants:
  - tool: mcp://notes.internal/mcp
    grants:
      - {principal: group:engineering, access: read}
      - {principal: serviceaccount:ci-bot, access: read}
      - {principal: serviceaccount:batch, access: read}
`,
		"agents/assistant/spec.yaml": assistantSpec("assistant"),
		"agents/other/spec.yaml":     assistantSpec("other"),
		"gateway.yaml": `auth:
  oauth:
    - issuer: ` + as.Issuer() + `
      scopes: [mcp:tools]
      introspection:
        endpoint: ` + as.IntrospectionURL() + `
        client_id: lush-rs
        client_secret_file: ` + secretFile + `
  api_keys:
    - {name: ops, sha256: ` + sha256hex(meshAlice) + `, principal: user:ops}
`,
	})
	ready := filepath.Join(t.TempDir(), "ready")
	p := startProc(t, nil, lushctlBin, "gateway", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--ready-file", ready,
		"--config", filepath.Join(g.dir, "gateway.yaml"), "--log-level", "debug", g.dir)
	waitReady(t, p, ready)
	if want := "oauth: access tokens of " + as.Issuer(); !strings.Contains(p.out.String(), want) {
		t.Errorf("the gateway does not announce %q:\n%s", want, p.out.String())
	}
	g.p = p
	return g
}

// TestOAuthGateway puts `lushctl gateway` between MCP clients and a real MCP server, with Ory
// Hydra (test/authtest) as the company's authorization server: the gateway discovers Hydra from
// its issuer, a client-credentials token and a user's authorization-code token (with PKCE) each
// call a tool, and the decisions name serviceaccount:<client> and user:<sub>. A token for another
// agent's endpoint, one without the scope, and none at all are refused with the challenges MCP
// clients follow; the upstream never sees a client's token; no token appears in the gateway's
// output.
func TestOAuthGateway(t *testing.T) {
	g := startOAuthGateway(t)
	as, base, resource, other, rec, dir, p := g.as, g.base, g.resource, g.other, g.rec, g.dir, g.p
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// What an MCP client with nothing but the URL sees: a 401 naming the metadata, which names
	// the authorization server.
	resp := post(t, ctx, resource, "")
	challenge := resp.Header.Get("WWW-Authenticate")
	wantMD := base + "/.well-known/oauth-protected-resource/agents/assistant/mcp"
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(challenge, `resource_metadata="`+wantMD+`"`) || !strings.Contains(challenge, `scope="mcp:tools"`) {
		t.Fatalf("unauthenticated: %d %q", resp.StatusCode, challenge)
	}
	var md struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		Scopes               []string `json:"scopes_supported"`
		Bearer               []string `json:"bearer_methods_supported"`
	}
	getJSON(t, ctx, wantMD, http.StatusOK, &md)
	if md.Resource != resource || len(md.AuthorizationServers) != 1 || md.AuthorizationServers[0] != as.Issuer() ||
		strings.Join(md.Scopes, " ") != "mcp:tools" || strings.Join(md.Bearer, " ") != "header" {
		t.Errorf("metadata %+v", md)
	}
	getJSON(t, ctx, base+"/.well-known/oauth-protected-resource/agents/nobody/mcp", http.StatusNotFound, nil)

	// Machine to machine: client credentials.
	if err := as.CreateClient(ctx, authserver.Client{ID: "ci-bot", Secret: "ci-bot-secret-0123456789", GrantTypes: []string{"client_credentials"},
		ResponseTypes: []string{}, Scopes: []string{"mcp:tools"}, Audience: []string{resource, other}}); err != nil {
		t.Fatal(err)
	}
	cc, err := as.ClientCredentialsToken(ctx, "ci-bot", "ci-bot-secret-0123456789", []string{resource}, "mcp:tools")
	if err != nil {
		t.Fatal(err)
	}
	bot := goClient(t, resource, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + cc.AccessToken}))
	if out, isErr := call(t, bot, "echo", map[string]any{"text": "from the bot"}); isErr || out != "from the bot" {
		t.Fatalf("echo as the bot: %q %v", out, isErr)
	}

	// An opaque access token (Hydra's opaque strategy), introspected.
	if err := as.CreateClient(ctx, authserver.Client{ID: "batch", Secret: "batch-secret-0123456789", GrantTypes: []string{"client_credentials"},
		ResponseTypes: []string{}, Scopes: []string{"mcp:tools"}, Audience: []string{resource}, AccessTokenStrategy: "opaque"}); err != nil {
		t.Fatal(err)
	}
	opaque, err := as.ClientCredentialsToken(ctx, "batch", "batch-secret-0123456789", []string{resource}, "mcp:tools")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(opaque.AccessToken, ".") == 2 {
		t.Fatalf("the batch client's token is a JWT, not opaque")
	}
	batch := goClient(t, resource, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + opaque.AccessToken}))
	if out, isErr := call(t, batch, "echo", map[string]any{"text": "from batch"}); isErr || out != "from batch" {
		t.Fatalf("echo with an opaque token: %q %v", out, isErr)
	}
	batch.Close()
	if resp := post(t, ctx, other, opaque.AccessToken); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the opaque token at another agent: %d", resp.StatusCode)
	}

	// A person: authorization code with PKCE, alice logs in and consents.
	app := authserver.Client{ID: "desktop", Secret: "desktop-secret-0123456789", RedirectURIs: []string{"http://127.0.0.1:9/callback"},
		Scopes: []string{"openid", "mcp:tools"}, Audience: []string{resource, other}}
	if err := as.CreateClient(ctx, app); err != nil {
		t.Fatal(err)
	}
	ac, err := as.AuthorizationCodeToken(ctx, app, "alice", resource, []string{"openid", "mcp:tools"})
	if err != nil {
		t.Fatal(err)
	}
	alice := goClient(t, resource, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + ac.AccessToken}))
	if out, isErr := call(t, alice, "echo", map[string]any{"text": "from alice"}); isErr || out != "from alice" {
		t.Fatalf("echo as alice: %q %v", out, isErr)
	}

	// alice's token for the assistant's endpoint at the other agent's: refused.
	resp = post(t, ctx, other, ac.AccessToken)
	if c := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(c, `error="invalid_token"`) ||
		!strings.Contains(c, `resource_metadata="`+base+`/.well-known/oauth-protected-resource/agents/other/mcp"`) {
		t.Errorf("alice's token at another agent: %d %q", resp.StatusCode, c)
	}
	// A token without the scope: 403 insufficient_scope, so the client can step up.
	narrow, err := as.AuthorizationCodeToken(ctx, app, "alice", resource, []string{"openid"})
	if err != nil {
		t.Fatal(err)
	}
	resp = post(t, ctx, resource, narrow.AccessToken)
	if c := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusForbidden || !strings.Contains(c, `error="insufficient_scope"`) || !strings.Contains(c, `scope="mcp:tools"`) {
		t.Errorf("token without the scope: %d %q", resp.StatusCode, c)
	}
	// API keys keep working next to OAuth.
	ops := goClient(t, resource, transport.WithHTTPHeaders(map[string]string{"X-API-Key": meshAlice}))
	ops.Close()

	// The upstream never saw a client's token (it needs none: no Authorization at all).
	for _, h := range rec.headers() {
		t.Errorf("the upstream received an Authorization header: %.20s…", h)
	}
	bot.Close()
	alice.Close()
	if code := p.stop(t); code != 0 {
		t.Errorf("gateway exited %d", code)
	}
	out := p.out.String()
	for _, tok := range []string{cc.AccessToken, ac.AccessToken, narrow.AccessToken, opaque.AccessToken, introspectionSecret} {
		if strings.Contains(out, tok) || strings.Contains(out, tok[len(tok)-20:]) {
			t.Error("the gateway's output holds an access token")
		}
	}
	if !strings.Contains(out, `method=oauth reason=invalid_token`) {
		t.Errorf("the refused token is not logged as an oauth failure:\n%s", out)
	}

	principals := map[string]string{}
	for _, r := range readDecisions(t, filepath.Join(dir, ".lush", "decisions.db")) {
		if r.Event.Action == "tools/call" {
			var in struct {
				Principal struct {
					Authentication string `json:"authentication"`
				} `json:"principal"`
			}
			json.Unmarshal(r.Event.Input, &in)
			principals[r.Event.Principal] = strings.Join(r.Event.Groups, ",") + " " + r.Event.Outcome + " " + in.Principal.Authentication
		}
	}
	want := map[string]string{"serviceaccount:ci-bot": " allow oauth", "serviceaccount:batch": " allow oauth", "user:alice": "group:admins,group:engineering allow oauth"}
	for p, w := range want {
		if principals[p] != w {
			t.Errorf("decision of %s: %q, want %q (all: %v)", p, principals[p], w, principals)
		}
	}
}

// TestOAuthTypeScriptSDK: the official TypeScript SDK's client (1.32), given nothing but the
// endpoint's URL, follows the gateway's 401 to the protected resource metadata and to Hydra, logs
// in (client credentials; and authorization code with PKCE after registering itself
// dynamically, the login app approving its default user, alice), and calls a tool; the decisions
// name the service account and the user.
func TestOAuthTypeScriptSDK(t *testing.T) {
	tools := nodeTools(t)
	g := startOAuthGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := g.as.CreateClient(ctx, authserver.Client{ID: "ci-bot", Secret: "ci-bot-secret-0123456789", GrantTypes: []string{"client_credentials"},
		ResponseTypes: []string{}, Scopes: []string{"mcp:tools"}, Audience: []string{g.resource}}); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(tools, "oauth_client.mjs")
	src, err := os.ReadFile("node/oauth_client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"client credentials", []string{"client_credentials", "ci-bot", "ci-bot-secret-0123456789", "from the bot"}},
		{"authorization code", []string{"authorization_code", "http://127.0.0.1:9/callback", "from alice"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lines := runNode(t, append([]string{script, g.resource}, tt.args...)...)
			var out struct {
				Tools []string `json:"tools"`
				Echo  string   `json:"echo"`
				Error string   `json:"error"`
			}
			if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &out) != nil || out.Error != "" || out.Echo != tt.args[len(tt.args)-1] {
				t.Fatalf("the TS SDK client: %v", lines)
			}
		})
	}
	if code := g.p.stop(t); code != 0 {
		t.Errorf("gateway exited %d", code)
	}
	principals := map[string]bool{}
	for _, r := range readDecisions(t, filepath.Join(g.dir, ".lush", "decisions.db")) {
		if r.Event.Action == "tools/call" && r.Event.Outcome == "allow" {
			principals[r.Event.Principal] = true
		}
	}
	if !principals["serviceaccount:ci-bot"] || !principals["user:alice"] {
		t.Errorf("the tools/call decisions name %v, want serviceaccount:ci-bot and user:alice", principals)
	}
	if n := len(g.rec.headers()); n != 0 {
		t.Errorf("the upstream received %d Authorization headers", n)
	}
}

// waitReady waits for p to write its ready file.
func waitReady(t *testing.T, p *proc, path string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("the process exited:\n%s", p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("the process did not get ready:\n%s", p.out.String())
}

func assistantSpec(name string) string {
	return `name: ` + name + `
model: gemini-2.5-flash
description: Echoes.
tools:
  - server: mcp://notes.internal/mcp
    access: read
acl:
  - principal: group:engineering
    role: execute
  - principal: serviceaccount:ci-bot
    role: execute
  - principal: serviceaccount:batch
    role: execute
`
}

// post sends an MCP initialize to endpoint with token ("" for none) and returns the answer.
func post(t *testing.T, ctx context.Context, endpoint, token string) *http.Response {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func getJSON(t *testing.T, ctx context.Context, u string, status int, v any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s, want %d", u, resp.StatusCode, b, status)
	}
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
	}
}
