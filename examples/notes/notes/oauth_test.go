package notes

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/test/syncbuf"
)

// TestOAuthAccessTokens: with Options.OAuth the server accepts its issuer's JWTs for its
// audience as the token's user, logs the agents acting for the user (never the token), and
// refuses a token for another audience, an expired one and one signed by another key; the static
// tokens keep working.
func TestOAuthAccessTokens(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := jwk.Import(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	_ = pub.Set(jwk.KeyIDKey, "k1")
	_ = pub.Set(jwk.AlgorithmKey, jwa.ES256())
	set := jwk.NewSet()
	_ = set.AddKey(pub)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(jwks.Close)

	const issuer, audience = "http://127.0.0.1:4445", "http://notes.test/mcp"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	auth, err := identity.New(ctx, identity.Config{JWT: []identity.JWTConfig{{Issuer: issuer, Audiences: []string{audience},
		JWKSURL: jwks.URL, Algorithms: []string{"ES256"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = auth.Close() })

	sign := func(signer *ecdsa.PrivateKey, aud string, exp time.Time) string {
		t.Helper()
		tok, err := jwt.NewBuilder().Issuer(issuer).Subject("alice").Audience([]string{aud}).IssuedAt(time.Now()).
			Expiration(exp).Claim("act", map[string]any{"sub": "agent:researcher", "act": map[string]any{"sub": "agent:orchestrator"}}).Build()
		if err != nil {
			t.Fatal(err)
		}
		priv, err := jwk.Import(signer)
		if err != nil {
			t.Fatal(err)
		}
		_ = priv.Set(jwk.KeyIDKey, "k1")
		signed, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256(), priv))
		if err != nil {
			t.Fatal(err)
		}
		return string(signed)
	}
	good := sign(key, audience, time.Now().Add(time.Hour))

	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, twoAccounts)
	logs := &syncbuf.Buffer{}
	s, err := New(Options{TokensFile: path, Seed: map[string][]string{"alice": {"alice's plan"}},
		Logger: slog.New(slog.NewTextHandler(logs, nil)), OAuth: auth})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); ts.Close() })
	url := ts.URL + "/mcp"

	c := mustConnect(t, url, good)
	if _, text := call(t, c, "search_notes", map[string]any{"query": "plan"}); !strings.Contains(text, "alice's plan") {
		t.Errorf("search_notes with alice's access token = %q, want her notes", text)
	}
	_ = c.Close()
	if !strings.Contains(logs.String(), "agent:researcher ← agent:orchestrator") {
		t.Errorf("the log does not name the acting agents:\n%s", logs)
	}
	if strings.Contains(logs.String(), good) {
		t.Errorf("the log holds the access token:\n%s", logs)
	}

	for name, tok := range map[string]string{
		"another audience": sign(key, "http://other.test/mcp", time.Now().Add(time.Hour)),
		"expired":          sign(key, audience, time.Now().Add(-time.Hour)),
		"another key":      sign(other, audience, time.Now().Add(time.Hour)),
	} {
		resp, body := post(t, url, "Bearer "+tok)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "access token refused") {
			t.Errorf("%s: status %d, body %s; want 401 access token refused", name, resp.StatusCode, body)
		}
	}
	if resp, _ := post(t, url, "Bearer "+aliceToken); resp.StatusCode != http.StatusOK {
		t.Errorf("alice's static token: status %d, want 200", resp.StatusCode)
	}
}
