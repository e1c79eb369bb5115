package identity

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"gopkg.in/yaml.v3"
)

const (
	testResourceURL = "https://lush.example.com"
	// the resource a request to /agents/researcher/mcp is for
	researcherResource = testResourceURL + "/agents/researcher/mcp"
	testScope          = "mcp:tools"
	introClient        = "lush-rs"
	introSecret        = "introspection-secret-never-shown-0123"
)

// authServer stands in for an authorization server's discovery, keys and introspection, on
// loopback, with keys the test generates: the identity package's unit tests check the token
// rules; test/oauth_e2e_test.go checks them against a real authorization server (Hydra).
type authServer struct {
	*httptest.Server
	issuer string

	mu         sync.Mutex
	keys       []jwk.Key
	down       bool
	oidcOnly   bool   // serve only /.well-known/openid-configuration
	mdIssuer   string // the issuer the metadata names ("" = issuer)
	introspect map[string]map[string]any

	metadataFetches, jwksFetches, introspections atomic.Int32
}

// newAuthServer serves an authorization server at <loopback>/<path> (path may be "").
func newAuthServer(t testing.TB, path string, keys ...jwk.Key) *authServer {
	t.Helper()
	s := &authServer{keys: keys, introspect: map[string]map[string]any{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	s.issuer = s.URL + path
	t.Cleanup(s.Close)
	return s
}

func (s *authServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	u, _ := strings.CutPrefix(s.issuer, s.URL)
	md := func() {
		s.metadataFetches.Add(1)
		iss := s.issuer
		if s.mdIssuer != "" {
			iss = s.mdIssuer
		}
		json.NewEncoder(w).Encode(map[string]any{"issuer": iss, "jwks_uri": s.URL + "/jwks", "token_endpoint": s.URL + "/token",
			"introspection_endpoint": s.URL + "/introspect"})
	}
	switch {
	case r.URL.Path == "/.well-known/oauth-authorization-server"+u && !s.oidcOnly:
		md()
	case r.URL.Path == u+"/.well-known/openid-configuration":
		md()
	case r.URL.Path == "/jwks":
		s.jwksFetches.Add(1)
		set := jwk.NewSet()
		for _, k := range s.keys {
			set.AddKey(k)
		}
		json.NewEncoder(w).Encode(set)
	case r.URL.Path == "/introspect" && r.Method == http.MethodPost:
		s.introspections.Add(1)
		id, secret, ok := r.BasicAuth()
		if !ok || id != introClient || secret != introSecret {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]any{"error": "invalid_client"})
			return
		}
		ans, ok := s.introspect[r.PostFormValue("token")]
		if !ok {
			ans = map[string]any{"active": false}
		}
		json.NewEncoder(w).Encode(ans)
	default:
		http.NotFound(w, r)
	}
}

func (s *authServer) set(f func(s *authServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// oauthClaims are valid access token claims of srv for the researcher's MCP endpoint at t0.
func oauthClaims(srv *authServer) map[string]any {
	return map[string]any{
		"iss": srv.issuer, "aud": []string{researcherResource}, "sub": "alice", "client_id": "desktop-app",
		"scope": "openid " + testScope, "groups": []string{"eng"},
		"iat": t0.Add(-time.Minute).Unix(), "nbf": t0.Add(-time.Minute).Unix(), "exp": t0.Add(time.Hour).Unix(), "jti": "j1",
	}
}

// accessToken signs claims as an RFC 9068 access token (typ at+jwt) with the RSA test key.
func accessToken(t testing.TB, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	return mintHeaders(t, jwa.RS256(), key, map[string]any{"kid": kid, "typ": "at+jwt"}, claims)
}

func oauthConfig(srv *authServer) OAuthConfig {
	return OAuthConfig{Issuer: srv.issuer, Scopes: []string{testScope}, Audiences: []string{"lush-app"}}
}

// oauthAuth starts an authorization server with the RSA test key (kid rsa-1) and an
// Authenticator accepting its tokens next to the ci API key.
func oauthAuth(t testing.TB, mod func(*OAuthConfig)) (*Authenticator, *authServer, *clock) {
	t.Helper()
	keys(t)
	srv := newAuthServer(t, "", publicJWK(t, rsaKey, "rsa-1", "RS256"))
	oc := oauthConfig(srv)
	if mod != nil {
		mod(&oc)
	}
	clk := newClock()
	a := newAuth(t, Config{OAuth: []OAuthConfig{oc}, APIKeys: apiKeys, ResourceURL: testResourceURL}, clk)
	return a, srv, clk
}

func bearerAt(path, tok string) *http.Request {
	r := bearerReq(tok)
	r.URL.Path = path
	return r
}

// oauthErr asserts err is an *Error with code, message containing want, tried with the oauth
// method (so that the failures metric counts it as oauth), and that it does not hold tok.
func oauthErr(t *testing.T, err error, tok, code, want string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want *Error %s", err, err, code)
	}
	if e.Code != code || !strings.Contains(e.Message, want) {
		t.Fatalf("error = %q, want code %s and message containing %q", e.Error(), code, want)
	}
	if e.Method != MethodOAuth {
		t.Errorf("method = %q, want oauth", e.Method)
	}
	if reason, method, _ := failureLabels(e); reason != code || method != "oauth" {
		t.Errorf("failure labels = %s, %s", reason, method)
	}
	if tok != "" && strings.Contains(e.Error(), tok) {
		t.Errorf("error holds the token: %s", e.Error())
	}
	if strings.Contains(e.Error(), introSecret) {
		t.Errorf("error holds the introspection secret: %s", e.Error())
	}
}

func TestOAuthAccessTokens(t *testing.T) {
	a, srv, _ := oauthAuth(t, nil)
	c := oauthClaims(srv)
	user := Caller{ID: "user:alice", Groups: []string{"group:eng"}, Method: MethodOAuth, Subject: "alice"}
	for _, tt := range []struct {
		name string
		path string
		tok  string
		want Caller
	}{
		{"RFC 9068 access token", "/agents/researcher/mcp", accessToken(t, rsaKey, "rsa-1", c), user},
		{"plain JWT typ", "/agents/researcher/mcp", mint(t, jwa.RS256(), rsaKey, "rsa-1", c), user},
		{"legacy SSE path of the same endpoint", "/agents/researcher/sse", accessToken(t, rsaKey, "rsa-1", c), user},
		{"scp array", "/agents/researcher/mcp", accessToken(t, rsaKey, "rsa-1", with(c, "scope", nil, "scp", []string{testScope})), user},
		{"configured audience at any endpoint", "/agents/writer/mcp", accessToken(t, rsaKey, "rsa-1", with(c, "aud", "lush-app")), user},
		{"the server's own resource", "/approvals", accessToken(t, rsaKey, "rsa-1", with(c, "aud", testResourceURL)), user},
		{"client credentials: subject is the client", "/agents/researcher/mcp",
			accessToken(t, rsaKey, "rsa-1", with(c, "sub", "ci-bot", "client_id", "ci-bot", "groups", nil)),
			Caller{ID: "serviceaccount:ci-bot", Groups: []string{}, Method: MethodOAuth, Subject: "ci-bot"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := a.Authenticate(bearerAt(tt.path, tt.tok))
			if err != nil {
				t.Fatal(err)
			}
			if got.Token.Reveal() != tt.tok {
				t.Error("the caller does not keep its access token for token exchange")
			}
			got.Token = SubjectToken{}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestOAuthRejects(t *testing.T) {
	a, srv, _ := oauthAuth(t, nil)
	c := oauthClaims(srv)
	hsKey := rsaKey.Public().(*rsa.PublicKey).N.Bytes() // the public key's bytes as an HMAC secret
	for _, tt := range []struct {
		name, path, tok, code, want string
	}{
		{"expired", "", accessToken(t, rsaKey, "rsa-1", with(c, "exp", t0.Add(-time.Minute).Unix())), CodeExpiredToken, "expired at"},
		{"not yet valid", "", accessToken(t, rsaKey, "rsa-1", with(c, "nbf", t0.Add(time.Hour).Unix())), CodeInvalidToken, "not valid before"},
		{"issued in the future", "", accessToken(t, rsaKey, "rsa-1", with(c, "iat", t0.Add(time.Hour).Unix())), CodeInvalidToken, "issued in the future"},
		{"no exp", "", accessToken(t, rsaKey, "rsa-1", with(c, "exp", nil)), CodeInvalidToken, "no exp claim"},
		{"wrong audience", "", accessToken(t, rsaKey, "rsa-1", with(c, "aud", "https://other.example.com/mcp")), CodeInvalidToken, "does not include this resource, " + researcherResource},
		{"no audience", "", accessToken(t, rsaKey, "rsa-1", with(c, "aud", nil)), CodeInvalidToken, "no aud claim"},
		{"token for agent A at agent B", "/agents/writer/mcp", accessToken(t, rsaKey, "rsa-1", c), CodeInvalidToken, "does not include this resource, " + testResourceURL + "/agents/writer/mcp"},
		{"agent token at the server's APIs", "/audit/decisions", accessToken(t, rsaKey, "rsa-1", c), CodeInvalidToken, "does not include this resource, " + testResourceURL + ":"},
		{"gateway endpoint is another resource", "/gateway/agents/researcher/mcp", accessToken(t, rsaKey, "rsa-1", c), CodeInvalidToken, testResourceURL + "/gateway/agents/researcher/mcp"},
		{"alg none", "", mintNone(t, c), CodeInvalidToken, "alg none"},
		{"HS256 signed with the public key", "", mintHeaders(t, jwa.HS256(), hsKey, map[string]any{"kid": "rsa-1", "typ": "at+jwt"}, c), CodeInvalidToken, `algorithm "HS256" is not allowed`},
		{"signed by another key", "", accessToken(t, rsaKey2, "rsa-1", c), CodeInvalidToken, "signature does not verify"},
		{"an ID token", "", mintHeaders(t, jwa.RS256(), rsaKey, map[string]any{"kid": "rsa-1", "typ": "id_token+jwt"}, c), CodeInvalidToken, "not an access token's"},
		{"missing scope", "", accessToken(t, rsaKey, "rsa-1", with(c, "scope", "openid")), CodeInsufficientScope, "lacks the scope mcp:tools"},
		{"scope not a string", "", accessToken(t, rsaKey, "rsa-1", with(c, "scope", 7)), CodeInvalidToken, "scope claim must be"},
		{"no subject", "", accessToken(t, rsaKey, "rsa-1", with(c, "sub", nil)), CodeInvalidToken, "claims.subject"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = "/agents/researcher/mcp"
			}
			_, err := a.Authenticate(bearerAt(path, tt.tok))
			oauthErr(t, err, tt.tok, tt.code, tt.want)
			var e *Error
			errors.As(err, &e)
			if want := map[bool]int{true: 403, false: 401}[tt.code == CodeInsufficientScope]; e.Status() != want {
				t.Errorf("status %d, want %d", e.Status(), want)
			}
		})
	}
	// A token of an issuer configured nowhere.
	tok := accessToken(t, rsaKey, "rsa-1", with(c, "iss", "https://evil.example.com"))
	_, err := a.Authenticate(bearerReq(tok))
	authErr(t, err, CodeInvalidToken, "auth.jwt or auth.oauth")
}

// mintNone is an unsigned token (alg none).
func mintNone(t *testing.T, claims map[string]any) string {
	t.Helper()
	h, _ := json.Marshal(map[string]any{"alg": "none", "typ": "at+jwt"})
	p, _ := json.Marshal(claims)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p) + "."
}

func TestOAuthPrincipalClaims(t *testing.T) {
	a, srv, _ := oauthAuth(t, func(o *OAuthConfig) {
		o.PrincipalClaim = "email"
		o.Claims = OAuthClaims{Email: "upn", Groups: "roles", ClientID: "azp"}
		o.ServiceAccount = ServiceAccountConfig{Claim: "gty", Value: "client-credentials"}
	})
	c := with(oauthClaims(srv), "upn", "alice@example.com", "roles", "eng ops", "azp", "alice")
	got, err := a.Authenticate(bearerReq(accessToken(t, rsaKey, "rsa-1", c)))
	if err != nil {
		t.Fatal(err)
	}
	got.Token = SubjectToken{}
	if want := (Caller{ID: "user:alice@example.com", Groups: []string{"group:eng", "group:ops"}, Method: MethodOAuth, Subject: "alice"}); !reflect.DeepEqual(got, want) {
		t.Errorf("user: got %+v, want %+v", got, want)
	}
	got, err = a.Authenticate(bearerReq(accessToken(t, rsaKey, "rsa-1", with(c, "gty", "client-credentials", "azp", "batch"))))
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "serviceaccount:batch" {
		t.Errorf("client credentials: got %+v", got)
	}
	_, err = a.Authenticate(bearerReq(accessToken(t, rsaKey, "rsa-1", with(c, "upn", nil))))
	oauthErr(t, err, "", CodeInvalidToken, "claims.email")
}

func TestOAuthKeyRotation(t *testing.T) {
	a, srv, clk := oauthAuth(t, nil)
	c := oauthClaims(srv)
	if _, err := a.Authenticate(bearerReq(accessToken(t, rsaKey, "rsa-1", c))); err != nil {
		t.Fatal(err)
	}
	// The server rotates: the new key only.
	srv.set(func(s *authServer) { s.keys = []jwk.Key{publicJWK(t, rsaKey2, "rsa-2", "RS256")} })
	if _, err := a.Authenticate(bearerReq(accessToken(t, rsaKey2, "rsa-2", c))); err != nil {
		t.Fatalf("a token of the new key: %v", err)
	}
	old := accessToken(t, rsaKey, "rsa-1", c)
	_, err := a.Authenticate(bearerReq(old))
	oauthErr(t, err, old, CodeInvalidToken, `key id "rsa-1" is not among the keys`)
	clk.advance(2 * time.Minute) // the old key stays refused after another refresh
	_, err = a.Authenticate(bearerReq(old))
	oauthErr(t, err, old, CodeInvalidToken, `key id "rsa-1" is not among the keys`)
}

func TestOAuthServerDownKeepsCachedKeys(t *testing.T) {
	a, srv, _ := oauthAuth(t, nil)
	c := oauthClaims(srv)
	srv.set(func(s *authServer) { s.down = true })
	got, err := a.Authenticate(bearerReq(accessToken(t, rsaKey, "rsa-1", c)))
	if err != nil || got.ID != "user:alice" {
		t.Fatalf("with the server down, a valid token: %+v, %v", got, err)
	}
	// until it expires
	_, err = a.Authenticate(bearerReq(accessToken(t, rsaKey, "rsa-1", with(c, "exp", t0.Add(-time.Hour).Unix()))))
	oauthErr(t, err, "", CodeExpiredToken, "expired")
	// a key never seen cannot be fetched: refused, clearly
	tok := accessToken(t, rsaKey2, "rsa-2", c)
	_, err = a.Authenticate(bearerReq(tok))
	oauthErr(t, err, tok, CodeInvalidToken, "is not among the keys")
}

func TestOAuthServerDownAtStart(t *testing.T) {
	keys(t)
	srv := newAuthServer(t, "", publicJWK(t, rsaKey, "rsa-1", "RS256"))
	srv.set(func(s *authServer) { s.down = true })
	clk := newClock()
	a := newAuth(t, Config{OAuth: []OAuthConfig{oauthConfig(srv)}, APIKeys: apiKeys, ResourceURL: testResourceURL}, clk)
	a.oauth[0].lastAttempt = clk.now() // New's attempt, on the test's clock

	// API keys keep working.
	if got, err := a.Authenticate(request("192.0.2.1:1", "X-API-Key", ciKey)); err != nil || got.ID != "serviceaccount:ci" {
		t.Fatalf("API key: %+v, %v", got, err)
	}
	if p := a.OAuthProblems(); len(p) != 1 || !strings.Contains(p[0].Error(), "auth.oauth[0]: discover the authorization server "+srv.issuer) {
		t.Errorf("OAuthProblems() = %v", p)
	}
	tok := accessToken(t, rsaKey, "rsa-1", oauthClaims(srv))
	_, err := a.Authenticate(bearerReq(tok))
	oauthErr(t, err, tok, CodeAuthServerUnavailable, "has not been reached yet")
	if e := err.(*Error); e.Status() != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503: a new token would not help", e.Status())
	}
	fetches := srv.metadataFetches.Load()
	_, err = a.Authenticate(bearerReq(tok)) // no new attempt within a minute
	oauthErr(t, err, tok, CodeAuthServerUnavailable, "503")
	if n := srv.metadataFetches.Load(); n != fetches {
		t.Errorf("a token made %d metadata fetches within a minute", n-fetches)
	}
	// The server comes up; a minute later a token makes Lush try again.
	srv.set(func(s *authServer) { s.down = false })
	clk.advance(rediscoverEvery)
	if got, err := a.Authenticate(bearerReq(tok)); err != nil || got.ID != "user:alice" {
		t.Fatalf("after the server came up: %+v, %v", got, err)
	}
	if p := a.OAuthProblems(); len(p) != 0 {
		t.Errorf("OAuthProblems() after discovery = %v", p)
	}
}

func TestOAuthDiscovery(t *testing.T) {
	keys(t)
	for _, tt := range []struct {
		name     string
		path     string
		oidcOnly bool
		mdIssuer string
		wantErr  string
	}{
		{"RFC 8414", "", false, "", ""},
		{"RFC 8414 with path insertion", "/tenants/acme", false, "", ""},
		{"OpenID Connect discovery", "/realms/x", true, "", ""},
		{"metadata names another issuer", "", false, "https://idp.example.com", "names issuer \"https://idp.example.com\""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newAuthServer(t, tt.path, publicJWK(t, rsaKey, "rsa-1", "RS256"))
			srv.set(func(s *authServer) { s.oidcOnly, s.mdIssuer = tt.oidcOnly, tt.mdIssuer })
			a := newAuth(t, Config{OAuth: []OAuthConfig{oauthConfig(srv)}, ResourceURL: testResourceURL}, newClock())
			a.oauth[0].lastAttempt = t0
			tok := accessToken(t, rsaKey, "rsa-1", oauthClaims(srv))
			_, err := a.Authenticate(bearerReq(tok))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			oauthErr(t, err, tok, CodeAuthServerUnavailable, tt.wantErr)
		})
	}
}

func TestOAuthIntrospection(t *testing.T) {
	keys(t)
	srv := newAuthServer(t, "", publicJWK(t, rsaKey, "rsa-1", "RS256"))
	dir := t.TempDir()
	oc := oauthConfig(srv)
	oc.Introspection = &IntrospectionConfig{ClientID: introClient, ClientSecretFile: writeFile(t, dir, "secret", []byte(introSecret+"\n"))}
	clk := newClock()
	a := newAuth(t, Config{OAuth: []OAuthConfig{oc}, APIKeys: apiKeys, ResourceURL: testResourceURL}, clk)

	active := func(extra ...any) map[string]any {
		return with(map[string]any{"active": true, "iss": srv.issuer, "sub": "bob", "client_id": "cli", "aud": researcherResource,
			"scope": testScope, "exp": t0.Add(time.Hour).Unix(), "iat": t0.Add(-time.Minute).Unix()}, extra...)
	}
	srv.set(func(s *authServer) {
		s.introspect["opaque-good"] = active()
		s.introspect["opaque-other-aud"] = active("aud", "https://elsewhere.example.com")
		s.introspect["opaque-expired"] = active("exp", t0.Add(-time.Hour).Unix())
		s.introspect["opaque-no-scope"] = active("scope", "openid")
		s.introspect["opaque-other-iss"] = active("iss", "https://evil.example.com")
		s.introspect["opaque-refresh"] = active("token_use", "refresh_token")
	})
	got, err := a.Authenticate(bearerReq("opaque-good"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Token.Reveal() != "opaque-good" {
		t.Error("the caller does not keep its opaque access token for token exchange")
	}
	got.Token = SubjectToken{}
	if want := (Caller{ID: "user:bob", Groups: []string{}, Method: MethodOAuth, Subject: "bob"}); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// Cached by the token's hash: no second request, and still checked per resource.
	n := srv.introspections.Load()
	if _, err := a.Authenticate(bearerReq("opaque-good")); err != nil {
		t.Fatal(err)
	}
	_, err = a.Authenticate(bearerAt("/agents/writer/mcp", "opaque-good"))
	oauthErr(t, err, "opaque-good", CodeInvalidToken, "does not include this resource")
	if d := srv.introspections.Load() - n; d != 0 {
		t.Errorf("%d introspections for a cached token", d)
	}
	for k := range a.oauth[0].cache {
		if strings.Contains(string(k[:]), "opaque-good") {
			t.Error("the cache holds the token")
		}
	}
	// Revoked: once the cache entry expires, the server's answer counts.
	srv.set(func(s *authServer) { s.introspect["opaque-good"] = map[string]any{"active": false} })
	clk.advance(DefaultIntrospectionTTL)
	_, err = a.Authenticate(bearerReq("opaque-good"))
	oauthErr(t, err, "opaque-good", CodeInvalidToken, "not active")

	for _, tt := range []struct{ tok, code, want string }{
		{"opaque-unknown", CodeInvalidToken, "not active"},
		{"opaque-other-aud", CodeInvalidToken, "does not include this resource"},
		{"opaque-expired", CodeExpiredToken, "expired"},
		{"opaque-no-scope", CodeInsufficientScope, "lacks the scope"},
		{"opaque-other-iss", CodeInvalidToken, "says the token was issued by"},
		{"opaque-refresh", CodeInvalidToken, `is a "refresh_token", not an access token`},
	} {
		t.Run(tt.tok, func(t *testing.T) {
			_, err := a.Authenticate(bearerReq(tt.tok))
			oauthErr(t, err, tt.tok, tt.code, tt.want)
		})
	}
	// API keys sent as bearer tokens still work, without asking the server.
	n = srv.introspections.Load()
	if got, err := a.Authenticate(bearerReq(ciKey)); err != nil || got.ID != "serviceaccount:ci" {
		t.Fatalf("API key as bearer: %+v, %v", got, err)
	}
	if srv.introspections.Load() != n {
		t.Error("an API key was sent to the introspection endpoint")
	}
	// The server refuses Lush's client credentials: unavailable, and the secret is never shown.
	oc.Introspection.ClientSecretFile = writeFile(t, dir, "wrong", []byte("not-the-secret"))
	b := newAuth(t, Config{OAuth: []OAuthConfig{oc}, ResourceURL: testResourceURL}, clk)
	_, err = b.Authenticate(bearerReq("opaque-new"))
	oauthErr(t, err, "opaque-new", CodeAuthServerUnavailable, "could not be introspected")
}

func TestOAuthChallengeAndMetadata(t *testing.T) {
	a, srv, _ := oauthAuth(t, nil)
	c := oauthClaims(srv)
	md := testResourceURL + MetadataPath
	for _, tt := range []struct {
		name, path, tok, want string
	}{
		{"no token", "/agents/researcher/mcp", "", `Bearer realm="lush", resource_metadata="` + md + `/agents/researcher/mcp", scope="mcp:tools"`},
		{"refused token", "/agents/researcher/sse", accessToken(t, rsaKey, "rsa-1", with(c, "aud", "x")),
			`Bearer realm="lush", error="invalid_token", resource_metadata="` + md + `/agents/researcher/mcp", scope="mcp:tools"`},
		{"insufficient scope", "/gateway/agents/researcher/mcp", accessToken(t, rsaKey, "rsa-1", with(c, "aud", "lush-app", "scope", "")),
			`Bearer realm="lush", error="insufficient_scope", resource_metadata="` + md + `/gateway/agents/researcher/mcp", scope="mcp:tools"`},
		{"the server's APIs", "/approvals", "", `Bearer realm="lush", resource_metadata="` + md + `", scope="mcp:tools"`},
		{"a quote in the path", `/agents/a"b/mcp`, "", `Bearer realm="lush", resource_metadata="` + md + `", scope="mcp:tools"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := request("192.0.2.1:1")
			if tt.tok != "" {
				r = bearerReq(tt.tok)
			}
			r.URL.Path = tt.path
			_, err := a.Authenticate(r)
			if err == nil {
				t.Fatal("no error")
			}
			got, ok := a.Challenge(r, err)
			if !ok || got != tt.want {
				t.Errorf("challenge\n got %s\nwant %s", got, tt.want)
			}
		})
	}
	got, ok := a.Metadata("/agents/researcher/mcp")
	want := ResourceMetadata{Resource: researcherResource, AuthorizationServers: []string{srv.issuer}, ScopesSupported: []string{testScope},
		BearerMethodsSupported: []string{"header"}, ResourceName: "Lush agent researcher"}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("metadata %+v, want %+v", got, want)
	}
	// Without auth.oauth: no challenge parameters, no metadata.
	b := newAuth(t, Config{APIKeys: apiKeys}, nil)
	if _, ok := b.Challenge(request("192.0.2.1:1"), errors.New("x")); ok {
		t.Error("a challenge without auth.oauth")
	}
	if _, ok := b.Metadata(""); ok {
		t.Error("metadata without auth.oauth")
	}
}

func TestResourcePath(t *testing.T) {
	for in, want := range map[string]string{
		"/agents/researcher/mcp":         "/agents/researcher/mcp",
		"/agents/researcher/sse":         "/agents/researcher/mcp",
		"/agents/researcher/message":     "/agents/researcher/mcp",
		"/gateway/agents/researcher/mcp": "/gateway/agents/researcher/mcp",
		"/agents/researcher/chat":        "",
		"/agents/researcher/mcp/x":       "",
		"/agents//mcp":                   "",
		"/agents":                        "",
		"/gatewayx/agents/a/mcp":         "",
		`/agents/a"b/mcp`:                "",
		"/approvals":                     "",
		"":                               "",
	} {
		if got := ResourcePath(in); got != want {
			t.Errorf("ResourcePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzResourcePath(f *testing.F) {
	for _, s := range []string{"/agents/a/mcp", "/gateway/agents/a/sse", "/agents/a/message", "/x", `/agents/"/mcp`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		r := ResourcePath(p)
		if r == "" {
			return
		}
		agent, _, ok := ResourceAgent(r)
		if !ok || strings.ContainsAny(r, "\"\\ ,") || !strings.HasSuffix(r, "/mcp") || ResourcePath(r) != r || !strings.Contains(p, "/agents/"+agent+"/") {
			t.Fatalf("ResourcePath(%q) = %q (agent %q, %v)", p, r, agent, ok)
		}
	})
}

func FuzzTokenScopes(f *testing.F) {
	for _, s := range []string{`{"scope":"a b"}`, `{"scp":["a"]}`, `{"scope":7}`, `{"scp":"a"}`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cl, err := decodeObject([]byte(s))
		if err != nil {
			return
		}
		scopes, e := tokenScopes(cl)
		if e == nil && len(scopes) > maxGroups {
			t.Fatalf("%d scopes", len(scopes))
		}
	})
}

func TestOAuthValidate(t *testing.T) {
	base := func(mod func(*OAuthConfig)) Config {
		o := OAuthConfig{Issuer: "https://login.example.com"}
		mod(&o)
		return Config{OAuth: []OAuthConfig{o}, ResourceURL: testResourceURL}
	}
	for _, tt := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"issuer required", base(func(o *OAuthConfig) { o.Issuer = "" }), []string{"auth.oauth[0].issuer: required"}},
		{"issuer plain http", base(func(o *OAuthConfig) { o.Issuer = "http://login.example.com" }), []string{"auth.oauth[0].issuer:", "use https"}},
		{"issuer with query", base(func(o *OAuthConfig) { o.Issuer = "https://login.example.com/?x=1" }), []string{"auth.oauth[0].issuer:", "no query"}},
		{"duplicate issuer", Config{OAuth: []OAuthConfig{{Issuer: "https://a.example.com"}, {Issuer: "https://a.example.com"}}},
			[]string{`auth.oauth[1].issuer: "https://a.example.com" is already configured at auth.oauth[0]`}},
		{"issuer also under jwt", Config{OAuth: []OAuthConfig{{Issuer: "https://a.example.com"}}, JWT: []JWTConfig{{Issuer: "https://a.example.com", Audiences: []string{"x"}, KeyFile: "k"}}},
			[]string{`auth.oauth[0].issuer: "https://a.example.com" is also configured at auth.jwt[0]`}},
		{"algorithms", base(func(o *OAuthConfig) { o.Algorithms = []string{"none", "HS256", "XY"} }),
			[]string{"auth.oauth[0].algorithms[0]: unsigned", "auth.oauth[0].algorithms[1]: HS256 needs a secret", `auth.oauth[0].algorithms[2]: unknown algorithm "XY"`}},
		{"scopes", base(func(o *OAuthConfig) { o.Scopes = []string{"a b", `q"`, "x", "x"} }),
			[]string{`auth.oauth[0].scopes[0]: "a b" is not a scope`, `auth.oauth[0].scopes[1]`, `auth.oauth[0].scopes[3]: "x" is listed twice`}},
		{"audiences", base(func(o *OAuthConfig) { o.Audiences = []string{""} }), []string{"auth.oauth[0].audiences[0]: empty"}},
		{"introspection", base(func(o *OAuthConfig) { o.Introspection = &IntrospectionConfig{CacheTTL: time.Hour} }),
			[]string{"auth.oauth[0].introspection.client_id: required", "auth.oauth[0].introspection.client_secret_file: required", "auth.oauth[0].introspection.cache_ttl: 1h0m0s is more than the maximum"}},
		{"principal claim", base(func(o *OAuthConfig) { o.PrincipalClaim = "name" }), []string{`auth.oauth[0].principal_claim: "name": use sub`}},
		{"service account", base(func(o *OAuthConfig) { o.ServiceAccount = ServiceAccountConfig{Claim: "gty"} }), []string{"auth.oauth[0].service_account: set claim and value together"}},
		{"durations", base(func(o *OAuthConfig) { o.Leeway, o.MetadataRefresh, o.JWKSRefresh = time.Hour, time.Second, -1 }),
			[]string{"auth.oauth[0].leeway: 1h0m0s is more", "auth.oauth[0].metadata_refresh: 1s is less", "auth.oauth[0].jwks_refresh: must not be negative"}},
		{"resource url", base(func(o *OAuthConfig) {}), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == nil {
				for _, u := range []string{"lush.example.com", "https://lush.example.com/", "https://lush.example.com/?a", `https://lush.example.com/"x`} {
					c := tt.cfg
					c.ResourceURL = u
					if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "auth.resource_url: ") {
						t.Errorf("resource_url %q: %v", u, err)
					}
				}
				return
			}
			err := tt.cfg.Validate()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain %q", err, w)
				}
			}
		})
	}
	if _, err := New(context.Background(), Config{OAuth: []OAuthConfig{{Issuer: "https://a.example.com"}}}); err == nil || !strings.Contains(err.Error(), "auth.resource_url: required") {
		t.Errorf("New without resource_url: %v", err)
	}
}

func TestOAuthConfigYAML(t *testing.T) {
	src := `
resource_url: https://lush.example.com
oauth:
  - issuer: https://login.example.com
    audiences: [api://lush]
    scopes: [mcp:tools]
    algorithms: [RS256]
    introspection:
      client_id: lush
      client_secret_file: /etc/lush/introspection-secret
      cache_ttl: 30s
    claims:
      subject: oid
      email: upn
      groups: roles
      client_id: azp
    principal_claim: email
    service_account:
      claim: gty
      value: client-credentials
    leeway: 1m
    metadata_refresh: 2h
    jwks_refresh: 10m
`
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := OAuthConfig{Issuer: "https://login.example.com", Audiences: []string{"api://lush"}, Scopes: []string{"mcp:tools"}, Algorithms: []string{"RS256"},
		Introspection: &IntrospectionConfig{ClientID: "lush", ClientSecretFile: "/etc/lush/introspection-secret", CacheTTL: 30 * time.Second},
		Claims:        OAuthClaims{Subject: "oid", Email: "upn", Groups: "roles", ClientID: "azp"}, PrincipalClaim: "email",
		ServiceAccount: ServiceAccountConfig{Claim: "gty", Value: "client-credentials"}, Leeway: time.Minute, MetadataRefresh: 2 * time.Hour, JWKSRefresh: 10 * time.Minute}
	if c.ResourceURL != testResourceURL || !reflect.DeepEqual(c.OAuth[0], want) {
		t.Fatalf("decoded %+v", c)
	}
	// and back: the YAML names are the config's, one to one
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var again Config
	if err := yaml.Unmarshal(out, &again); err != nil || !reflect.DeepEqual(again.OAuth, c.OAuth) {
		t.Fatalf("round trip: %v\n%s", err, out)
	}
}
