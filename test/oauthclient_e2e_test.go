package test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/lush-agents/lush/examples/authserver/authserver"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/test/authtest"
	"github.com/lush-agents/lush/test/oauthupstream"
	"github.com/lush-agents/lush/vault/oauth"
)

// TestUpstreamOAuth runs `lushctl gateway` as an OAuth client of an upstream MCP server that
// requires OAuth (test/oauthupstream), with the real authorization servers (Hydra and the
// token-exchange server): alice, logged in at Hydra, calls through the gateway and the upstream
// receives a token exchanged for it (sub alice, act agent:crm), never alice's own token; a service
// account's call carries a client-credentials token; a user who authenticated with an API key is
// denied with what to do. Decisions record how each credential was obtained. No token appears in
// the gateway's output, the decision log or the audit query.
func TestUpstreamOAuth(t *testing.T) {
	const gatewayResource = "https://lush.example.com"
	ctx := context.Background()
	dir := t.TempDir()
	up := oauthupstream.Start(t)

	// The key Lush signs actor tokens with; the exchange server trusts its public half.
	actorKey, trusted := newActorKey(t, dir)

	as := authtest.Start(t, authtest.WithAllowedResources(gatewayResource, up.URL), authtest.WithExchange(authserver.ExchangeConfig{
		Clients: []authserver.ExchangeClient{{ID: "lush-gateway", Secret: "exchange-secret-0123"}}, TrustedActorKeys: trusted}))
	up.Trust(oauthupstream.Issuer{Issuer: as.ExchangeIssuer(), JWKSURL: as.ExchangeJWKSURL()}, oauthupstream.Issuer{Issuer: as.Issuer(), JWKSURL: as.JWKSURL()})
	app := authserver.Client{ID: "desktop-app", Secret: "app-secret-0123456789", RedirectURIs: []string{"http://127.0.0.1:9/cb"},
		Scopes: []string{"openid"}, Audience: []string{gatewayResource}}
	if err := as.CreateClient(ctx, app); err != nil {
		t.Fatal(err)
	}
	if err := as.CreateClient(ctx, authserver.Client{ID: "lush-cc", Secret: "cc-secret-0123456789", GrantTypes: []string{"client_credentials"},
		Audience: []string{up.URL}}); err != nil {
		t.Fatal(err)
	}
	alice, err := as.AuthorizationCodeToken(ctx, app, "alice", gatewayResource, []string{"openid"})
	if err != nil {
		t.Fatal(err)
	}

	project := filepath.Join(dir, "project")
	write := func(rel, content string) {
		p := filepath.Join(project, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("agents/crm/spec.yaml", "name: crm\nmodel: gemini-2.5-flash\ndescription: Reads the CRM.\ntools:\n  - server: mcp://crm.example.com/mcp\n    access: read\n"+
		"acl:\n  - {principal: group:engineering, role: execute}\n  - {principal: serviceaccount:nightly, role: execute}\n")
	write("lush.yaml", `project: oauth-e2e
service_accounts:
  - name: nightly
servers:
  mcp://crm.example.com/mcp:
    url: `+up.URL+`
tool_classes:
  mcp://crm.example.com/mcp:
    whoami: read
tool_grants:
  - tool: mcp://crm.example.com/mcp
    grants:
      - {principal: group:engineering, access: read}
      - {principal: serviceaccount:nightly, access: read}
mcp_credentials:
  mcp://crm.example.com/mcp:
    group:engineering: {type: oauth, flow: token_exchange}
    serviceaccount:nightly: {type: oauth, flow: client_credentials}
`)
	const nightlyKey, daveKey = "nightly-key-0123456789", "dave-key-0123456789"
	digest := func(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }
	exSecret, ccSecret := filepath.Join(dir, "exchange.secret"), filepath.Join(dir, "cc.secret")
	writeFile600(t, exSecret, "exchange-secret-0123\n")
	writeFile600(t, ccSecret, "cc-secret-0123456789\n")
	cfg := filepath.Join(dir, "gateway.yaml")
	writeFile600(t, cfg, `auth:
  jwt:
    - issuer: `+as.Issuer()+`
      audiences: [`+gatewayResource+`]
      jwks_url: `+as.JWKSURL()+`
  api_keys:
    - {name: nightly, sha256: `+digest(nightlyKey)+`, principal: serviceaccount:nightly}
    - {name: dave, sha256: `+digest(daveKey)+`, principal: user:dave, groups: [group:engineering]}
credentials:
  oauth:
    token_exchange:
      issuer: `+as.ExchangeIssuer()+`
      client_id: lush-gateway
      client_secret_file: `+exSecret+`
      actor:
        key_file: `+actorKey+`
    clients:
      - issuer: `+as.Issuer()+`
        client_id: lush-cc
        client_secret_file: `+ccSecret+`
        servers: [mcp://crm.example.com/mcp]
`)
	base, gw := startOwnGateway(t, project, "127.0.0.1:0", "--config", cfg, "--log-level", "debug")
	endpoint := base + "/agents/crm/mcp"

	var answers []string
	asAlice := goClient(t, endpoint, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + alice.AccessToken}))
	text, isErr := call(t, asAlice, "whoami", nil)
	answers = append(answers, text)
	if isErr || text != "subject alice" {
		t.Fatalf("alice's call: %q", text)
	}
	asNightly := goClient(t, endpoint, transport.WithHTTPHeaders(map[string]string{"X-API-Key": nightlyKey}))
	text, isErr = call(t, asNightly, "whoami", nil)
	answers = append(answers, text)
	if isErr || text != "subject lush-cc" {
		t.Fatalf("the service account's call: %q", text)
	}
	asDave := goClient(t, endpoint, transport.WithHTTPHeaders(map[string]string{"X-API-Key": daveKey}))
	text, isErr = call(t, asDave, "whoami", nil)
	answers = append(answers, text)
	if !isErr || !strings.Contains(text, "needs the caller's own OAuth access token") || !strings.Contains(text, "Log in with OAuth") {
		t.Fatalf("dave (API key) should be told to log in with OAuth: %q", text)
	}

	calls := up.Calls()
	if len(calls) != 2 {
		t.Fatalf("the upstream served %d calls, want 2: %+v (refused: %v)", len(calls), calls, up.Refused())
	}
	ex, cc := calls[0], calls[1]
	if ex.Subject != "alice" || ex.Issuer != as.ExchangeIssuer() || !slices.Equal(ex.Act, []string{"agent:crm"}) || !slices.Contains(ex.Audience, up.URL) {
		t.Errorf("alice's call carried sub %q iss %q act %v aud %v: want an exchanged token for alice, act agent:crm", ex.Subject, ex.Issuer, ex.Act, ex.Audience)
	}
	if ex.Token == alice.AccessToken {
		t.Error("the gateway passed alice's own token through to the upstream")
	}
	if cc.ClientID != "lush-cc" || cc.Issuer != as.Issuer() || len(cc.Act) != 0 {
		t.Errorf("the service account's call carried client %q iss %q act %v: want a client credentials token", cc.ClientID, cc.Issuer, cc.Act)
	}

	for _, c := range []interface{ Close() error }{asAlice, asNightly, asDave} {
		c.Close()
	}
	if code := gw.stop(t); code != 0 {
		t.Fatalf("gateway exit %d", code)
	}
	logPath := filepath.Join(project, ".lush", "decisions.db")
	audit := runLushctl(t, "audit", "query", "--log", logPath, "-o", "json")
	for _, want := range []string{`"obtained":"exchange"`, `"act":["agent:crm"]`, `"obtained":"client_credentials"`, "lush.credentials.oauth_login_required"} {
		if !strings.Contains(strings.ReplaceAll(audit, " ", ""), want) {
			t.Errorf("the audit query lacks %s:\n%s", want, audit)
		}
	}
	var db []string
	for _, f := range []string{logPath, logPath + "-wal"} {
		b, _ := os.ReadFile(f)
		db = append(db, string(b))
	}
	outputs := map[string]string{"gateway output": gw.out.String(), "decision log files": strings.Join(db, ""), "audit query": audit,
		"answers": strings.Join(answers, "\n")}
	secrets := map[string]string{"alice's token": alice.AccessToken, "exchanged token": ex.Token, "client credentials token": cc.Token,
		"exchange secret": "exchange-secret-0123", "client secret": "cc-secret-0123456789"}
	for where, out := range outputs {
		for what, s := range secrets {
			if strings.Contains(out, s) || strings.Contains(out, s[len(s)-min(len(s), 40):]) {
				t.Errorf("%s holds %s", where, what)
			}
		}
	}
}

// startOwnGateway starts `lushctl gateway` on listen for a project that uses no npm servers
// (startGateway needs the npm tools), and returns its base URL.
func startOwnGateway(t *testing.T, project, listen string, args ...string) (string, *proc) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	p := startProc(t, nil, lushctlBin, append([]string{"gateway", "--listen", listen, "--ready-file", ready}, append(args, project)...)...)
	waitReady(t, p, ready)
	addr, err := os.ReadFile(ready)
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + string(addr), p
}

func writeFile600(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestUpstreamOAuthAuthorizationCode: bob's first call to a server declared with flow
// authorization_code is denied with the command to run; `lushctl auth login` (headless: the
// test's browser follows Hydra's redirects to the loopback redirect) stores his grant; his calls
// then carry his own token from the upstream's authorization server, refreshed before it expires;
// `lushctl auth remove --config` revokes the refresh token; after the consent is revoked upstream,
// the failed refresh is a denial that says to log in again. No token appears in any output.
func TestUpstreamOAuthAuthorizationCode(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	up := oauthupstream.Start(t)
	// An access token that lives 30s is refreshed on every call (the gateway refreshes a minute
	// before expiry), so the refresh path runs without waiting.
	as := authtest.Start(t, authtest.WithAllowedResources(up.URL), authtest.WithTokenTTL(30*time.Second, time.Hour))
	up.Trust(oauthupstream.Issuer{Issuer: as.Issuer(), JWKSURL: as.JWKSURL()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	redirectAddr := ln.Addr().String()
	ln.Close()
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gatewayAddr := ln.Addr().String()
	ln.Close()
	crm := authserver.Client{ID: "lush-crm", Secret: "crm-secret-0123456789",
		RedirectURIs: []string{"http://" + redirectAddr + "/callback", "http://" + gatewayAddr + "/oauth/callback"},
		GrantTypes:   []string{"authorization_code", "refresh_token"}, Scopes: []string{"offline_access"}, Audience: []string{up.URL}}
	if err := as.CreateClient(ctx, crm); err != nil {
		t.Fatal(err)
	}

	project := filepath.Join(dir, "project")
	os.MkdirAll(filepath.Join(project, "agents", "crm"), 0o755)
	writeFile600(t, filepath.Join(project, "agents", "crm", "spec.yaml"), "name: crm\nmodel: gemini-2.5-flash\ndescription: Reads the CRM.\ntools:\n  - server: mcp://crm.example.com/mcp\n    access: read\n"+
		"acl:\n  - {principal: group:sales, role: execute}\n")
	writeFile600(t, filepath.Join(project, "lush.yaml"), `project: oauth-code-e2e
servers:
  mcp://crm.example.com/mcp:
    url: `+up.URL+`
tool_classes:
  mcp://crm.example.com/mcp:
    whoami: read
tool_grants:
  - tool: mcp://crm.example.com/mcp
    grants:
      - {principal: group:sales, access: read}
mcp_credentials:
  mcp://crm.example.com/mcp:
    group:sales: {type: oauth, flow: authorization_code, scopes: [offline_access]}
`)
	const bobKey = "bob-key-0123456789"
	sum := sha256.Sum256([]byte(bobKey))
	secretFile := filepath.Join(dir, "crm.secret")
	writeFile600(t, secretFile, crm.Secret+"\n")
	cfg := filepath.Join(dir, "gateway.yaml")
	writeFile600(t, cfg, `auth:
  api_keys:
    - {name: bob, sha256: `+hex.EncodeToString(sum[:])+`, principal: user:bob, groups: [group:sales]}
credentials:
  oauth:
    redirect_url: http://`+gatewayAddr+`/oauth/callback
    clients:
      - issuer: `+as.Issuer()+`
        client_id: lush-crm
        client_secret_file: `+secretFile+`
        servers: [mcp://crm.example.com/mcp]
`)
	base, gw := startOwnGateway(t, project, gatewayAddr, "--config", cfg, "--log-level", "debug")
	asBob := goClient(t, base+"/agents/crm/mcp", transport.WithHTTPHeaders(map[string]string{"X-API-Key": bobKey}))
	defer asBob.Close()
	var answers []string
	whoami := func() (string, bool) {
		text, isErr := call(t, asBob, "whoami", nil)
		answers = append(answers, text)
		return text, isErr
	}
	const loginCmd = "lushctl auth login mcp://crm.example.com/mcp --principal user:bob"
	loginURL := "http://" + gatewayAddr + "/oauth/login?server=mcp%3A%2F%2Fcrm.example.com%2Fmcp"
	if text, isErr := whoami(); !isErr || !strings.Contains(text, loginCmd) || !strings.Contains(text, "no grant is stored") || !strings.Contains(text, "or open "+loginURL) {
		t.Fatalf("before login: %q, want a denial naming %q and %s", text, loginCmd, loginURL)
	}

	login := func() string {
		t.Helper()
		p := startProc(t, nil, lushctlBin, "auth", "login", "mcp://crm.example.com/mcp", "--principal", "user:bob", "--config", cfg,
			"--listen", redirectAddr, "-C", project)
		waitFor(t, p, "Open this URL", 30*time.Second)
		authURL := regexp.MustCompile(`http://\S+`).FindString(p.out.String()[strings.Index(p.out.String(), "Open this URL"):])
		if err := as.SetNextUser("bob"); err != nil {
			t.Fatal(err)
		}
		jar, _ := cookiejar.New(nil)
		browser := &http.Client{Jar: jar, Timeout: 30 * time.Second}
		resp, err := browser.Get(authURL)
		if err != nil {
			t.Fatalf("the browser: %v\n%s", err, p.out.String())
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		<-p.done
		if code := p.cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(string(page), "Access granted") {
			t.Fatalf("auth login: exit %d, page %q\n%s", code, page, p.out.String())
		}
		return p.out.String()
	}
	loginOut := login()
	if !strings.Contains(loginOut, "with a refresh token") {
		t.Fatalf("auth login: %s", loginOut)
	}
	stored := func() (access, refresh string) {
		b, err := os.ReadFile(filepath.Join(project, ".lush", "credentials.local"))
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Credentials []struct {
				Token        string `json:"token"`
				RefreshToken string `json:"refresh_token"`
			} `json:"credentials"`
		}
		if err := json.Unmarshal(b, &f); err != nil || len(f.Credentials) != 1 {
			t.Fatalf("credentials file: %v %s", err, b)
		}
		return f.Credentials[0].Token, f.Credentials[0].RefreshToken
	}
	firstAccess, firstRefresh := stored()
	if list := runLushctl(t, "auth", "list", "-C", project); !strings.Contains(list, "OAuth grant from "+as.Issuer()+", refreshable") {
		t.Errorf("auth list does not describe the grant:\n%s", list)
	}
	if text, isErr := whoami(); isErr || text != "subject bob" {
		t.Fatalf("after login: %q", text)
	}
	refreshedAccess, refreshedRefresh := stored()
	if refreshedAccess == firstAccess {
		t.Error("the access token about to expire was not refreshed and stored")
	}
	calls := up.Calls()
	if len(calls) != 1 || calls[0].Subject != "bob" || calls[0].ClientID != "lush-crm" || calls[0].Issuer != as.Issuer() || calls[0].Token != refreshedAccess {
		t.Fatalf("the upstream saw %+v, want bob's refreshed token from lush-crm", calls)
	}

	// auth remove revokes the refresh token at Hydra (RFC 7009), then deletes the grant.
	if !active(t, as.IntrospectionURL(), refreshedRefresh) {
		t.Fatal("the stored refresh token is not active before auth remove")
	}
	out := runLushctl(t, "auth", "remove", "mcp://crm.example.com/mcp", "--principal", "user:bob", "--config", cfg, "-C", project)
	if active(t, as.IntrospectionURL(), refreshedRefresh) {
		t.Errorf("the refresh token is still active after auth remove:\n%s", out)
	}
	if text, isErr := whoami(); !isErr || !strings.Contains(text, "no grant is stored") {
		t.Fatalf("after auth remove: %q", text)
	}

	// The login URL the denial carries, as bob's browser follows it: authenticated at the
	// gateway, then Hydra's login and consent, then the gateway's callback stores the grant.
	if err := as.SetNextUser("bob"); err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	first := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, loginURL, nil)
	req.Header.Set("X-API-Key", bobKey)
	resp, err := first.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), as.Issuer()) {
		t.Fatalf("GET /oauth/login: %s to %q, want a redirect to the authorization server", resp.Status, resp.Header.Get("Location"))
	}
	resp, err = browser.Get(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "Access granted: Lush now calls mcp://crm.example.com/mcp as user:bob") {
		t.Fatalf("the gateway's callback: %s %q", resp.Status, page)
	}
	if text, isErr := whoami(); isErr || text != "subject bob" {
		t.Fatalf("after the login through the gateway: %q", text)
	}
	// A state is used once.
	resp, err = browser.Get(resp.Request.URL.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a callback replayed: %s, want 400", resp.Status)
	}

	// A grant revoked upstream: the refresh fails, and the denial says what to run.
	if err := as.RevokeConsent(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if text, isErr := whoami(); !isErr || !strings.Contains(text, "refused when it was refreshed") || !strings.Contains(text, loginCmd) {
		t.Fatalf("after the consent was revoked: %q", text)
	}

	if code := gw.stop(t); code != 0 {
		t.Fatalf("gateway exit %d", code)
	}
	logPath := filepath.Join(project, ".lush", "decisions.db")
	audit := runLushctl(t, "audit", "query", "--log", logPath, "-o", "json")
	if !strings.Contains(strings.ReplaceAll(audit, " ", ""), `"obtained":"stored_grant"`) || !strings.Contains(audit, "lush.credentials.oauth_login_required") {
		t.Errorf("the audit query lacks the stored grant's provenance or the login denials:\n%s", audit)
	}
	var db []string
	for _, f := range []string{logPath, logPath + "-wal"} {
		b, _ := os.ReadFile(f)
		db = append(db, string(b))
	}
	outputs := map[string]string{"gateway output": gw.out.String(), "decision log files": strings.Join(db, ""), "audit query": audit,
		"answers": strings.Join(answers, "\n"), "auth login output": loginOut, "auth remove output": out}
	for where, o := range outputs {
		for what, s := range map[string]string{"the first access token": firstAccess, "the first refresh token": firstRefresh,
			"the refreshed access token": refreshedAccess, "the refreshed refresh token": refreshedRefresh, "the client secret": crm.Secret} {
			if strings.Contains(o, s) {
				t.Errorf("%s holds %s", where, what)
			}
		}
	}
}

// active asks Hydra's introspection endpoint (RFC 7662, admin side) whether token is active.
func active(t *testing.T, introspection, token string) bool {
	t.Helper()
	resp, err := http.PostForm(introspection, url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Active bool `json:"active"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("introspection: %s: %v", resp.Status, err)
	}
	return r.Active
}

// TestUpstreamOAuthAgentChain runs `lushctl run` (gateway and agentd in one process, the
// scripted model): alice, logged in at Hydra, asks agent planner, which calls agent writer
// (lush://writer), which calls the upstream. The upstream receives a token exchanged for alice
// whose act claim is writer acting for planner: user ← planner ← writer.
func TestUpstreamOAuthAgentChain(t *testing.T) {
	const gatewayResource = "https://lush.example.com"
	ctx := context.Background()
	dir := t.TempDir()
	up := oauthupstream.Start(t)
	actorKey, trusted := newActorKey(t, dir)
	as := authtest.Start(t, authtest.WithAllowedResources(gatewayResource, up.URL), authtest.WithExchange(authserver.ExchangeConfig{
		Clients: []authserver.ExchangeClient{{ID: "lush-gateway", Secret: "exchange-secret-0123"}}, TrustedActorKeys: trusted}))
	up.Trust(oauthupstream.Issuer{Issuer: as.ExchangeIssuer(), JWKSURL: as.ExchangeJWKSURL()})
	app := authserver.Client{ID: "desktop-app", Secret: "app-secret-0123456789", RedirectURIs: []string{"http://127.0.0.1:9/cb"},
		Scopes: []string{"openid"}, Audience: []string{gatewayResource}}
	if err := as.CreateClient(ctx, app); err != nil {
		t.Fatal(err)
	}
	alice, err := as.AuthorizationCodeToken(ctx, app, "alice", gatewayResource, []string{"openid"})
	if err != nil {
		t.Fatal(err)
	}

	project := filepath.Join(dir, "project")
	files := map[string]string{
		"agents/planner/spec.yaml": "name: planner\nmodel: gemini-2.5-flash\ndescription: Plans.\ntools:\n  - server: lush://writer\n    access: read\nacl:\n  - {principal: group:engineering, role: execute}\n",
		"agents/writer/spec.yaml":  "name: writer\nmodel: gemini-2.5-flash\ndescription: Writes.\ntools:\n  - server: mcp://crm.example.com/mcp\n    access: read\nacl:\n  - {principal: group:engineering, role: execute}\n",
		"scripts/planner.yaml":     "turns:\n  - calls:\n      - name: writer\n        args: {message: \"who am I at the CRM?\"}\n  - text: \"planner: {{result}}\"\n",
		"scripts/writer.yaml":      "turns:\n  - calls:\n      - name: whoami\n        args: {}\n  - text: \"writer: {{result}}\"\n",
		"lush.yaml": `project: oauth-chain-e2e
servers:
  mcp://crm.example.com/mcp:
    url: ` + up.URL + `
tool_classes:
  mcp://crm.example.com/mcp:
    whoami: read
tool_grants:
  - tool: mcp://crm.example.com/mcp
    grants:
      - {principal: group:engineering, access: read}
  - tool: lush://writer
    grants:
      - {principal: group:engineering, access: read}
mcp_credentials:
  mcp://crm.example.com/mcp:
    group:engineering: {type: oauth, flow: token_exchange}
`,
	}
	for rel, content := range files {
		p := filepath.Join(project, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		writeFile600(t, p, content)
	}
	exSecret := filepath.Join(dir, "exchange.secret")
	writeFile600(t, exSecret, "exchange-secret-0123\n")
	cfg := filepath.Join(dir, "gateway.yaml")
	writeFile600(t, cfg, `auth:
  jwt:
    - issuer: `+as.Issuer()+`
      audiences: [`+gatewayResource+`]
      jwks_url: `+as.JWKSURL()+`
credentials:
  oauth:
    token_exchange:
      issuer: `+as.ExchangeIssuer()+`
      client_id: lush-gateway
      client_secret_file: `+exSecret+`
      actor:
        key_file: `+actorKey+`
`)
	ready := filepath.Join(dir, "ready")
	p := startProc(t, nil, lushctlBin, "run", project, "--config", cfg, "--provider", "scripted", "--listen", "127.0.0.1:0",
		"--ready-file", ready, "--log-level", "debug")
	var base string
	for deadline := time.Now().Add(60 * time.Second); base == "" && time.Now().Before(deadline); {
		if addr, err := os.ReadFile(ready); err == nil && len(addr) > 0 {
			base = "http://" + string(addr)
			break
		}
		select {
		case <-p.done:
			t.Fatalf("run exited:\n%s", p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if base == "" {
		t.Fatalf("run did not start:\n%s", p.out.String())
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/agents/planner/chat", strings.NewReader(`{"message": "Who am I at the CRM?"}`))
	req.Header.Set("Authorization", "Bearer "+alice.AccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "subject alice") {
		t.Fatalf("chat: %s %s\n%s", resp.Status, body, p.out.String())
	}
	calls := up.Calls()
	if len(calls) != 1 || calls[0].Subject != "alice" || !slices.Equal(calls[0].Act, []string{"agent:writer", "agent:planner"}) {
		t.Fatalf("the upstream saw %+v, want alice with act writer ← planner", calls)
	}
	// The invocation's traces (agentd, the gateway, the lush:// call), from the in-memory store.
	var chat struct {
		TraceID string `json:"trace_id"`
	}
	_ = json.Unmarshal(body, &chat)
	var traces []string
	for _, path := range []string{"/traces", "/traces/" + chat.TraceID} {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+alice.AccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || chat.TraceID == "" {
			t.Fatalf("GET %s: %s %s", path, resp.Status, b)
		}
		traces = append(traces, string(b))
	}
	if !strings.Contains(traces[1], "whoami") {
		t.Errorf("the trace does not show the upstream call:\n%s", traces[1])
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("run exit %d", code)
	}
	logPath := filepath.Join(project, ".lush", "decisions.db")
	audit := runLushctl(t, "audit", "query", "--log", logPath, "-o", "json")
	if !strings.Contains(strings.ReplaceAll(audit, " ", ""), `"act":["agent:writer","agent:planner"]`) {
		t.Errorf("the decision does not record the act chain:\n%s", audit)
	}
	var db []string
	for _, f := range []string{logPath, logPath + "-wal"} {
		b, _ := os.ReadFile(f)
		db = append(db, string(b))
	}
	outputs := map[string]string{"the run's output": p.out.String(), "the chat answer": string(body), "the traces": strings.Join(traces, "\n"),
		"the decision log files": strings.Join(db, ""), "the audit query": audit}
	for where, out := range outputs {
		for what, s := range map[string]string{"alice's token": alice.AccessToken, "the exchanged token": calls[0].Token, "the exchange secret": "exchange-secret-0123"} {
			if strings.Contains(out, s) || strings.Contains(out, s[len(s)-min(len(s), 40):]) {
				t.Errorf("%s holds %s", where, what)
			}
		}
	}
}

// newActorKey creates the actor key in dir as `lushctl auth actor-key` does, and returns its file
// and the JWK set the exchange server trusts.
func newActorKey(t *testing.T, dir string) (keyFile string, trusted []byte) {
	t.Helper()
	keyFile, _, err := identity.GenerateKeyPair(dir, "actor.key", "actor.pub")
	if err != nil {
		t.Fatal(err)
	}
	trusted, _, err = oauth.ActorJWKS(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return keyFile, trusted
}
