package identity

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
)

// FuzzAuthenticate sends arbitrary credential headers from a trusted or an untrusted address.
// Authenticate must never panic, must fail with an *Error that shows no secret, and may succeed
// only for credentials the test issued (or a trusted proxy naming a principal).
func FuzzAuthenticate(f *testing.F) {
	keys(f)
	dir := f.TempDir()
	pemFile := writeFile(f, dir, "rsa.pem", pemPublic(f, &rsaKey.PublicKey))
	secretFile := writeFile(f, dir, "hs.secret", []byte(hmacSecret))
	priv, pub := delegationKeys(f)
	const hsIssuer = "https://hs.example.com"
	cfg := Config{
		JWT: []JWTConfig{
			{Issuer: testIssuer, Audiences: []string{testAud}, KeyFile: pemFile},
			{Issuer: hsIssuer, Audiences: []string{testAud}, KeyFile: secretFile, Algorithms: []string{"HS256"}},
		},
		APIKeys:    apiKeys,
		Proxy:      &ProxyConfig{Trusted: []string{"10.0.0.0/8", "fd00::/8"}},
		Delegation: &DelegationConfig{PublicKeys: []string{pub}},
	}
	a := newAuth(f, cfg, nil)
	a.now = func() time.Time { return t0 }
	signer := NewSigner(priv, "")
	signer.now = a.now

	validRS := mint(f, jwa.RS256(), rsaKey, "", baseClaims())
	validHS := mint(f, jwa.HS256(), []byte(hmacSecret), "", with(baseClaims(), "iss", hsIssuer))
	validDeleg, err := signer.Sign(goodDelegation)
	if err != nil {
		f.Fatal(err)
	}
	tokens := []string{validRS, validHS, validDeleg}
	keys := []string{ciKey, opsKey}
	remotes := []string{"203.0.113.7:1000", "10.1.2.3:1000", "[fd00::5]:443", "[2001:db8::1]:443", "", "garbage"}

	parts := strings.Split(validRS, ".")
	for _, s := range []struct{ authz, key, p, g string }{
		{"Bearer " + validRS, "", "", ""},
		{"Bearer " + validHS, "", "", ""},
		{"Bearer " + validDeleg, "", "", ""},
		{"Bearer " + ciKey, "", "", ""},
		{"", opsKey, "", ""},
		{"", "", "user:alice", "eng,ops"},
		{"Bearer " + b64enc(`{"alg":"none"}`) + "." + parts[1] + ".", "", "", ""},
		{"Bearer " + b64enc(`{"alg":"HS256","kid":"x"}`) + "." + parts[1] + "." + parts[2], "", "", ""},
		{"Bearer " + parts[0] + "." + parts[1] + "." + parts[2] + "x", "", "", ""},
		{"Bearer " + b64enc(`{"alg":"EdDSA","typ":"lush-delegation+jwt","kid":"k"}`) + ".e30.", "", "", ""},
		{"Bearer a.b.c.d.e", "", "", ""},
		{"Basic dXNlcjpwYXNz", "", "", ""},
		{"Bearer", " ", "user:x", ""},
	} {
		for i := range remotes {
			f.Add(s.authz, s.key, s.p, s.g, uint8(i))
		}
	}

	f.Fuzz(func(t *testing.T, authz, apiKey, pHdr, gHdr string, remote uint8) {
		var kv []string
		for _, h := range []struct{ name, v string }{{"Authorization", authz}, {"X-API-Key", apiKey}, {DefaultProxyHeader, pHdr}, {DefaultProxyGroupsHeader, gHdr}} {
			if h.v != "" {
				kv = append(kv, h.name, h.v)
			}
		}
		addr := remotes[int(remote)%len(remotes)]
		c, err := a.Authenticate(request(addr, kv...))
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code == "" || e.Message == "" {
				t.Fatalf("error %#v is not a complete *Error", err)
			}
			for _, s := range append(append([]string{hmacSecret}, keys...), tokens...) {
				if strings.Contains(e.Message, s) {
					t.Fatalf("message %q shows a secret", e.Message)
				}
			}
			return
		}
		if c.ID == "" || c.Groups == nil {
			t.Fatalf("incomplete caller %+v", c)
		}
		switch c.Method {
		case MethodJWT:
			if !strings.Contains(authz, validRS) && !strings.Contains(authz, validHS) {
				t.Fatalf("authenticated a JWT the test did not issue: %q -> %+v", authz, c)
			}
		case MethodDelegation:
			if !strings.Contains(authz, validDeleg) {
				t.Fatalf("authenticated a delegation token the test did not issue: %q -> %+v", authz, c)
			}
		case MethodAPIKey:
			if !strings.Contains(authz+apiKey, ciKey) && !strings.Contains(authz+apiKey, opsKey) {
				t.Fatalf("authenticated an API key the test did not configure: %q %q -> %+v", authz, apiKey, c)
			}
		case MethodProxy:
			if ip, ok := parseRemote(addr); !ok || !(ip.Is4() && ip.As4()[0] == 10 || ip.Is6() && ip.As16()[0] == 0xfd) {
				t.Fatalf("proxy identity from untrusted %q: %+v", addr, c)
			}
			if c.ID != strings.TrimSpace(pHdr) {
				t.Fatalf("proxy caller %+v from header %q", c, pHdr)
			}
		default:
			t.Fatalf("unexpected method: %+v", c)
		}
	})
}
