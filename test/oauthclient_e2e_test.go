package test

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/lush-agents/lush/examples/authserver/authserver"
	"github.com/lush-agents/lush/test/authtest"
	"github.com/lush-agents/lush/test/oauthupstream"
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
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(priv)
	actorKey := filepath.Join(dir, "actor.key")
	writeFile600(t, actorKey, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})))
	jk, _ := jwk.Import(pub)
	tp, _ := jk.Thumbprint(crypto.SHA256)
	_ = jk.Set(jwk.KeyIDKey, base64.RawURLEncoding.EncodeToString(tp))
	set := jwk.NewSet()
	_ = set.AddKey(jk)
	trusted, _ := json.Marshal(set)

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
	base, gw := startGateway(t, project, "--config", cfg, "--log-level", "debug")
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

func writeFile600(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
