package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the tests' "now".
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	testIssuer = "https://idp.example.com"
	testAud    = "lush"
	// hmacSecret is the HS256 shared secret of the tests (48 bytes).
	hmacSecret = "hs256-test-secret-0123456789-abcdefghijklmnopqrs"
)

// Test keys, generated once.
var (
	keysOnce          sync.Once
	rsaKey, rsaKey2   *rsa.PrivateKey
	ecKey, ecKey2     *ecdsa.PrivateKey
	rsaWeak           *rsa.PrivateKey
	ecP384            *ecdsa.PrivateKey
	generatedKeysErrs error
)

func keys(t testing.TB) {
	t.Helper()
	keysOnce.Do(func() {
		var errs []error
		var err error
		rsaKey, err = rsa.GenerateKey(rand.Reader, 2048)
		errs = append(errs, err)
		rsaKey2, err = rsa.GenerateKey(rand.Reader, 2048)
		errs = append(errs, err)
		rsaWeak, err = rsa.GenerateKey(rand.Reader, 1024)
		errs = append(errs, err)
		ecKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		errs = append(errs, err)
		ecKey2, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		errs = append(errs, err)
		ecP384, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		errs = append(errs, err)
		generatedKeysErrs = errors.Join(errs...)
	})
	if generatedKeysErrs != nil {
		t.Fatal(generatedKeysErrs)
	}
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: t0} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// claimsAt returns valid claims for testIssuer at t0.
func baseClaims() map[string]any {
	return map[string]any{
		"iss":    testIssuer,
		"aud":    testAud,
		"sub":    "alice",
		"iat":    t0.Add(-time.Minute).Unix(),
		"nbf":    t0.Add(-time.Minute).Unix(),
		"exp":    t0.Add(time.Hour).Unix(),
		"groups": []string{"ops", "eng"},
	}
}

// with returns claims changed by kv (a nil value deletes the claim).
func with(c map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

// mint signs claims as a compact JWS with typ JWT and kid (if not empty).
func mint(t testing.TB, alg jwa.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	return mintHeaders(t, alg, key, map[string]any{"kid": kid, "typ": "JWT"}, claims)
}

func mintHeaders(t testing.TB, alg jwa.SignatureAlgorithm, key any, headers map[string]any, claims map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	hdr := jws.NewHeaders()
	for k, v := range headers {
		if v == "" {
			continue
		}
		if err := hdr.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := jws.Sign(payload, jws.WithKey(alg, key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		t.Fatal(err)
	}
	return string(tok)
}

// publicJWK returns key's public JWK with kid and (if not empty) alg.
func publicJWK(t testing.TB, key any, kid, alg string) jwk.Key {
	t.Helper()
	k, err := jwk.PublicKeyOf(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.KeyIDKey, kid); err != nil {
		t.Fatal(err)
	}
	if alg != "" {
		if err := k.Set(jwk.AlgorithmKey, alg); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func jwksJSON(t testing.TB, keys ...jwk.Key) []byte {
	t.Helper()
	set := jwk.NewSet()
	for _, k := range keys {
		if err := set.AddKey(k); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jwksServer serves a JWKS on loopback and counts fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	body    []byte
	status  int
	fetches atomic.Int32
}

func newJWKSServer(t testing.TB, keys ...jwk.Key) *jwksServer {
	t.Helper()
	s := &jwksServer{body: jwksJSON(t, keys...), status: http.StatusOK}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		body, status := s.body, s.status
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) serve(t testing.TB, keys ...jwk.Key) {
	b := jwksJSON(t, keys...)
	s.mu.Lock()
	s.body, s.status = b, http.StatusOK
	s.mu.Unlock()
}

func (s *jwksServer) fail(status int) {
	s.mu.Lock()
	s.status, s.body = status, []byte("down")
	s.mu.Unlock()
}

// newAuth builds an Authenticator on clk and closes it when the test ends.
func newAuth(t testing.TB, cfg Config, clk *clock) *Authenticator {
	t.Helper()
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if clk != nil {
		a.now = clk.now
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

// request builds a request from remote with header name/value pairs.
func request(remote string, kv ...string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/agents/researcher/mcp", nil)
	r.RemoteAddr = remote
	for i := 0; i < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

func bearerReq(tok string) *http.Request {
	return request("198.51.100.1:4000", "Authorization", "Bearer "+tok)
}

// writeFile writes data to a file in dir and returns its path.
func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func pemPublic(t testing.TB, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// authErr asserts err is an *Error with code and a message containing want.
func authErr(t testing.TB, err error, code, want string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want *Error %s", err, err, code)
	}
	if e.Code != code || !strings.Contains(e.Message, want) {
		t.Fatalf("error = %q, want code %s and message containing %q", e.Error(), code, want)
	}
	if e.Status() != http.StatusUnauthorized {
		t.Fatalf("Status() = %d", e.Status())
	}
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// privJWK is the EC test key as a private JWKS.
func privJWK(t testing.TB) []byte {
	t.Helper()
	k, err := jwk.Import(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	return jwksJSON(t, k)
}
