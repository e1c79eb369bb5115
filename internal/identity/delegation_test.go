package identity

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
)

// delegationKeys generates agentd's key pair and returns the private key and the public key file.
func delegationKeys(t testing.TB) (ed25519.PrivateKey, string) {
	t.Helper()
	privPath, pubPath, err := GenerateKey(filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	priv, err := LoadPrivateKey(privPath)
	if err != nil {
		t.Fatal(err)
	}
	return priv, pubPath
}

func delegationAuth(t *testing.T, mod func(*DelegationConfig)) (*Authenticator, *Signer, *clock) {
	t.Helper()
	priv, pub := delegationKeys(t)
	dc := DelegationConfig{PublicKeys: []string{pub}}
	if mod != nil {
		mod(&dc)
	}
	clk := newClock()
	a := newAuth(t, Config{Delegation: &dc}, clk)
	s := NewSigner(priv, dc.Audience)
	s.now = clk.now
	return a, s, clk
}

var goodDelegation = Delegation{
	Principal: "user:alice",
	Groups:    []string{"group:ops", "group:eng", "group:ops"},
	Agent:     "researcher",
	Chain:     []string{"orchestrator", "researcher"},
	TTL:       time.Minute,
}

func TestDelegationSignVerify(t *testing.T) {
	a, s, _ := delegationAuth(t, nil)
	tok, err := s.Sign(goodDelegation)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Authenticate(bearerReq(tok))
	if err != nil {
		t.Fatal(err)
	}
	if got.TokenID == "" {
		t.Error("no TokenID")
	}
	got.TokenID = ""
	want := Caller{ID: "user:alice", Groups: []string{"group:eng", "group:ops"}, Method: MethodDelegation, Subject: "user:alice",
		Agent: "researcher", Chain: []string{"orchestrator", "researcher"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if err := got.CheckAgent("researcher"); err != nil {
		t.Error(err)
	}

	// The header and claims are what the brief promises.
	parts := strings.Split(tok, ".")
	hdr, _ := b64(parts[0])
	var h map[string]any
	json.Unmarshal(hdr, &h)
	if h["alg"] != "EdDSA" || h["typ"] != DelegationType || h["kid"] != s.KeyID() {
		t.Errorf("header %s", hdr)
	}
	body, _ := b64(parts[1])
	var c map[string]any
	json.Unmarshal(body, &c)
	for _, k := range []string{"iss", "aud", "sub", "groups", "agent", "chain", "iat", "nbf", "exp", "jti"} {
		if _, ok := c[k]; !ok {
			t.Errorf("claim %s missing from %s", k, body)
		}
	}
	if c["iss"] != DelegationIssuer || c["aud"] != DefaultDelegationAudience || c["exp"].(float64)-c["iat"].(float64) != 60 {
		t.Errorf("claims %s", body)
	}
	// Two tokens never share an id.
	tok2, _ := s.Sign(goodDelegation)
	got2, _ := a.Authenticate(bearerReq(tok2))
	if got2.TokenID == "" || got2.TokenID == got.TokenID {
		t.Errorf("token ids %q and %q", got.TokenID, got2.TokenID)
	}
}

// TestDelegationHops: the hops a token carries reach the caller and count in its depth; a token
// without them has none.
func TestDelegationHops(t *testing.T) {
	a, s, _ := delegationAuth(t, nil)
	for _, hops := range []int{0, 3, 64} {
		d := goodDelegation
		d.Hops = hops
		tok, err := s.Sign(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Authenticate(bearerReq(tok))
		if err != nil {
			t.Fatal(err)
		}
		if got.Hops != hops || got.Depth(got.Chain) != 2+hops {
			t.Errorf("hops %d: caller hops %d, depth %d", hops, got.Hops, got.Depth(got.Chain))
		}
		body, _ := b64(strings.Split(tok, ".")[1])
		if strings.Contains(string(body), `"hops"`) != (hops > 0) {
			t.Errorf("hops %d: claims %s", hops, body)
		}
	}
}

func TestDelegationRejects(t *testing.T) {
	a, s, clk := delegationAuth(t, nil)
	good, err := s.Sign(goodDelegation)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(good, ".")

	// forged: another key, claiming the configured key's id.
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	forger := NewSigner(otherPriv, "")
	forger.now = clk.now
	forger.kid = s.KeyID()
	forged, _ := forger.Sign(goodDelegation)
	unknown := NewSigner(otherPriv, "")
	unknown.now = clk.now
	unknownTok, _ := unknown.Sign(goodDelegation)

	// tampered: the payload raised to another principal, the signature kept.
	var c map[string]any
	body, _ := b64(parts[1])
	json.Unmarshal(body, &c)
	c["sub"] = "user:root"
	tampered := parts[0] + "." + b64json(t, c) + "." + parts[2]
	c["sub"], c["groups"] = "user:alice", []string{"group:admins"}
	tamperedGroups := parts[0] + "." + b64json(t, c) + "." + parts[2]

	// hand-signed tokens with the real key, to get past Sign's own checks.
	raw := func(mod map[string]any) string {
		claims := map[string]any{"iss": DelegationIssuer, "aud": DefaultDelegationAudience, "sub": "user:alice", "groups": []string{},
			"agent": "researcher", "chain": []string{"researcher"}, "iat": t0.Unix(), "nbf": t0.Unix(), "exp": t0.Add(time.Minute).Unix(), "jti": "x"}
		for k, v := range mod {
			if v == nil {
				delete(claims, k)
			} else {
				claims[k] = v
			}
		}
		return mintHeaders(t, jwa.EdDSA(), s.key, map[string]any{"typ": DelegationType, "kid": s.KeyID()}, claims)
	}
	otherAud := NewSigner(s.key, "other-gateway")
	otherAud.now = clk.now
	wrongAud, _ := otherAud.Sign(goodDelegation)
	longTTL := goodDelegation
	longTTL.TTL = 6 * time.Minute
	long, err := s.Sign(longTTL)
	if err != nil {
		t.Fatal(err)
	}
	expiredSigner := NewSigner(s.key, "")
	expiredSigner.now = func() time.Time { return t0.Add(-10 * time.Minute) }
	expired, _ := expiredSigner.Sign(goodDelegation)

	tests := []struct {
		name, tok, code, want string
	}{
		{"forged", forged, CodeInvalidToken, "signature does not verify"},
		{"unknown key", unknownTok, CodeInvalidToken, "not in auth.delegation.public_keys"},
		{"tampered principal", tampered, CodeInvalidToken, "signature does not verify"},
		{"tampered groups", tamperedGroups, CodeInvalidToken, "signature does not verify"},
		{"expired", expired, CodeExpiredToken, "expired at 2026-03-01T11:51:00Z"},
		{"lives too long", long, CodeInvalidToken, "lives 6m0s, longer than auth.delegation.max_ttl (5m0s)"},
		{"wrong audience", wrongAud, CodeInvalidToken, `not for audience "lush-gateway"`},
		{"chain not ending in agent", raw(map[string]any{"chain": []string{"researcher", "writer"}}), CodeInvalidToken, `the chain ends with "writer", not with the agent "researcher"`},
		{"empty chain", raw(map[string]any{"chain": []string{}}), CodeInvalidToken, "the chain is empty"},
		{"no chain", raw(map[string]any{"chain": nil}), CodeInvalidToken, "the chain is empty"},
		{"bad agent in chain", raw(map[string]any{"chain": []string{"Bad_Agent", "researcher"}}), CodeInvalidToken, "chain element 0"},
		{"bad principal", raw(map[string]any{"sub": "root"}), CodeInvalidToken, "has no kind"},
		{"bad group", raw(map[string]any{"groups": []string{"user:x"}}), CodeInvalidToken, "is not a group"},
		{"wrong issuer", raw(map[string]any{"iss": "someone"}), CodeInvalidToken, "iss is not lush-agentd"},
		{"no iat", raw(map[string]any{"iat": nil}), CodeInvalidToken, "no iat"},
		{"no exp", raw(map[string]any{"exp": nil}), CodeInvalidToken, "no exp"},
		{"no jti", raw(map[string]any{"jti": nil}), CodeInvalidToken, "no valid jti"},
		{"not yet valid", raw(map[string]any{"nbf": t0.Add(time.Minute).Unix()}), CodeInvalidToken, "not valid before"},
		{"wrong alg", mintHeaders(t, jwa.HS256(), []byte(hmacSecret), map[string]any{"typ": DelegationType, "kid": s.KeyID()}, map[string]any{}), CodeInvalidToken, "signed with EdDSA"},
		{"no kid", mintHeaders(t, jwa.EdDSA(), s.key, map[string]any{"typ": DelegationType}, map[string]any{}), CodeInvalidToken, "no kid"},
		// Without its typ, a delegation token is an ordinary JWT from the reserved issuer.
		{"typ stripped", mintHeaders(t, jwa.EdDSA(), s.key, map[string]any{"kid": s.KeyID()}, map[string]any{"iss": DelegationIssuer}), CodeInvalidToken, "JWT bearer tokens are not accepted here"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.Authenticate(bearerReq(tt.tok))
			authErr(t, err, tt.code, tt.want)
		})
	}
	t.Run("expires", func(t *testing.T) {
		if _, err := a.Authenticate(bearerReq(good)); err != nil {
			t.Fatal(err)
		}
		clk.advance(91 * time.Second) // TTL 1m + 30s leeway
		_, err := a.Authenticate(bearerReq(good))
		authErr(t, err, CodeExpiredToken, "obtain a new token")
	})
	t.Run("not configured", func(t *testing.T) {
		b := newAuth(t, Config{APIKeys: apiKeys}, nil)
		_, err := b.Authenticate(bearerReq(good))
		authErr(t, err, CodeInvalidToken, "configure auth.delegation.public_keys")
	})
}

func TestSignRefuses(t *testing.T) {
	priv, _ := delegationKeys(t)
	s := NewSigner(priv, "")
	mod := func(f func(*Delegation)) Delegation {
		d := goodDelegation
		d.Chain = append([]string(nil), d.Chain...)
		f(&d)
		return d
	}
	tests := []struct {
		name string
		d    Delegation
		want string
	}{
		{"TTL too long", mod(func(d *Delegation) { d.TTL = 11 * time.Minute }), "TTL 11m0s is more than the maximum 10m0s"},
		{"TTL zero", mod(func(d *Delegation) { d.TTL = 0 }), "TTL 0s: must be at least 1s"},
		{"chain not ending in agent", mod(func(d *Delegation) { d.Chain = []string{"researcher", "writer"} }), "the chain ends with"},
		{"empty chain", mod(func(d *Delegation) { d.Chain = nil }), "the chain is empty"},
		{"bad agent", mod(func(d *Delegation) { d.Agent = "Researcher"; d.Chain = []string{"Researcher"} }), "not an agent name"},
		{"bad principal", mod(func(d *Delegation) { d.Principal = "alice" }), "principal"},
		{"group principal kind in groups", mod(func(d *Delegation) { d.Groups = []string{"user:bob"} }), "is not a group"},
		{"negative hops", mod(func(d *Delegation) { d.Hops = -1 }), "hops -1: must be 0 to 64"},
		{"too many hops", mod(func(d *Delegation) { d.Hops = 65 }), "hops 65: must be 0 to 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Sign(tt.d); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want containing %q", err, tt.want)
			}
		})
	}
	if _, err := s.Sign(mod(func(d *Delegation) { d.TTL = MaxDelegationTTL })); err != nil {
		t.Fatalf("TTL of exactly the maximum: %v", err)
	}
	if _, err := NewSigner(nil, "").Sign(goodDelegation); err == nil {
		t.Fatal("signer without a key signed")
	}
}

func TestGenerateAndLoadKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	privPath, pubPath, err := GenerateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	for path, perm := range map[string]os.FileMode{privPath: 0o600, pubPath: 0o644} {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm()&^0o022 != perm&^0o022 || info.Mode().Perm()&0o077 != 0 && path == privPath {
			t.Errorf("%s mode %v, want %v", path, info.Mode().Perm(), perm)
		}
	}
	if info, _ := os.Stat(dir); info.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v", info.Mode().Perm())
	}
	priv, err := LoadPrivateKey(privPath)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := loadPublicKey(pubPath)
	if err != nil || !pub.Equal(priv.Public()) {
		t.Fatalf("public key %v, %v", pub, err)
	}
	if _, _, err := GenerateKey(dir); err == nil || !strings.Contains(err.Error(), "never overwritten") {
		t.Fatalf("second GenerateKey: %v", err)
	}
	if err := os.Chmod(privPath, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrivateKey(privPath); err == nil || !strings.Contains(err.Error(), "mode 0640): run chmod 600") {
		t.Fatalf("group-readable key: %v", err)
	}
	os.Chmod(privPath, 0o600)

	// The key files are not interchangeable.
	if _, err := LoadPrivateKey(pubPath); err == nil {
		t.Fatal("loaded a public key as private")
	}
	_, err = New(context.Background(), Config{Delegation: &DelegationConfig{PublicKeys: []string{privPath}}})
	if err == nil || !strings.Contains(err.Error(), "auth.delegation.public_keys[0]") || !strings.Contains(err.Error(), "give the gateway the public key only") {
		t.Fatalf("private key as public: %v", err)
	}
	_, err = New(context.Background(), Config{Delegation: &DelegationConfig{PublicKeys: []string{pubPath, pubPath}}})
	if err == nil || !strings.Contains(err.Error(), "auth.delegation.public_keys[1]") {
		t.Fatalf("duplicate key: %v", err)
	}
	// The key id is the key's JWK thumbprint.
	kid, _ := KeyIDOf(pub)
	if NewSigner(priv, "").KeyID() != kid || len(kid) != 43 {
		t.Fatalf("kid %q", kid)
	}
}

func TestDelegationKeyRotation(t *testing.T) {
	oldPriv, oldPub := delegationKeys(t)
	newPriv, newPub := delegationKeys(t)
	clk := newClock()
	a := newAuth(t, Config{Delegation: &DelegationConfig{PublicKeys: []string{oldPub, newPub}, MaxTTL: 10 * time.Minute, Audience: "gw"}}, clk)
	for _, k := range []ed25519.PrivateKey{oldPriv, newPriv} {
		s := NewSigner(k, "gw")
		s.now = clk.now
		d := goodDelegation
		d.TTL = 10 * time.Minute
		tok, err := s.Sign(d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authenticate(bearerReq(tok)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDelegationSubjectTokens: a delegation signed for a caller with an OAuth token gives that
// token back to the delegated caller in the process that signed it, never in the delegation token
// itself, and not after the delegation expires or in a process without the store.
func TestDelegationSubjectTokens(t *testing.T) {
	const subject = "alice-oauth-access-token-0123456789"
	a, s, clk := delegationAuth(t, nil)
	st := NewSubjectTokens()
	st.now = clk.now
	s.KeepSubjectTokens(st)
	d := goodDelegation
	d.Subject = NewSubjectToken(subject)
	tok, err := s.Sign(d)
	if err != nil {
		t.Fatal(err)
	}
	if payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1]); strings.Contains(string(payload), subject) || strings.Contains(tok, subject) {
		t.Fatal("the delegation token holds the subject token")
	}
	tests := []struct {
		name  string
		keep  bool
		after time.Duration
		want  string
	}{
		{"no store", false, 0, ""},
		{"same process", true, 0, subject},
		{"after the delegation expired", true, 2 * time.Minute, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.keep {
				a.KeepSubjectTokens(st)
			}
			clk.advance(tt.after)
			got, err := a.Authenticate(bearerReq(tok))
			if tt.after > 0 {
				if err == nil && got.Token.Reveal() != "" {
					t.Error("an expired delegation still gives the subject token")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Token.Reveal() != tt.want {
				t.Errorf("token %q, want %q", got.Token.Reveal(), tt.want)
			}
		})
	}
}
