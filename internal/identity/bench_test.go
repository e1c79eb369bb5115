package identity

import (
	"net/http"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
)

func BenchmarkAuthenticate(b *testing.B) {
	keys(b)
	srv := newJWKSServer(b, publicJWK(b, rsaKey, "rsa-1", "RS256"), publicJWK(b, ecKey, "ec-1", ""))
	dir := b.TempDir()
	secretFile := writeFile(b, dir, "hs.secret", []byte(hmacSecret))
	priv, pub := delegationKeys(b)
	const hsIssuer = "https://hs.example.com"
	a := newAuth(b, Config{
		JWT: []JWTConfig{
			{Issuer: testIssuer, Audiences: []string{testAud}, JWKSURL: srv.URL},
			{Issuer: hsIssuer, Audiences: []string{testAud}, KeyFile: secretFile, Algorithms: []string{"HS256"}},
		},
		APIKeys:    apiKeys,
		Proxy:      &ProxyConfig{Trusted: []string{"10.0.0.0/8"}},
		Delegation: &DelegationConfig{PublicKeys: []string{pub}},
	}, newClock())
	s := NewSigner(priv, "")
	s.now = func() time.Time { return t0 }
	deleg, err := s.Sign(goodDelegation)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		kv   []string
	}{
		{"RS256-JWKS", []string{"Authorization", "Bearer " + mint(b, jwa.RS256(), rsaKey, "rsa-1", baseClaims())}},
		{"ES256-JWKS", []string{"Authorization", "Bearer " + mint(b, jwa.ES256(), ecKey, "ec-1", baseClaims())}},
		{"HS256-file", []string{"Authorization", "Bearer " + mint(b, jwa.HS256(), []byte(hmacSecret), "", with(baseClaims(), "iss", hsIssuer))}},
		{"delegation", []string{"Authorization", "Bearer " + deleg}},
		{"apikey", []string{"X-API-Key", opsKey}},
		{"proxy", []string{"X-Lush-Principal", "user:alice", "X-Lush-Groups", "eng,ops"}},
	} {
		r := request("10.0.0.1:1", bc.kv...)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Authenticate(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSign(b *testing.B) {
	priv, _ := delegationKeys(b)
	s := NewSigner(priv, "")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sign(goodDelegation); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAuthenticateOAuth: an OAuth access token (RS256, at+jwt, keys from the authorization
// server's discovered JWKS, audience the endpoint's resource) against an API key of the same
// Authenticator, as the baseline in the same run.
func BenchmarkAuthenticateOAuth(b *testing.B) {
	a, srv, _ := oauthAuth(b, nil)
	for _, bc := range []struct {
		name string
		r    *http.Request
	}{
		{"oauth-RS256", bearerAt("/agents/researcher/mcp", accessToken(b, rsaKey, "rsa-1", oauthClaims(srv)))},
		{"apikey", request("10.0.0.1:1", "X-API-Key", opsKey)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Authenticate(bc.r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
