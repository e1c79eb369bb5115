package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/lush-agents/lush/examples/authserver/authserver"
	"github.com/lush-agents/lush/test/authtest"
	"github.com/lush-agents/lush/test/mcpserver"
)

// TestOAuthSDKClients logs the official TypeScript SDKs' OAuth clients (@modelcontextprotocol/sdk
// v1 and @modelcontextprotocol/client v2, through test/node/oauth-client.mjs) in to a real
// `lushctl gateway` whose auth.oauth trusts Ory Hydra (test/authtest), next to API keys, in front
// of a real MCP server. With the authorization code flow the client knows nothing but the gateway's
// URL (and its own loopback callback): the SDK gets the 401, reads resource_metadata, discovers
// Hydra, registers dynamically, and a scripted user logs in and consents. With client credentials
// it has a pre-created client id and secret (inherent to that grant). Each lists tools and calls
// one; the decision names user:<sub> (whose groups decide: bob's are not granted the tool) or
// serviceaccount:<client>. carol refuses consent: the client fails with access_denied, nothing is
// executed and the gateway counts the unauthenticated attempt. No token the clients obtained
// appears in the gateway's output or the decision log.
func TestOAuthSDKClients(t *testing.T) {
	node := nodeForOAuth(t)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	resource := base + "/agents/assistant/mcp"
	as := authtest.Start(t, authtest.WithAllowedResources(resource), authtest.WithScopes("mcp:tools"))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	rec := &bodyRecorder{}
	upstream := rec.start(t)
	dir := writeProject(t, map[string]string{
		"lush.yaml": `project: oauth-sdk-e2e
service_accounts:
  - name: ci-bot
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
`,
		"agents/assistant/spec.yaml": `name: assistant
model: gemini-2.5-flash
description: Echoes.
tools:
  - server: mcp://notes.internal/mcp
    access: read
acl:
  - principal: group:engineering
    role: execute
  - principal: group:sales
    role: execute
  - principal: serviceaccount:ci-bot
    role: execute
`,
		"gateway.yaml": `auth:
  oauth:
    - issuer: ` + as.Issuer() + `
      scopes: [mcp:tools]
  api_keys:
    - {name: ops, sha256: ` + sha256hex(meshAlice) + `, principal: user:ops}
`,
	})
	ready := filepath.Join(t.TempDir(), "ready")
	gw := startProc(t, nil, lushctlBin, "gateway", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--ready-file", ready,
		"--config", filepath.Join(dir, "gateway.yaml"), "--log-level", "debug", dir)
	waitReady(t, gw, ready)

	const botID, botSecret = "ci-bot", "ci-bot-secret-0123456789"
	if err := as.CreateClient(ctx, authserver.Client{ID: botID, Secret: botSecret, GrantTypes: []string{"client_credentials"},
		ResponseTypes: []string{}, Scopes: []string{"mcp:tools"}, Audience: []string{resource}}); err != nil {
		t.Fatal(err)
	}
	// The client's own callback: the headless flow stops at the redirect to it (nothing listens).
	callback := fmt.Sprintf("http://127.0.0.1:%d/callback", freePort(t))

	type want struct {
		fatal     string // a substring of the client's fatal error; "" when it logs in
		principal string // the decision's principal
		outcome   string // the tools/call decision's outcome
		groups    string
		called    bool // the upstream ran the tool (and its answer came back)
		listed    bool // tools/list shows echo
	}
	cases := []struct {
		name, sdk, flow, user string
		want                  want
	}{
		{"v1 client credentials", "v1", "client_credentials", "", want{principal: "serviceaccount:ci-bot", outcome: "allow", called: true, listed: true}},
		{"v2 client credentials", "v2", "client_credentials", "", want{principal: "serviceaccount:ci-bot", outcome: "allow", called: true, listed: true}},
		{"v1 code alice", "v1", "code", "alice", want{principal: "user:alice", outcome: "allow", groups: "group:admins,group:engineering", called: true, listed: true}},
		{"v2 code alice", "v2", "code", "alice", want{principal: "user:alice", outcome: "allow", groups: "group:admins,group:engineering", called: true, listed: true}},
		{"v1 code bob (sales: no grant)", "v1", "code", "bob", want{principal: "user:bob", outcome: "deny", groups: "group:sales"}},
		{"v2 code bob (sales: no grant)", "v2", "code", "bob", want{principal: "user:bob", outcome: "deny", groups: "group:sales"}},
		{"v1 code carol refuses consent", "v1", "code", "carol", want{fatal: "authorization failed: access_denied (the user denied consent)"}},
		{"v2 code carol refuses consent", "v2", "code", "carol", want{fatal: "authorization failed: access_denied (the user denied consent)"}},
	}
	var tokens []string
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Each call's text is unique, so the decision and the upstream's answer are this case's.
			text := fmt.Sprintf("case %d from %s", i, tc.name)
			tokenFile := filepath.Join(t.TempDir(), "tokens.json")
			opts := map[string]any{"tokenFile": tokenFile}
			if tc.flow == "client_credentials" {
				opts["clientId"], opts["clientSecret"], opts["expectedIssuer"] = botID, botSecret, as.Issuer()
				if tc.sdk == "v1" {
					// SDK v1 asks for client credentials with its configured scope only, not the
					// one the challenge or the resource metadata names (v2 does).
					opts["scope"] = "mcp:tools"
				}
			} else {
				opts["redirectUrl"] = callback
				if err := as.SetNextUser(tc.user); err != nil {
					t.Fatal(err)
				}
			}
			failuresBefore := authFailures(t, ctx, base, "none", "missing_credentials")
			lines, code := runOAuthClient(t, ctx, node, tc.sdk, tc.flow, resource, opts,
				[]map[string]any{{"list": true}, {"call": "echo", "arguments": map[string]any{"text": text}}})
			t.Logf("client output (exit %d):\n%s", code, strings.Join(lines, "\n"))
			var access string
			if b, err := os.ReadFile(tokenFile); err == nil {
				access = jsonField(b, "access_token")
				for _, tok := range []string{access, jsonField(b, "refresh_token")} {
					if tok != "" {
						tokens = append(tokens, tok)
					}
				}
			}

			if tc.want.fatal != "" {
				if code == 0 || len(lines) != 1 || !strings.Contains(lines[0], `"fatal"`) || !strings.Contains(lines[0], tc.want.fatal) {
					t.Fatalf("the client should fail with %q: exit %d, output:\n%s", tc.want.fatal, code, strings.Join(lines, "\n"))
				}
				if rec.received(text) {
					t.Error("the upstream received the call of a client that did not log in")
				}
				if after := authFailures(t, ctx, base, "none", "missing_credentials"); after <= failuresBefore {
					t.Errorf("the unauthenticated attempt is not counted: lush_authentication_failures_total{method=none,reason=missing_credentials} %v → %v", failuresBefore, after)
				}
				return
			}
			if code != 0 || len(lines) != 3 {
				t.Fatalf("client exit %d, output:\n%s", code, strings.Join(lines, "\n"))
			}
			var login struct {
				Login struct {
					Flow        string `json:"flow"`
					Registered  bool   `json:"registered"`
					Interactive bool   `json:"interactive"`
				} `json:"login"`
			}
			if err := json.Unmarshal([]byte(lines[0]), &login); err != nil || login.Login.Flow != tc.flow {
				t.Fatalf("login line %q: %v", lines[0], err)
			}
			if tc.flow == "code" && (!login.Login.Registered || !login.Login.Interactive) {
				t.Errorf("the code flow should register dynamically and log in: %s", lines[0])
			}
			// The token the SDK got is for this resource (RFC 8707), and names the user or the client.
			claims := jwtClaims(t, access)
			sub, _ := claims["sub"].(string)
			if aud, _ := claims["aud"].([]any); !slices.Contains(aud, any(resource)) || "user:"+sub != tc.want.principal && "serviceaccount:"+sub != tc.want.principal {
				t.Errorf("the access token's aud %v and sub %q, want [%s] and the principal %s", claims["aud"], sub, resource, tc.want.principal)
			}
			var list struct {
				Tools []string `json:"tools"`
			}
			if err := json.Unmarshal([]byte(lines[1]), &list); err != nil || slices.Contains(list.Tools, "echo") != tc.want.listed {
				t.Errorf("tools/list (want echo listed: %v): %s", tc.want.listed, lines[1])
			}
			var res struct {
				Result struct {
					Content []struct {
						Text string `json:"text"`
					} `json:"content"`
					IsError bool `json:"isError"`
				} `json:"result"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal([]byte(lines[2]), &res); err != nil {
				t.Fatalf("tools/call line %q: %v", lines[2], err)
			}
			answered := !res.Result.IsError && res.Error == "" && len(res.Result.Content) == 1 && res.Result.Content[0].Text == text
			if answered != tc.want.called || rec.received(text) != tc.want.called {
				t.Errorf("tools/call echo (want it run: %v; the upstream received it: %v): %s", tc.want.called, rec.received(text), lines[2])
			}
			if !tc.want.called && !strings.Contains(lines[2], "Lush denied this call: principal "+tc.want.principal+" holds no grant") {
				t.Errorf("the denial does not say so: %s", lines[2])
			}
		})
	}

	// The upstream never saw a client's token.
	for _, h := range rec.authorizations() {
		t.Errorf("the upstream received an Authorization header: %.20s…", h)
	}
	if code := gw.stop(t); code != 0 {
		t.Errorf("gateway exited %d", code)
	}
	if len(tokens) < 4 {
		t.Errorf("the clients reported %d tokens, want at least 4 (one per login)", len(tokens))
	}

	// The decisions name who called, with the groups that decided; nothing of carol's.
	records := readDecisions(t, filepath.Join(dir, ".lush", "decisions.db"))
	logged, _ := json.Marshal(records)
	type seen struct{ principal, outcome, groups, authn string }
	byText := map[string]seen{}
	for _, r := range records {
		if r.Event.Action != "tools/call" {
			continue
		}
		var in struct {
			Principal struct {
				Authentication string `json:"authentication"`
			} `json:"principal"`
			Arguments struct {
				Text string `json:"text"`
			} `json:"arguments"`
		}
		if err := json.Unmarshal(r.Event.Input, &in); err != nil {
			t.Fatalf("decision input: %v", err)
		}
		byText[in.Arguments.Text] = seen{r.Event.Principal, r.Event.Outcome, strings.Join(r.Event.Groups, ","), in.Principal.Authentication}
	}
	for i, tc := range cases {
		text := fmt.Sprintf("case %d from %s", i, tc.name)
		got, ok := byText[text]
		switch {
		case tc.want.fatal != "" && ok:
			t.Errorf("%s: a decision was logged though the login failed: %+v", tc.name, got)
		case tc.want.fatal == "" && got != (seen{tc.want.principal, tc.want.outcome, tc.want.groups, "oauth"}):
			t.Errorf("%s: decision %+v, want %+v (all: %+v)", tc.name, got, seen{tc.want.principal, tc.want.outcome, tc.want.groups, "oauth"}, byText)
		}
	}

	// No token the clients obtained is in the gateway's output or the decision log.
	out := gw.out.String()
	for _, tok := range tokens {
		for _, where := range []struct{ name, text string }{{"the gateway's output", out}, {"the decision log", string(logged)}} {
			if strings.Contains(where.text, tok) || strings.Contains(where.text, tok[len(tok)-20:]) {
				t.Errorf("%s holds a token the client obtained", where.name)
			}
		}
	}
}

// bodyRecorder is an upstream MCP server (test/mcpserver's tools over streamable HTTP) that
// remembers the Authorization headers and the bodies of the requests it receives.
type bodyRecorder struct {
	mu      sync.Mutex
	headers []string
	bodies  [][]byte
}

func (b *bodyRecorder) start(t *testing.T) string {
	mcp := server.NewStreamableHTTPServer(mcpserver.New())
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.headers = append(b.headers, r.Header.Values("Authorization")...)
		b.bodies = append(b.bodies, body)
		b.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		mcp.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// received reports whether a request body held text.
func (b *bodyRecorder) received(text string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.ContainsFunc(b.bodies, func(body []byte) bool { return bytes.Contains(body, []byte(text)) })
}

// authorizations are the Authorization headers received.
func (b *bodyRecorder) authorizations() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.headers)
}

// nodeForOAuth is Node 22 from .tools/node with test/node/oauth-client.mjs copied next to the SDKs
// (ES modules resolve packages from the script's directory). Unlike nodeTools it fails, never
// skips, when the tools are missing.
func nodeForOAuth(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("LUSH_NODE_PREFIX")
	if dir == "" {
		dir = mustAbs(t, "../.tools/node")
	}
	node := filepath.Join(dir, "node_modules", ".bin", "node")
	for _, p := range []string{node, filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk"), filepath.Join(dir, "node_modules", "@modelcontextprotocol", "client")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is missing: run make node-tools", p)
		}
	}
	src, err := os.ReadFile("node/oauth-client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oauth-client.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	return node
}

// runOAuthClient runs oauth-client.mjs and returns its output lines and exit code; it fails t
// when node cannot run or ctx ends.
func runOAuthClient(t *testing.T, ctx context.Context, node, sdk, flow, url string, opts map[string]any, script []map[string]any) ([]string, int) {
	t.Helper()
	o, _ := json.Marshal(opts)
	s, _ := json.Marshal(script)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(node))), "oauth-client.mjs"), sdk, flow, url, string(o), string(s))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok || ctx.Err() != nil {
			t.Fatalf("node oauth-client.mjs %s %s: %v\n%s", sdk, flow, err, stderr.String())
		}
		code = ee.ExitCode()
	}
	if stderr.Len() > 0 {
		t.Logf("node stderr:\n%s", stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, code
}

// authFailures reads lush_authentication_failures_total{method,reason} from the gateway's
// /metrics (0 when the series does not exist yet).
func authFailures(t *testing.T, ctx context.Context, base, method, reason string) float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	req.Header.Set("X-API-Key", meshAlice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "lush_authentication_failures_total{") &&
			strings.Contains(line, `method="`+method+`"`) && strings.Contains(line, `reason="`+reason+`"`) {
			var v float64
			fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v)
			return v
		}
	}
	return 0
}

// jwtClaims decodes the claims of JWT tok without verifying it (the gateway verified it).
func jwtClaims(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("the access token is not a JWT (%d parts)", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("decode the access token's claims: %v", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(b, &claims); err != nil {
		t.Fatalf("decode the access token's claims: %v", err)
	}
	return claims
}

// jsonField is the string field name of the JSON object b ("" when absent).
func jsonField(b []byte, name string) string {
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	s, _ := m[name].(string)
	return s
}
