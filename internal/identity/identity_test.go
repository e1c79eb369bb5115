package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"gopkg.in/yaml.v3"
)

const (
	ciKey  = "lush_ci_3f9a1c7e5b2d4a6f8e0c1b3d5f7a9c2e"
	opsKey = "lush_ops_a1b2c3d4e5f60718293a4b5c6d7e8f90"
)

func sha(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

var apiKeys = []APIKeyConfig{
	{Name: "ci", SHA256: sha(ciKey), Principal: "serviceaccount:ci", Groups: []string{"group:deploy", "group:build", "group:deploy"}},
	{Name: "ops", SHA256: strings.ToUpper(sha(opsKey)), Principal: "user:ops"},
}

func TestAPIKeys(t *testing.T) {
	a := newAuth(t, Config{APIKeys: apiKeys}, nil)
	ci := Caller{ID: "serviceaccount:ci", Groups: []string{"group:build", "group:deploy"}, Method: MethodAPIKey, Subject: "ci"}
	ops := Caller{ID: "user:ops", Groups: []string{}, Method: MethodAPIKey, Subject: "ops"}
	tests := []struct {
		name string
		kv   []string
		want Caller
		code string
	}{
		{"X-API-Key", []string{"X-API-Key", ciKey}, ci, ""},
		{"x-api-key lower case", []string{"x-api-key", ciKey}, ci, ""},
		{"bearer", []string{"Authorization", "Bearer " + ciKey}, ci, ""},
		{"bearer lower case scheme", []string{"Authorization", "bearer " + opsKey}, ops, ""},
		{"upper-case digest in config", []string{"X-API-Key", opsKey}, ops, ""},
		{"miss", []string{"X-API-Key", ciKey + "x"}, Caller{}, CodeUnknownAPIKey},
		{"miss as bearer", []string{"Authorization", "Bearer nope"}, Caller{}, CodeUnknownAPIKey},
		{"empty", []string{"X-API-Key", " "}, Caller{}, CodeInvalidRequest},
		{"two keys", []string{"X-API-Key", ciKey, "X-API-Key", opsKey}, Caller{}, CodeInvalidRequest},
		{"key and bearer", []string{"X-API-Key", ciKey, "Authorization", "Bearer " + opsKey}, Caller{}, CodeInvalidRequest},
		{"basic auth", []string{"Authorization", "Basic " + ciKey}, Caller{}, CodeInvalidRequest},
		{"no scheme", []string{"Authorization", ciKey}, Caller{}, CodeInvalidRequest},
		{"nothing", nil, Caller{}, CodeMissingCredentials},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := a.Authenticate(request("192.0.2.1:1", tt.kv...))
			if tt.code != "" {
				authErr(t, err, tt.code, "")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	// Callers do not share slices with the authenticator.
	c, _ := a.Authenticate(request("192.0.2.1:1", "X-API-Key", ciKey))
	c.Groups[0] = "group:admin"
	if c2, _ := a.Authenticate(request("192.0.2.1:1", "X-API-Key", ciKey)); c2.Groups[0] != "group:build" {
		t.Fatal("a Caller's groups alias the config")
	}
}

func TestTrustedProxy(t *testing.T) {
	cfg := Config{Proxy: &ProxyConfig{Trusted: []string{"10.0.0.0/8", "fd00::/8", "192.0.2.10"}}, APIKeys: apiKeys}
	a := newAuth(t, cfg, nil)
	tests := []struct {
		name, remote string
		kv           []string
		want         Caller
		code, msg    string
	}{
		{"IPv4 CIDR", "10.1.2.3:5555", []string{"X-Lush-Principal", "user:alice", "X-Lush-Groups", "eng, group:ops,,eng"},
			Caller{ID: "user:alice", Groups: []string{"group:eng", "group:ops"}, Method: MethodProxy, Subject: "user:alice"}, "", ""},
		{"single IPv4", "192.0.2.10:1", []string{"X-Lush-Principal", "serviceaccount:bot"},
			Caller{ID: "serviceaccount:bot", Groups: []string{}, Method: MethodProxy, Subject: "serviceaccount:bot"}, "", ""},
		{"IPv6", "[fd00::1]:443", []string{"x-lush-principal", "user:bob"},
			Caller{ID: "user:bob", Groups: []string{}, Method: MethodProxy, Subject: "user:bob"}, "", ""},
		{"IPv4-mapped IPv6", "[::ffff:10.9.9.9]:443", []string{"X-Lush-Principal", "user:bob"},
			Caller{ID: "user:bob", Groups: []string{}, Method: MethodProxy, Subject: "user:bob"}, "", ""},
		{"bearer wins from a trusted proxy", "10.1.2.3:5555", []string{"X-Lush-Principal", "user:alice", "Authorization", "Bearer " + ciKey},
			Caller{ID: "serviceaccount:ci", Groups: []string{"group:build", "group:deploy"}, Method: MethodAPIKey, Subject: "ci"}, "", ""},
		{"untrusted IPv4", "203.0.113.5:1", []string{"X-Lush-Principal", "user:alice"}, Caller{}, CodeUntrustedProxy, "this request comes from 203.0.113.5"},
		{"untrusted neighbour of single IP", "192.0.2.11:1", []string{"X-Lush-Principal", "user:alice"}, Caller{}, CodeUntrustedProxy, ""},
		{"untrusted IPv6", "[2001:db8::1]:1", []string{"X-Lush-Principal", "user:alice"}, Caller{}, CodeUntrustedProxy, "2001:db8::1"},
		{"untrusted, groups header only", "203.0.113.5:1", []string{"X-Lush-Groups", "admins"}, Caller{}, CodeUntrustedProxy, ""},
		{"untrusted, even with a valid API key", "203.0.113.5:1", []string{"X-Lush-Principal", "user:alice", "X-API-Key", ciKey}, Caller{}, CodeUntrustedProxy, ""},
		{"unparsable remote", "@", []string{"X-Lush-Principal", "user:alice"}, Caller{}, CodeUntrustedProxy, "an unknown address"},
		{"not a principal", "10.1.2.3:1", []string{"X-Lush-Principal", "alice"}, Caller{}, CodeInvalidRequest, "not a principal"},
		{"not a group", "10.1.2.3:1", []string{"X-Lush-Principal", "user:alice", "X-Lush-Groups", "user:bob"}, Caller{}, CodeInvalidRequest, "not a group"},
		{"groups without principal", "10.1.2.3:1", []string{"X-Lush-Groups", "eng"}, Caller{}, CodeInvalidRequest, "without X-Lush-Principal"},
		{"two principals", "10.1.2.3:1", []string{"X-Lush-Principal", "user:a", "X-Lush-Principal", "user:b"}, Caller{}, CodeInvalidRequest, "exactly one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := a.Authenticate(request(tt.remote, tt.kv...))
			if tt.code != "" {
				authErr(t, err, tt.code, tt.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}

	t.Run("custom headers", func(t *testing.T) {
		a := newAuth(t, Config{Proxy: &ProxyConfig{Trusted: []string{"127.0.0.1"}, Header: "x-forwarded-user", GroupsHeader: "X-Forwarded-Groups"}}, nil)
		got, err := a.Authenticate(request("127.0.0.1:80", "X-Forwarded-User", "user:carol", "X-Forwarded-Groups", "a"))
		if err != nil || got.ID != "user:carol" || !reflect.DeepEqual(got.Groups, []string{"group:a"}) {
			t.Fatalf("got %+v, %v", got, err)
		}
		// The default header is not special any more.
		if _, err := a.Authenticate(request("127.0.0.1:80", "X-Lush-Principal", "user:carol")); err == nil {
			t.Fatal("X-Lush-Principal authenticated with a custom header configured")
		}
	})
	t.Run("no proxy configured", func(t *testing.T) {
		a := newAuth(t, Config{APIKeys: apiKeys}, nil)
		_, err := a.Authenticate(request("10.1.2.3:1", "X-Lush-Principal", "user:alice", "X-API-Key", ciKey))
		authErr(t, err, CodeUntrustedProxy, "auth.trusted_proxy is not configured")
	})
}

func TestDevMode(t *testing.T) {
	a := newAuth(t, Config{Dev: &DevConfig{Principal: "user:dev", Groups: []string{"group:eng"}}, APIKeys: apiKeys}, nil)
	got, err := a.Authenticate(request("203.0.113.9:1"))
	want := Caller{ID: "user:dev", Groups: []string{"group:eng"}, Method: MethodDev, Subject: "dev"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("no credentials: %+v, %v", got, err)
	}
	// Presented credentials never fall back to dev, valid or not.
	if got, err := a.Authenticate(request("203.0.113.9:1", "X-API-Key", ciKey)); err != nil || got.Method != MethodAPIKey {
		t.Fatalf("valid key: %+v, %v", got, err)
	}
	for name, kv := range map[string][]string{
		"bad API key":      {"X-API-Key", "wrong"},
		"bad bearer":       {"Authorization", "Bearer wrong"},
		"bad JWT":          {"Authorization", "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln"},
		"basic":            {"Authorization", "Basic dXNlcjpwYXNz"},
		"empty key":        {"X-API-Key", ""},
		"proxy header":     {"X-Lush-Principal", "user:root"},
		"delegation token": {"Authorization", "Bearer " + b64enc(`{"alg":"EdDSA","typ":"lush-delegation+jwt"}`) + ".e30.c2ln"},
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := a.Authenticate(request("203.0.113.9:1", kv...)); err == nil {
				t.Fatalf("fell back to %+v", got)
			}
		})
	}
}

func TestMissingCredentials(t *testing.T) {
	a := newAuth(t, Config{APIKeys: apiKeys}, nil)
	_, err := a.Authenticate(request("192.0.2.1:1"))
	authErr(t, err, CodeMissingCredentials, `send "X-API-Key: <key>"`)
}

// TestSecretsNeverLeak runs every kind of failure and success and checks that no error text
// and no Caller field holds a token, an API key or the HMAC secret.
func TestSecretsNeverLeak(t *testing.T) {
	keys(t)
	dir := t.TempDir()
	secretFile := writeFile(t, dir, "hs.secret", []byte(hmacSecret))
	priv, pub := delegationKeys(t)
	cfg := Config{
		JWT:        []JWTConfig{{Issuer: testIssuer, Audiences: []string{testAud}, KeyFile: secretFile, Algorithms: []string{"HS256"}}},
		APIKeys:    apiKeys,
		Proxy:      &ProxyConfig{Trusted: []string{"10.0.0.0/8"}},
		Delegation: &DelegationConfig{PublicKeys: []string{pub}},
	}
	a := newAuth(t, cfg, newClock())
	signer := NewSigner(priv, "")
	signer.now = func() time.Time { return t0 }
	hs := func(c map[string]any) string { return mint(t, jwa.HS256(), []byte(hmacSecret), "", c) }
	deleg, err := signer.Sign(Delegation{Principal: "user:alice", Agent: "researcher", Chain: []string{"researcher"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	otherSecret := []byte(strings.Repeat("k", 40))
	tokens := []string{
		hs(baseClaims()),
		hs(with(baseClaims(), "exp", t0.Add(-time.Hour).Unix())),
		hs(with(baseClaims(), "aud", "x")),
		hs(with(baseClaims(), "sub", "bad sub")),
		hs(with(baseClaims(), "iss", "https://other")),
		mint(t, jwa.HS256(), otherSecret, "", baseClaims()),
		mint(t, jwa.HS384(), []byte(hmacSecret), "", baseClaims()),
		deleg,
		deleg[:len(deleg)-4] + "AAAA",
	}
	var texts []string
	check := func(c Caller, err error) {
		texts = append(texts, fmt.Sprintf("%+v %#v", c, c))
		if err != nil {
			texts = append(texts, err.Error(), fmt.Sprintf("%+v %#v", err, err))
		}
	}
	var secrets []string
	for _, tok := range tokens {
		secrets = append(secrets, tok)
		for _, part := range strings.Split(tok, ".")[1:] {
			if len(part) > 16 {
				secrets = append(secrets, part)
			}
		}
		for _, kv := range [][]string{
			{"Authorization", "Bearer " + tok},
			{"Authorization", tok},
			{"Authorization", "Basic " + tok},
			{"Authorization", "Bearer " + tok + " extra"},
			{"X-API-Key", tok},
			{"Authorization", "Bearer " + tok, "X-API-Key", ciKey},
		} {
			check(a.Authenticate(request("192.0.2.1:1", kv...)))
		}
	}
	for _, k := range []string{ciKey, opsKey, ciKey[:len(ciKey)-1] + "0"} {
		secrets = append(secrets, k)
		for _, kv := range [][]string{
			{"X-API-Key", k}, {"Authorization", "Bearer " + k}, {"Authorization", k}, {"Authorization", "Token " + k},
			{"X-API-Key", k, "X-API-Key", k}, {"X-Lush-Principal", k, "X-API-Key", k},
		} {
			check(a.Authenticate(request("192.0.2.1:1", kv...)))
			check(a.Authenticate(request("10.0.0.1:1", kv...)))
		}
	}
	secrets = append(secrets, hmacSecret, string(otherSecret))
	for _, text := range texts {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%q\ncontains a secret %q", text, s)
			}
		}
	}
	if len(texts) < 100 {
		t.Fatalf("only %d texts checked", len(texts))
	}
}

func TestCheckAgent(t *testing.T) {
	d := Caller{ID: "user:a", Method: MethodDelegation, Agent: "researcher", Chain: []string{"orchestrator", "researcher"}}
	if err := d.CheckAgent("researcher"); err != nil {
		t.Fatal(err)
	}
	authErr(t, d.CheckAgent("writer"), CodeForbiddenAgent, `lets agent "researcher" act, not "writer"`)
	if err := (Caller{ID: "user:a", Method: MethodJWT}).CheckAgent("writer"); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	good := sha(ciKey)
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"empty", Config{}, []string{"auth: no authentication method configured"}},
		{"jwt fields", Config{JWT: []JWTConfig{{}}}, []string{
			"auth.jwt[0].issuer: required", "auth.jwt[0].audiences: required", "auth.jwt[0]: set one of jwks_url or key_file"}},
		{"jwt both sources", Config{JWT: []JWTConfig{{Issuer: "i", Audiences: []string{"a"}, JWKSURL: "https://x/jwks", KeyFile: "k"}}}, []string{"auth.jwt[0]: set only one of"}},
		{"jwt duplicate issuer", Config{JWT: []JWTConfig{{Issuer: "i", Audiences: []string{"a"}, KeyFile: "k"}, {Issuer: "i", Audiences: []string{"b"}, KeyFile: "k"}}},
			[]string{`auth.jwt[1].issuer: "i" is already configured at auth.jwt[0]`}},
		{"jwt reserved issuer", Config{JWT: []JWTConfig{{Issuer: "lush-agentd", Audiences: []string{"a"}, KeyFile: "k"}}}, []string{"auth.jwt[0].issuer: \"lush-agentd\" is reserved"}},
		{"jwt plain http", Config{JWT: []JWTConfig{{Issuer: "i", Audiences: []string{"a"}, JWKSURL: "http://idp.example.com/jwks"}}}, []string{"auth.jwt[0].jwks_url:", "use https"}},
		{"jwt not a URL", Config{JWT: []JWTConfig{{Issuer: "i", Audiences: []string{"a"}, JWKSURL: "idp/jwks"}}}, []string{"auth.jwt[0].jwks_url:", "not an absolute URL"}},
		{"jwt algorithms", Config{JWT: []JWTConfig{{Issuer: "i", Audiences: []string{"a", ""}, KeyFile: "k", Algorithms: []string{"none", "XY256"}}}},
			[]string{"auth.jwt[0].algorithms[0]: unsigned tokens (none)", `auth.jwt[0].algorithms[1]: unknown algorithm "XY256"`, "auth.jwt[0].audiences[1]: empty"}},
		{"jwt HS with JWKS", Config{JWT: []JWTConfig{{Issuer: "i", Audiences: []string{"a"}, JWKSURL: "https://x", Algorithms: []string{"HS256"}}}}, []string{"auth.jwt[0].algorithms: HS* needs key_file"}},
		{"jwt kind, leeway, refresh", Config{JWT: []JWTConfig{{Issuer: "i", Audiences: []string{"a"}, KeyFile: "k", PrincipalKind: "group", Leeway: time.Hour, JWKSRefresh: time.Minute}}},
			[]string{"auth.jwt[0].principal_kind", "auth.jwt[0].leeway: 1h0m0s is more than the maximum 5m0s", "auth.jwt[0].jwks_refresh: applies only with jwks_url"}},
		{"jwt short refresh", Config{JWT: []JWTConfig{{Issuer: "i", Audiences: []string{"a"}, JWKSURL: "https://x", JWKSRefresh: time.Second, Leeway: -1}}},
			[]string{"auth.jwt[0].jwks_refresh: 1s is less than the minimum 1m0s", "auth.jwt[0].leeway: must not be negative"}},
		{"api keys", Config{APIKeys: []APIKeyConfig{{}, {Name: "a", SHA256: ciKey, Principal: "alice", Groups: []string{"user:x"}}, {Name: "a", SHA256: good, Principal: "user:a"}, {Name: "b", SHA256: good, Principal: "user:b"}}},
			[]string{"auth.api_keys[0].name: required", "auth.api_keys[0].sha256: required", "auth.api_keys[0].principal: required",
				"auth.api_keys[1].sha256: must be 64 hex digits", "auth.api_keys[1].principal: principal \"alice\" has no kind", "auth.api_keys[1].groups[0]: \"user:x\" is not a group",
				`auth.api_keys[2].name: "a" is already used by auth.api_keys[1]`, "auth.api_keys[3].sha256: the same key is already configured at auth.api_keys[2]"}},
		{"proxy", Config{Proxy: &ProxyConfig{Trusted: []string{"10.0.0.0/33", "bogus", "0.0.0.0/0"}, Header: "Authorization", GroupsHeader: "bad header"}},
			[]string{"auth.trusted_proxy.trusted[0]: \"10.0.0.0/33\" is not a CIDR", "auth.trusted_proxy.trusted[1]: \"bogus\" is not an IP", "auth.trusted_proxy.trusted[2]: 0.0.0.0/0 trusts every address",
				"auth.trusted_proxy.header: Authorization is reserved", "auth.trusted_proxy.groups_header: \"bad header\" is not a valid HTTP header name"}},
		{"proxy no trusted, same headers", Config{Proxy: &ProxyConfig{Header: "X-A", GroupsHeader: "x-a"}}, []string{"auth.trusted_proxy.trusted: required", "auth.trusted_proxy.groups_header: must differ"}},
		{"dev", Config{Dev: &DevConfig{Groups: []string{"eng"}}}, []string{"auth.dev.principal: required", "auth.dev.groups[0]"}},
		{"delegation", Config{Delegation: &DelegationConfig{MaxTTL: time.Hour, PublicKeys: []string{""}}}, []string{"auth.delegation.max_ttl: 1h0m0s is more than the maximum 10m0s", "auth.delegation.public_keys[0]: empty"}},
		{"delegation no keys", Config{Delegation: &DelegationConfig{}}, []string{"auth.delegation.public_keys: required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain %q", err, w)
				}
			}
			if _, nerr := New(context.Background(), tt.cfg); nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New error = %v, want the Validate error", nerr)
			}
		})
	}
	ok := Config{
		JWT:     []JWTConfig{{Issuer: "i", Audiences: []string{"a"}, JWKSURL: "http://127.0.0.1:9/jwks", JWKSRefresh: time.Hour}},
		APIKeys: []APIKeyConfig{{Name: "a", SHA256: good, Principal: "user:a", Groups: []string{"group:g"}}},
		Proxy:   &ProxyConfig{Trusted: []string{"10.0.0.0/8", "::1"}},
		Dev:     &DevConfig{Principal: "user:dev"},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}

func TestConfigYAML(t *testing.T) {
	src := `
jwt:
  - issuer: https://idp.example.com
    audiences: [lush]
    jwks_url: https://idp.example.com/jwks
    algorithms: [RS256]
    subject_claim: email
    principal_kind: serviceaccount
    groups_claim: roles
    leeway: 1m
    jwks_refresh: 30m
api_keys:
  - name: ci
    sha256: ` + sha(ciKey) + `
    principal: serviceaccount:ci
    groups: [group:deploy]
trusted_proxy:
  trusted: [10.0.0.0/8]
  header: X-Forwarded-User
  groups_header: X-Forwarded-Groups
dev:
  principal: user:dev
delegation:
  public_keys: [/etc/lush/delegation.pub]
  max_ttl: 2m
  audience: gw
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
	j := c.JWT[0]
	if j.Leeway != time.Minute || j.JWKSRefresh != 30*time.Minute || j.PrincipalKind != "serviceaccount" || j.GroupsClaim != "roles" ||
		c.APIKeys[0].Principal != "serviceaccount:ci" || c.Proxy.GroupsHeader != "X-Forwarded-Groups" || c.Dev.Principal != "user:dev" ||
		c.Delegation.MaxTTL != 2*time.Minute || c.Delegation.Audience != "gw" {
		t.Fatalf("decoded %+v", c)
	}
}

func TestErrorIs(t *testing.T) {
	a := newAuth(t, Config{APIKeys: apiKeys}, nil)
	_, err := a.Authenticate(request("192.0.2.1:1"))
	var e *Error
	if !errors.As(err, &e) || e.Error() != e.Code+": "+e.Message {
		t.Fatalf("err = %#v", err)
	}
}
