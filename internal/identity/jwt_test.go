package identity

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"go.uber.org/goleak"
)

// jwksAuth starts a JWKS server with the RSA and EC test keys and an Authenticator using it.
func jwksAuth(t *testing.T, mod func(*JWTConfig)) (*Authenticator, *jwksServer, *clock) {
	t.Helper()
	keys(t)
	srv := newJWKSServer(t, publicJWK(t, rsaKey, "rsa-1", "RS256"), publicJWK(t, ecKey, "ec-1", ""))
	jc := JWTConfig{Issuer: testIssuer, Audiences: []string{"other", testAud}, JWKSURL: srv.URL + "/jwks"}
	if mod != nil {
		mod(&jc)
	}
	clk := newClock()
	return newAuth(t, Config{JWT: []JWTConfig{jc}}, clk), srv, clk
}

func TestJWTFromJWKS(t *testing.T) {
	a, srv, _ := jwksAuth(t, nil)
	if n := srv.fetches.Load(); n != 1 {
		t.Errorf("New fetched the JWKS %d times, want 1", n)
	}
	want := Caller{ID: "user:alice", Groups: []string{"group:eng", "group:ops"}, Method: MethodJWT, Subject: "alice"}
	for name, tok := range map[string]string{
		"RS256":             mint(t, jwa.RS256(), rsaKey, "rsa-1", baseClaims()),
		"ES256":             mint(t, jwa.ES256(), ecKey, "ec-1", baseClaims()),
		"ES256 without kid": mint(t, jwa.ES256(), ecKey, "", baseClaims()),
		"aud array":         mint(t, jwa.RS256(), rsaKey, "rsa-1", with(baseClaims(), "aud", []string{"x", testAud})),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := a.Authenticate(bearerReq(tok))
			if err != nil {
				t.Fatal(err)
			}
			if got.Token.Reveal() != tok {
				t.Error("the caller does not keep its token for token exchange")
			}
			if fmt.Sprintf("%v %+v %#v %s", got, got, got, got.Token) == "" || strings.Contains(fmt.Sprintf("%v %+v %#v %s", got, got, got, got.Token), tok) {
				t.Error("printing the caller shows its token")
			}
			got.Token = SubjectToken{}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestJWTFromKeyFiles(t *testing.T) {
	keys(t)
	dir := t.TempDir()
	pemFile := writeFile(t, dir, "rsa.pem", append(pemPublic(t, &rsaKey.PublicKey), pemPublic(t, &rsaKey2.PublicKey)...))
	jwksFile := writeFile(t, dir, "ec.jwks", jwksJSON(t, publicJWK(t, ecKey, "ec-1", "ES256")))
	secretFile := writeFile(t, dir, "hs.secret", []byte(hmacSecret+"\n"))

	tests := []struct {
		name string
		cfg  JWTConfig
		tok  string
	}{
		{"RS256 PEM", JWTConfig{KeyFile: pemFile, Algorithms: []string{"RS256"}}, mint(t, jwa.RS256(), rsaKey, "", baseClaims())},
		{"RS256 PEM second key, any kid", JWTConfig{KeyFile: pemFile}, mint(t, jwa.RS256(), rsaKey2, "whatever", baseClaims())},
		{"ES256 JWKS file", JWTConfig{KeyFile: jwksFile}, mint(t, jwa.ES256(), ecKey, "ec-1", baseClaims())},
		{"HS256 secret", JWTConfig{KeyFile: secretFile, Algorithms: []string{"HS256"}}, mint(t, jwa.HS256(), []byte(hmacSecret), "", baseClaims())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Issuer, tt.cfg.Audiences = testIssuer, []string{testAud}
			a := newAuth(t, Config{JWT: []JWTConfig{tt.cfg}}, newClock())
			got, err := a.Authenticate(bearerReq(tt.tok))
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != "user:alice" || got.Method != MethodJWT {
				t.Errorf("got %+v", got)
			}
		})
	}
}

func TestJWTRejects(t *testing.T) {
	a, _, _ := jwksAuth(t, nil)
	rs := func(c map[string]any) string { return mint(t, jwa.RS256(), rsaKey, "rsa-1", c) }
	good := rs(baseClaims())
	parts := strings.Split(good, ".")

	// alg none: the header says none and the signature is empty.
	none := b64enc(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + "."
	noneUpper := b64enc(`{"alg":"NONE","kid":"rsa-1"}`) + "." + parts[1] + "."
	// A signature made by another key, and a payload altered after signing.
	forged := mint(t, jwa.RS256(), rsaKey2, "rsa-1", baseClaims())
	altered := parts[0] + "." + b64json(t, with(baseClaims(), "sub", "root")) + "." + parts[2]

	tests := []struct {
		name, tok, code, want string
	}{
		{"expired", rs(with(baseClaims(), "exp", t0.Add(-time.Minute).Unix())), CodeExpiredToken, "expired at 2026-03-01T11:59:00Z: obtain a new token"},
		{"expired beyond leeway only", rs(with(baseClaims(), "exp", t0.Add(-31*time.Second).Unix())), CodeExpiredToken, "expired"},
		{"not yet valid", rs(with(baseClaims(), "nbf", t0.Add(time.Minute).Unix())), CodeInvalidToken, "not valid before 2026-03-01T12:01:00Z"},
		{"issued in the future", rs(with(baseClaims(), "iat", t0.Add(time.Hour).Unix())), CodeInvalidToken, "issued in the future"},
		{"no exp", rs(with(baseClaims(), "exp", nil)), CodeInvalidToken, "no exp claim"},
		{"exp not a number", rs(with(baseClaims(), "exp", "tomorrow")), CodeInvalidToken, "exp is not a number"},
		{"wrong issuer", rs(with(baseClaims(), "iss", "https://evil.example")), CodeInvalidToken, `issuer "https://evil.example" is not configured: add it under auth.jwt`},
		{"no issuer", rs(with(baseClaims(), "iss", nil)), CodeInvalidToken, "no iss claim"},
		{"wrong audience", rs(with(baseClaims(), "aud", "billing")), CodeInvalidToken, `audience ["billing"] does not include any of other, lush`},
		{"no audience", rs(with(baseClaims(), "aud", nil)), CodeInvalidToken, "no aud claim"},
		{"bad signature", forged, CodeInvalidToken, "signature does not verify"},
		{"altered payload", altered, CodeInvalidToken, "signature does not verify"},
		{"alg none", none, CodeInvalidToken, "alg none"},
		{"alg NONE", noneUpper, CodeInvalidToken, "alg none"},
		{"alg not allowed", mint(t, jwa.RS512(), rsaKey, "rsa-1", baseClaims()), CodeInvalidToken, `algorithm "RS512" is not allowed`},
		{"kid of another type", mint(t, jwa.ES256(), ecKey, "rsa-1", baseClaims()), CodeInvalidToken, `no key that verifies ES256 tokens with key id "rsa-1"`},
		{"no subject", rs(with(baseClaims(), "sub", nil)), CodeInvalidToken, `no "sub" claim`},
		{"subject not a principal", rs(with(baseClaims(), "sub", "a b")), CodeInvalidToken, "does not form a principal"},
		{"groups not strings", rs(with(baseClaims(), "groups", []any{"a", 7})), CodeInvalidToken, "must be an array of strings"},
		{"group not a name", rs(with(baseClaims(), "groups", []string{"ok", "has space"})), CodeInvalidToken, "element 1"},
		{"duplicate claim", parts[0] + "." + b64enc(`{"sub":"a","sub":"b"}`) + "." + parts[2], CodeInvalidToken, "appears twice"},
		{"padded signature", good + "=", CodeInvalidToken, "signature is not unpadded base64url"},
		{"JWE", "eyJhbGciOiJSU0EtT0FFUCJ9.a.b.c.d", CodeInvalidToken, "encrypted tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.Authenticate(bearerReq(tt.tok))
			authErr(t, err, tt.code, tt.want)
		})
	}
}

// TestAlgorithmConfusion: an RSA public key must never serve as an HMAC secret.
func TestAlgorithmConfusion(t *testing.T) {
	keys(t)
	dir := t.TempDir()
	pubPEM := pemPublic(t, &rsaKey.PublicKey)
	pemFile := writeFile(t, dir, "rsa.pem", pubPEM)
	// The classic attack: HS256 with the issuer's public key (as published) as the secret.
	attack := mint(t, jwa.HS256(), pubPEM, "rsa-1", baseClaims())

	t.Run("key file", func(t *testing.T) {
		a := newAuth(t, Config{JWT: []JWTConfig{{Issuer: testIssuer, Audiences: []string{testAud}, KeyFile: pemFile}}}, newClock())
		_, err := a.Authenticate(bearerReq(attack))
		authErr(t, err, CodeInvalidToken, `algorithm "HS256" is not allowed`)
	})
	t.Run("JWKS", func(t *testing.T) {
		a, _, _ := jwksAuth(t, nil)
		_, err := a.Authenticate(bearerReq(attack))
		authErr(t, err, CodeInvalidToken, `algorithm "HS256" is not allowed`)
	})
	t.Run("HS256 over a PEM key file is refused at start", func(t *testing.T) {
		_, err := New(context.Background(), Config{JWT: []JWTConfig{{Issuer: testIssuer, Audiences: []string{testAud}, KeyFile: pemFile, Algorithms: []string{"HS256"}}}})
		if err == nil || !strings.Contains(err.Error(), "auth.jwt[0].key_file") || !strings.Contains(err.Error(), "holds a PEM or JWK key") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("mixing HS and RS is a config error", func(t *testing.T) {
		err := Config{JWT: []JWTConfig{{Issuer: testIssuer, Audiences: []string{testAud}, KeyFile: pemFile, Algorithms: []string{"RS256", "HS256"}}}}.Validate()
		if err == nil || !strings.Contains(err.Error(), "auth.jwt[0].algorithms: HMAC (HS*) and public-key algorithms cannot be mixed") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("symmetric key in a JWKS is never used", func(t *testing.T) {
		sym, err := jwk.Import([]byte(hmacSecret))
		if err != nil {
			t.Fatal(err)
		}
		sym.Set(jwk.KeyIDKey, "sym")
		srv := newJWKSServer(t, sym, publicJWK(t, rsaKey, "rsa-1", ""))
		a := newAuth(t, Config{JWT: []JWTConfig{{Issuer: testIssuer, Audiences: []string{testAud}, JWKSURL: srv.URL}}}, newClock())
		_, err = a.Authenticate(bearerReq(mint(t, jwa.HS256(), []byte(hmacSecret), "sym", baseClaims())))
		authErr(t, err, CodeInvalidToken, "not allowed")
		// Even with the kid of the RSA key and an RS256 header, an HMAC signature fails.
		hdr := b64enc(`{"alg":"RS256","kid":"rsa-1"}`)
		body := b64json(t, baseClaims())
		mac := hmac.New(sha256.New, pubPEM)
		mac.Write([]byte(hdr + "." + body))
		tok := hdr + "." + body + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
		_, err = a.Authenticate(bearerReq(tok))
		authErr(t, err, CodeInvalidToken, "signature does not verify")
	})
}

func TestUnknownKidRefreshesOncePerMinute(t *testing.T) {
	a, srv, clk := jwksAuth(t, nil)
	base := srv.fetches.Load()

	// The issuer rotates: rsa-2 appears in its JWKS.
	srv.serve(t, publicJWK(t, rsaKey, "rsa-1", "RS256"), publicJWK(t, rsaKey2, "rsa-2", "RS256"))
	rotated := mint(t, jwa.RS256(), rsaKey2, "rsa-2", baseClaims())
	if _, err := a.Authenticate(bearerReq(rotated)); err != nil {
		t.Fatalf("token with the new key: %v", err)
	}
	if n := srv.fetches.Load() - base; n != 1 {
		t.Fatalf("unknown kid caused %d fetches, want 1", n)
	}

	// Attackers sending random key ids cause no more fetches within the minute.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := a.Authenticate(bearerReq(mint(t, jwa.RS256(), rsaKey2, "random-"+string(rune('a'+i)), baseClaims())))
			if err == nil {
				t.Error("token with a random kid authenticated")
			}
		}()
	}
	wg.Wait()
	_, err := a.Authenticate(bearerReq(mint(t, jwa.RS256(), rsaKey2, "random", baseClaims())))
	authErr(t, err, CodeInvalidToken, `key id "random" is not among the keys`)
	if n := srv.fetches.Load() - base; n != 1 {
		t.Fatalf("within the minute: %d fetches, want 1", n)
	}

	// A minute later, one more refresh is allowed, even for many concurrent requests.
	clk.advance(61 * time.Second)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.Authenticate(bearerReq(mint(t, jwa.RS256(), rsaKey2, "random", baseClaims())))
		}()
	}
	wg.Wait()
	if n := srv.fetches.Load() - base; n != 2 {
		t.Fatalf("after a minute: %d fetches, want 2", n)
	}
}

func TestJWKSDownKeepsLastGoodKeys(t *testing.T) {
	for name, down := range map[string]func(*jwksServer){
		"500":     func(s *jwksServer) { s.fail(http.StatusInternalServerError) },
		"garbage": func(s *jwksServer) { s.mu.Lock(); s.body = []byte(`{"keys": "nope"}`); s.mu.Unlock() },
		"closed": func(s *jwksServer) {
			s.CloseClientConnections()
			s.Close()
		},
	} {
		t.Run(name, func(t *testing.T) {
			a, srv, clk := jwksAuth(t, nil)
			good := mint(t, jwa.RS256(), rsaKey, "rsa-1", baseClaims())
			down(srv)
			// An unknown kid forces a refresh, which fails.
			_, err := a.Authenticate(bearerReq(mint(t, jwa.RS256(), rsaKey2, "rsa-2", baseClaims())))
			authErr(t, err, CodeInvalidToken, "is not among the keys")
			for range 2 {
				if _, err := a.Authenticate(bearerReq(good)); err != nil {
					t.Fatalf("after a failed refresh: %v", err)
				}
				clk.advance(2 * time.Minute)
				a.Authenticate(bearerReq(mint(t, jwa.RS256(), rsaKey2, "rsa-3", baseClaims())))
			}
		})
	}
}

func TestJWKSAtStart(t *testing.T) {
	keys(t)
	t.Run("down", func(t *testing.T) {
		srv := newJWKSServer(t)
		srv.fail(http.StatusServiceUnavailable)
		_, err := New(context.Background(), Config{JWT: []JWTConfig{{Issuer: testIssuer, Audiences: []string{testAud}, JWKSURL: srv.URL}}})
		if err == nil || !strings.Contains(err.Error(), "auth.jwt[0].jwks_url: fetch "+srv.URL) || !strings.Contains(err.Error(), "503") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no usable key", func(t *testing.T) {
		srv := newJWKSServer(t, publicJWK(t, ecP384, "ec-384", ""))
		_, err := New(context.Background(), Config{JWT: []JWTConfig{{Issuer: testIssuer, Audiences: []string{testAud}, JWKSURL: srv.URL}}})
		if err == nil || !strings.Contains(err.Error(), "no signing key usable with RS256, ES256: it holds EC P-384") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		srv := newJWKSServer(t, publicJWK(t, rsaKey, "rsa-1", ""))
		if _, err := New(ctx, Config{JWT: []JWTConfig{{Issuer: testIssuer, Audiences: []string{testAud}, JWKSURL: srv.URL}}}); err == nil {
			t.Fatal("New with a cancelled context succeeded")
		}
	})
	t.Run("weak RSA skipped", func(t *testing.T) {
		srv := newJWKSServer(t)
		srv.mu.Lock()
		srv.body = []byte(`{"keys":[{"kty":"RSA","kid":"weak","e":"AQAB","n":"` + base64.RawURLEncoding.EncodeToString(rsaWeak.N.Bytes()) + `"}]}`)
		srv.mu.Unlock()
		_, err := New(context.Background(), Config{JWT: []JWTConfig{{Issuer: testIssuer, Audiences: []string{testAud}, JWKSURL: srv.URL}}})
		if err == nil || !strings.Contains(err.Error(), "auth.jwt[0].jwks_url") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestKeyFileErrors(t *testing.T) {
	keys(t)
	dir := t.TempDir()
	privDER := pemBlock("PRIVATE KEY", []byte("x"))
	tests := []struct {
		name, file string
		algs       []string
		want       string
	}{
		{"missing", dir + "/nope.pem", nil, "auth.jwt[0].key_file: read keys"},
		{"private key", writeFile(t, dir, "priv.pem", privDER), nil, "PEM block 0: a private key"},
		{"empty", writeFile(t, dir, "empty.pem", []byte("hello")), nil, "holds no public key"},
		{"weak RSA", writeFile(t, dir, "weak.pem", pemPublic(t, &rsaWeak.PublicKey)), nil, "RSA key of 1024 bits"},
		{"wrong curve", writeFile(t, dir, "p384.pem", pemPublic(t, &ecP384.PublicKey)), []string{"ES256"}, "no key usable with ES256: it holds EC P-384"},
		{"short secret", writeFile(t, dir, "short.secret", []byte("short\n")), []string{"HS256"}, "holds a 5-byte secret; HS256 needs at least 32 bytes"},
		{"HS512 secret too short", writeFile(t, dir, "hs512.secret", []byte(hmacSecret)), []string{"HS512"}, "needs at least 64 bytes"},
		{"private JWK", writeFile(t, dir, "priv.jwk", privJWK(t)), nil, "key 0 is a private key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(context.Background(), Config{JWT: []JWTConfig{{Issuer: testIssuer, Audiences: []string{testAud}, KeyFile: tt.file, Algorithms: tt.algs}}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), hmacSecret) {
				t.Fatal("error contains the secret")
			}
		})
	}
}

func TestGroupsAndSubjectClaims(t *testing.T) {
	tests := []struct {
		name   string
		mod    func(*JWTConfig)
		claims map[string]any
		wantID string
		groups []string
	}{
		{"groups array", nil, baseClaims(), "user:alice", []string{"group:eng", "group:ops"}},
		{"groups space separated", nil, with(baseClaims(), "groups", "ops eng  ops"), "user:alice", []string{"group:eng", "group:ops"}},
		{"groups comma separated", nil, with(baseClaims(), "groups", "ops,eng, qa"), "user:alice", []string{"group:eng", "group:ops", "group:qa"}},
		{"no groups", nil, with(baseClaims(), "groups", nil), "user:alice", []string{}},
		{"custom groups claim", func(c *JWTConfig) { c.GroupsClaim = "roles" }, with(baseClaims(), "roles", []string{"admin"}), "user:alice", []string{"group:admin"}},
		{"subject claim and kind", func(c *JWTConfig) { c.SubjectClaim = "email"; c.PrincipalKind = "serviceaccount" },
			with(baseClaims(), "email", "bot@example.com"), "serviceaccount:bot@example.com", []string{"group:eng", "group:ops"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _, _ := jwksAuth(t, tt.mod)
			got, err := a.Authenticate(bearerReq(mint(t, jwa.ES256(), ecKey, "ec-1", tt.claims)))
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.wantID || !reflect.DeepEqual(got.Groups, tt.groups) || got.Subject != "alice" {
				t.Errorf("got %+v, want %s %v", got, tt.wantID, tt.groups)
			}
		})
	}
}

func TestLeeway(t *testing.T) {
	a, _, clk := jwksAuth(t, func(c *JWTConfig) { c.Leeway = 2 * time.Minute })
	tok := mint(t, jwa.RS256(), rsaKey, "rsa-1", with(baseClaims(), "exp", t0.Unix(), "nbf", t0.Add(90*time.Second).Unix()))
	if _, err := a.Authenticate(bearerReq(tok)); err != nil {
		t.Fatalf("within leeway: %v", err)
	}
	clk.advance(2 * time.Minute)
	_, err := a.Authenticate(bearerReq(tok))
	authErr(t, err, CodeExpiredToken, "expired at 2026-03-01T12:00:00Z")
}

func b64enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func b64json(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestCloseStopsGoroutines(t *testing.T) {
	keys(t)
	srv := newJWKSServer(t, publicJWK(t, rsaKey, "rsa-1", ""))
	srv2 := newJWKSServer(t, publicJWK(t, ecKey, "ec-1", ""))
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a, err := New(context.Background(), Config{JWT: []JWTConfig{
		{Issuer: testIssuer, Audiences: []string{testAud}, JWKSURL: srv.URL},
		{Issuer: "https://two.example.com", Audiences: []string{testAud}, JWKSURL: srv2.URL},
		{Issuer: "https://three.example.com", Audiences: []string{testAud}, JWKSURL: srv2.URL}, // shares the second URL
	}})
	if err != nil {
		t.Fatal(err)
	}
	a.now = newClock().now
	tok := mint(t, jwa.RS256(), rsaKey, "rsa-1", baseClaims())
	if _, err := a.Authenticate(bearerReq(tok)); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// After Close the last keys still verify, and an unknown kid does not block.
	if _, err := a.Authenticate(bearerReq(tok)); err != nil {
		t.Fatalf("after Close: %v", err)
	}
	start := time.Now()
	_, err = a.Authenticate(bearerReq(mint(t, jwa.RS256(), rsaKey, "other", baseClaims())))
	authErr(t, err, CodeInvalidToken, "is not among the keys")
	if d := time.Since(start); d > time.Second {
		t.Fatalf("unknown kid after Close took %s", d)
	}
	srv.Close()
	srv2.Close()
}

func TestJWKSWithNoKeysKeepsLastGoodKeys(t *testing.T) {
	a, srv, clk := jwksAuth(t, nil)
	srv.serve(t) // {"keys":[]}
	before := srv.fetches.Load()
	clk.advance(time.Hour)
	tok := mint(t, jwa.RS256(), rsaKey, "rsa-1", with(baseClaims(), "exp", t0.Add(2*time.Hour).Unix()))
	a.Authenticate(bearerReq(mint(t, jwa.RS256(), rsaKey, "new", baseClaims()))) // forces a refresh
	if srv.fetches.Load() == before {
		t.Fatal("no refresh happened")
	}
	if _, err := a.Authenticate(bearerReq(tok)); err != nil {
		t.Fatalf("after an empty JWKS: %v", err)
	}
}
