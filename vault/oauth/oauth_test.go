package oauth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/lush-agents/lush/examples/authserver/authserver"
	"github.com/lush-agents/lush/test/authtest"
	"github.com/lush-agents/lush/test/oauthupstream"
)

func writeSecret(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(s+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeKey(t *testing.T) (string, ed25519.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "actor.key")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, pub
}

func TestConfigCheck(t *testing.T) {
	te := func(f func(*TokenExchangeConfig)) *Config {
		c := &TokenExchangeConfig{Issuer: "https://login.example.com", ClientID: "lush", ClientSecretFile: "/s", Actor: ActorConfig{KeyFile: "/k"}}
		f(c)
		return &Config{TokenExchange: c}
	}
	cl := func(f func(*ClientConfig)) *Config {
		c := ClientConfig{Issuer: "https://as.crm.example", ClientID: "lush", ClientSecretFile: "/s", Servers: []string{"mcp://crm.example.com/mcp"}}
		f(&c)
		return &Config{Clients: []ClientConfig{c}}
	}
	tests := []struct {
		name string
		cfg  *Config
		want string // "" for valid
	}{
		{"none", nil, ""},
		{"token exchange", te(func(*TokenExchangeConfig) {}), ""},
		{"client", cl(func(*ClientConfig) {}), ""},
		{"no issuer", te(func(c *TokenExchangeConfig) { c.Issuer = "" }), "credentials.oauth.token_exchange.issuer: missing"},
		{"issuer not a URL", te(func(c *TokenExchangeConfig) { c.Issuer = "login.example.com" }), `credentials.oauth.token_exchange.issuer: "login.example.com" is not an http(s) URL`},
		{"no client id", te(func(c *TokenExchangeConfig) { c.ClientID = "" }), "credentials.oauth.token_exchange.client_id: missing"},
		{"no secret", te(func(c *TokenExchangeConfig) { c.ClientSecretFile = "" }), "credentials.oauth.token_exchange.client_secret_file: missing"},
		{"no actor key", te(func(c *TokenExchangeConfig) { c.Actor.KeyFile = "" }), "credentials.oauth.token_exchange.actor.key_file: missing"},
		{"bad endpoint", te(func(c *TokenExchangeConfig) { c.TokenEndpoint = "/token" }), "credentials.oauth.token_exchange.token_endpoint:"},
		{"client without servers", cl(func(c *ClientConfig) { c.Servers = nil }), "credentials.oauth.clients[0].servers: missing"},
		{"client server not mcp", cl(func(c *ClientConfig) { c.Servers = []string{"https://crm.example.com/mcp"} }), "credentials.oauth.clients[0].servers[0]:"},
		{"client server twice", cl(func(c *ClientConfig) { c.Servers = append(c.Servers, c.Servers[0]) }), "keep one client per server"},
		{"negative timeout", &Config{Timeout: -1}, "credentials.oauth.timeout"},
		{"redirect url", &Config{RedirectURL: "https://lush.example.com/oauth/callback"}, ""},
		{"redirect url elsewhere", &Config{RedirectURL: "https://lush.example.com/callback"}, "credentials.oauth.redirect_url: \"https://lush.example.com/callback\" is not the gateway's callback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Check()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Check = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestSecretFiles(t *testing.T) {
	key, _ := writeKey(t)
	open := writeSecret(t, "s3cret")
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	twoLines := writeSecret(t, "a\nb")
	for name, tc := range map[string]struct{ secret, key, want string }{
		"readable by others": {open, key, "chmod 600"},
		"two lines":          {twoLines, key, "one line"},
		"missing":            {"/nonexistent/secret", key, "client_secret_file"},
		"key not ed25519":    {writeSecret(t, "x"), writeSecret(t, "not a key"), "actor.key_file"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(Config{TokenExchange: &TokenExchangeConfig{Issuer: "https://login.example.com", ClientID: "lush",
				ClientSecretFile: tc.secret, Actor: ActorConfig{KeyFile: tc.key}}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Error("the error shows the secret")
			}
		})
	}
}

// TestActorToken checks the actor token Lush signs: verifiable with the key's public half, sub
// the calling agent, the agents it acts for nested in act, short-lived, for the exchange server.
func TestActorToken(t *testing.T) {
	path, pub := writeKey(t)
	s, err := newActorSigner(path, "lush", "https://login.example.com")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		chain []string
		want  string // the claims sub and act, as JSON
	}{
		{[]string{"triage"}, `{"sub":"agent:triage"}`},
		{[]string{"planner", "critic"}, `{"act":{"sub":"agent:planner"},"sub":"agent:critic"}`},
		{[]string{"a", "b", "c"}, `{"act":{"act":{"sub":"agent:a"},"sub":"agent:b"},"sub":"agent:c"}`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.chain, "<-"), func(t *testing.T) {
			tok, err := s.sign(tt.chain, now)
			if err != nil {
				t.Fatal(err)
			}
			payload, err := jws.Verify([]byte(tok), jws.WithKey(jwa.EdDSA(), pub))
			if err != nil {
				t.Fatalf("verify: %v", err)
			}
			var cl map[string]any
			if err := json.Unmarshal(payload, &cl); err != nil {
				t.Fatal(err)
			}
			if cl["iss"] != "lush" || cl["aud"] != "https://login.example.com" || cl["exp"].(float64)-cl["iat"].(float64) != ActorTokenTTL.Seconds() || cl["jti"] == "" {
				t.Errorf("claims %v", cl)
			}
			got, _ := json.Marshal(map[string]any{"sub": cl["sub"], "act": cl["act"]})
			if len(tt.chain) == 1 {
				got, _ = json.Marshal(map[string]any{"sub": cl["sub"]})
			}
			if string(got) != tt.want {
				t.Errorf("sub and act = %s, want %s", got, tt.want)
			}
			// What an exchange server copies into the issued token's act claim reads back as
			// the chain, the calling agent first.
			issued := fakeJWT(t, map[string]any{"act": map[string]any{"sub": cl["sub"], "act": cl["act"]}})
			if a, want := actClaim(issued), actChain(tt.chain); !slices.Equal(a, want) {
				t.Errorf("act chain %v, want %v", a, want)
			}
		})
	}
}

// fakeJWT is an unsigned JWT with claims: actClaim reads claims only (the upstream verifies).
func fakeJWT(t *testing.T, claims map[string]any) string {
	t.Helper()
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return "e30." + base64.RawURLEncoding.EncodeToString(b) + ".c2ln"
}

func TestLoginRequired(t *testing.T) {
	key, _ := writeKey(t)
	c, err := New(Config{TokenExchange: &TokenExchangeConfig{Issuer: "https://login.example.com", ClientID: "lush",
		ClientSecretFile: writeSecret(t, "s3cret"), Actor: ActorConfig{KeyFile: key}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Token(context.Background(), Request{Server: "mcp://crm.example.com/mcp", URL: "https://crm.example.com/mcp",
		Principal: "user:alice", Chain: []string{"triage"}, Method: "apikey", Flow: FlowTokenExchange})
	var e *Error
	if !errors.As(err, &e) || e.Rule() != RuleLoginRequired || !strings.Contains(e.Reason(), "needs the caller's own OAuth access token") ||
		!strings.Contains(e.Reason(), "method apikey") {
		t.Fatalf("Token = %v, want a login-required error", err)
	}
	_, err = c.Token(context.Background(), Request{Server: "mcp://crm.example.com/mcp", URL: "http://" + closedPort(t) + "/mcp",
		Principal: "serviceaccount:bot", Flow: FlowClientCredentials})
	if !errors.As(err, &e) || e.Rule() != RuleNotConfigured || !strings.Contains(e.Reason(), "credentials.oauth.clients") || !strings.Contains(e.Reason(), "connection refused") {
		t.Fatalf("Token = %v, want a not-configured error", err)
	}
}

func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestUnreachable: an authorization server that cannot be reached denies with the unavailable
// rule, and no secret is in the error.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := New(Config{Clients: []ClientConfig{{Issuer: "http://" + addr, ClientID: "lush", ClientSecretFile: writeSecret(t, "s3cret-value"),
		Servers: []string{"mcp://crm.example.com/mcp"}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Token(context.Background(), Request{Server: "mcp://crm.example.com/mcp", URL: "https://crm.example.com/mcp",
		Principal: "serviceaccount:bot", Flow: FlowClientCredentials})
	var e *Error
	if !errors.As(err, &e) || e.Rule() != RuleUnavailable || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Token = %v, want unavailable", err)
	}
	if strings.Contains(err.Error(), "s3cret-value") {
		t.Error("the error shows the secret")
	}
}

// TestClientCredentials gets tokens from a real Hydra: for the requested audience, cached until
// shortly before they expire, refused with the server's error for a wrong secret.
func TestClientCredentials(t *testing.T) {
	const resource = "https://crm.example.com/mcp"
	as := authtest.Start(t, authtest.WithAllowedResources(resource), authtest.WithScopes("crm.read"), authtest.WithTokenTTL(10*time.Minute, 0))
	ctx := context.Background()
	if err := as.CreateClient(ctx, authserver.Client{ID: "lush-gw", Secret: "gw-secret-123", GrantTypes: []string{"client_credentials"},
		Scopes: []string{"crm.read"}, Audience: []string{resource}}); err != nil {
		t.Fatal(err)
	}
	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	clock := func() time.Time { return *now.Load() }
	newClient := func(secret string) *Client {
		c, err := New(Config{Clients: []ClientConfig{{Issuer: as.Issuer(), ClientID: "lush-gw", ClientSecretFile: writeSecret(t, secret),
			Servers: []string{"mcp://crm.example.com/mcp"}}}}, WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := newClient("gw-secret-123")
	req := Request{Server: "mcp://crm.example.com/mcp", URL: resource, Principal: "serviceaccount:nightly", Flow: FlowClientCredentials, Scopes: []string{"crm.read"}}
	tok, err := c.Token(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	cl := claimsOf(t, tok.AccessToken)
	if aud := fmt.Sprint(cl["aud"]); !strings.Contains(aud, resource) || cl["client_id"] != "lush-gw" {
		t.Errorf("claims %v: want aud %s for client lush-gw", cl, resource)
	}
	if tok.Obtained != ObtainedClientCredentials || tok.Issuer != as.Issuer() || tok.Expiry.IsZero() {
		t.Errorf("token %+v", tok)
	}
	again, err := c.Token(ctx, req)
	if err != nil || again.AccessToken != tok.AccessToken {
		t.Fatalf("the second token was not the cached one: %v", err)
	}
	late := tok.Expiry.Add(-30 * time.Second) // within the last minute: refreshed
	now.Store(&late)
	fresh, err := c.Token(ctx, req)
	if err != nil || fresh.AccessToken == tok.AccessToken {
		t.Fatalf("a token about to expire was not replaced: %v", err)
	}

	_, err = newClient("wrong-secret").Token(ctx, req)
	var e *Error
	if !errors.As(err, &e) || e.Rule() != RuleRefused || !strings.Contains(e.Reason(), "invalid_client") {
		t.Fatalf("Token with a wrong secret = %v, want refused with invalid_client", err)
	}
	if strings.Contains(err.Error(), "wrong-secret") {
		t.Error("the error shows the secret")
	}
	req.Audience, req.Resource = "https://other.example.com/mcp", "https://other.example.com/mcp"
	if _, err = c.Token(ctx, req); !errors.As(err, &e) || e.Rule() != RuleRefused {
		t.Fatalf("Token for an audience the client may not have = %v, want refused", err)
	}
}

func claimsOf(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("the access token is not a JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var cl map[string]any
	if err := json.Unmarshal(b, &cl); err != nil {
		t.Fatal(err)
	}
	return cl
}

// publicSet is the JWK set of the actor key's public half, as an authorization server trusts it.
func publicSet(t *testing.T, pub ed25519.PublicKey, kid string) []byte {
	t.Helper()
	k, err := jwk.Import(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.KeyIDKey, kid); err != nil {
		t.Fatal(err)
	}
	set := jwk.NewSet()
	if err := set.AddKey(k); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTokenExchange exchanges a user's Hydra token at the real token-exchange server: the issued
// token names the user, is for the upstream, carries the agent chain in act, is cached per
// chain, and a token the server does not accept is refused with what to do.
func TestTokenExchange(t *testing.T) {
	const gatewayResource, upstream = "https://lush.example.com", "https://crm.example.com/mcp"
	keyPath, pub := writeKey(t)
	signer, err := newActorSigner(keyPath, "lush", "")
	if err != nil {
		t.Fatal(err)
	}
	as := authtest.Start(t, authtest.WithAllowedResources(gatewayResource, upstream), authtest.WithExchange(authserver.ExchangeConfig{
		Clients: []authserver.ExchangeClient{{ID: "lush-gateway", Secret: "exchange-secret-0123"}}, TrustedActorKeys: publicSet(t, pub, signer.kid)}))
	ctx := context.Background()
	app := authserver.Client{ID: "app", Secret: "app-secret-0123456789", RedirectURIs: []string{"http://127.0.0.1:9/cb"},
		Scopes: []string{"openid"}, Audience: []string{gatewayResource}}
	if err := as.CreateClient(ctx, app); err != nil {
		t.Fatal(err)
	}
	user, err := as.AuthorizationCodeToken(ctx, app, "alice", gatewayResource, []string{"openid"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{TokenExchange: &TokenExchangeConfig{Issuer: as.ExchangeIssuer(), ClientID: "lush-gateway",
		ClientSecretFile: writeSecret(t, "exchange-secret-0123"), Actor: ActorConfig{KeyFile: keyPath}}})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Server: "mcp://crm.example.com/mcp", URL: upstream, Principal: "user:alice", Chain: []string{"planner", "writer"},
		SubjectToken: user.AccessToken, Method: "jwt", Flow: FlowTokenExchange}
	tok, err := c.Token(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	cl := claimsOf(t, tok.AccessToken)
	if cl["sub"] != "alice" || !strings.Contains(fmt.Sprint(cl["aud"]), upstream) || cl["iss"] != as.ExchangeIssuer() {
		t.Errorf("claims %v: want sub alice, aud %s", cl, upstream)
	}
	if act, _ := json.Marshal(cl["act"]); string(act) != `{"act":{"sub":"agent:planner"},"sub":"agent:writer"}` {
		t.Errorf("act = %s, want writer acting, planner nested", act)
	}
	if !slices.Equal(tok.Act, []string{"agent:writer", "agent:planner"}) || tok.Obtained != ObtainedExchange {
		t.Errorf("token act %v obtained %s", tok.Act, tok.Obtained)
	}
	if again, err := c.Token(ctx, req); err != nil || again.AccessToken != tok.AccessToken {
		t.Errorf("the same principal, chain and upstream did not get the cached token: %v", err)
	}
	req.Chain = []string{"writer"}
	other, err := c.Token(ctx, req)
	if err != nil || other.AccessToken == tok.AccessToken || !slices.Equal(other.Act, []string{"agent:writer"}) {
		t.Errorf("another chain got %v, %v", other.Act, err)
	}

	// A subject token the server does not accept (the user's token with its signature broken).
	req.SubjectToken = user.AccessToken[:len(user.AccessToken)-4] + "AAAA"
	_, err = c.Token(ctx, req)
	var e *Error
	if !errors.As(err, &e) || e.Rule() != RuleRefused || !strings.Contains(e.Reason(), "refused to exchange") {
		t.Fatalf("Token with a bad subject token = %v, want refused", err)
	}
	if strings.Contains(err.Error(), req.SubjectToken) || strings.Contains(err.Error(), user.AccessToken[:20]) {
		t.Error("the error shows the subject token")
	}
	// An upstream the server does not issue tokens for.
	req.SubjectToken, req.URL = user.AccessToken, "https://elsewhere.example.com/mcp"
	if _, err = c.Token(ctx, req); !errors.As(err, &e) || e.Rule() != RuleRefused {
		t.Fatalf("Token for an unknown audience = %v, want refused", err)
	}
}

// TestDiscoveryAndRegistration: with no client configured for a server, the client follows the
// server's 401 to its protected resource metadata (RFC 9728), the authorization server's metadata,
// registers a client dynamically (RFC 7591) at Hydra, keeps the registration in its file and gets
// a token the server accepts; a second client reads the registration instead of registering.
func TestDiscoveryAndRegistration(t *testing.T) {
	up := oauthupstream.Start(t)
	as := authtest.Start(t, authtest.WithAllowedResources(up.URL))
	up.Trust(oauthupstream.Issuer{Issuer: as.Issuer(), JWKSURL: as.JWKSURL()})
	regs := filepath.Join(t.TempDir(), "oauth-clients.json")
	c, err := New(Config{}, WithRegistrations(regs))
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Server: "mcp://crm.example.com/mcp", URL: up.URL, Principal: "serviceaccount:nightly", Flow: FlowClientCredentials}
	tok, err := c.Token(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	cl := claimsOf(t, tok.AccessToken)
	if !strings.Contains(fmt.Sprint(cl["aud"]), up.URL) || cl["iss"] != as.Issuer() || tok.Issuer != as.Issuer() {
		t.Errorf("claims %v: want a token of %s for %s", cl, as.Issuer(), up.URL)
	}
	info, err := os.Stat(regs)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("registrations file: %v %v", info, err)
	}
	b, _ := os.ReadFile(regs)
	var kept []registration
	if err := json.Unmarshal(b, &kept); err != nil || len(kept) != 1 || kept[0].Issuer != as.Issuer() || kept[0].ClientID == "" {
		t.Fatalf("registrations %s: %v", b, err)
	}
	again, err := New(Config{}, WithRegistrations(regs))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Token(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	b2, _ := os.ReadFile(regs)
	if string(b2) != string(b) {
		t.Errorf("a second client registered again:\n%s\n%s", b, b2)
	}
	// A server that does not answer 401 cannot be discovered: a clear denial naming the config.
	req.URL = as.Issuer() + "/.well-known/openid-configuration"
	req.Server = "mcp://other.example.com/mcp"
	_, err = c.Token(context.Background(), req)
	var e *Error
	if !errors.As(err, &e) || e.Rule() != RuleNotConfigured || !strings.Contains(e.Reason(), "not 401") {
		t.Fatalf("Token for a server without a 401 = %v", err)
	}
}

// TestDescribe: what libraries append to an error (a response body, which may hold a token) is
// never part of a message.
func TestDescribe(t *testing.T) {
	const body = `{"access_token":"leaked-token-0123456789"}`
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("http status not ok: 502 Bad Gateway %s", body), "the server answered HTTP 502 without an OAuth error"},
		{fmt.Errorf("failed to unmarshal response: invalid character %s", body), "the answer is not an OAuth token response"},
		{context.DeadlineExceeded, "no answer in time"},
	}
	for _, tt := range tests {
		if got := describe(tt.err); got != tt.want || strings.Contains(got, "leaked-token") {
			t.Errorf("describe(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
