package vault_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/lush-agents/lush/vault"
)

const (
	secretToken = "tok-7f3a9c1e5b2d"
	secretKey   = "key-91be04c7aa31"
	secretPass  = "pw-c0ffee5eed42"
	secretEnv   = "env-d34db33fcafe"
)

func allCredentials() []vault.Credential {
	return []vault.Credential{
		{Type: vault.TypeBearer, Token: secretToken, Source: "test"},
		{Type: vault.TypeOAuth, Token: secretToken, Source: "test"},
		{Type: vault.TypeAPIKey, Key: secretKey, Header: "X-Notes-Key", Source: "test"},
		{Type: vault.TypeBasic, Username: "svc", Password: secretPass, Source: "test"},
		{Type: vault.TypeEnv, Env: map[string]string{"GITHUB_TOKEN": secretEnv}, Source: "test"},
	}
}

// TestCredentialNeverPrints covers every way a credential could be turned into text by accident:
// fmt verbs on values and pointers, inside structs and slices, errors wrapping it, slog, JSON,
// YAML.
func TestCredentialNeverPrints(t *testing.T) {
	for _, c := range allCredentials() {
		t.Run(c.Type, func(t *testing.T) {
			var out bytes.Buffer
			p := &c
			for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%T %v"} {
				fmt.Fprintf(&out, verb+"\n", c)
				fmt.Fprintf(&out, verb+"\n", p)
			}
			fmt.Fprintf(&out, "%+v\n", struct {
				C vault.Credential
				P *vault.Credential
				S []vault.Credential
				M map[string]vault.Credential
			}{c, p, []vault.Credential{c}, map[string]vault.Credential{"k": c}})
			fmt.Fprintln(&out, fmt.Errorf("wrapped: %v", c), errors.New(c.String()))
			logger := slog.New(slog.NewJSONHandler(&out, nil))
			logger.Info("cred", "value", c, "pointer", p)
			slog.New(slog.NewTextHandler(&out, nil)).Info("cred", "value", c, "pointer", p)
			j, _ := json.Marshal(map[string]any{"c": c, "p": p})
			out.Write(j)
			y, _ := yaml.Marshal(map[string]any{"c": c})
			out.Write(y)
			for _, s := range []string{secretToken, secretKey, secretPass, secretEnv} {
				if strings.Contains(out.String(), s) {
					t.Fatalf("secret %q printed:\n%s", s, out.String())
				}
			}
			if !strings.Contains(out.String(), c.Type+" credential from test") {
				t.Errorf("the type and source should show:\n%s", out.String())
			}
		})
	}
}

func TestCredentialPresentation(t *testing.T) {
	cs := allCredentials()
	tests := []struct {
		c       vault.Credential
		headers map[string]string
		env     []string
	}{
		{cs[0], map[string]string{"Authorization": "Bearer " + secretToken}, nil},
		{cs[1], map[string]string{"Authorization": "Bearer " + secretToken}, nil},
		{cs[2], map[string]string{"X-Notes-Key": secretKey}, nil},
		{vault.Credential{Type: vault.TypeAPIKey, Key: "k"}, map[string]string{"X-Api-Key": "k"}, nil},
		{cs[3], map[string]string{"Authorization": "Basic c3ZjOnB3LWMwZmZlZTVlZWQ0Mg=="}, nil},
		{cs[4], nil, []string{"GITHUB_TOKEN=" + secretEnv}},
	}
	for _, tt := range tests {
		if got := tt.c.Headers(); fmt.Sprint(got) != fmt.Sprint(tt.headers) {
			t.Errorf("%s headers: got %d headers, want %d", tt.c.Type, len(got), len(tt.headers))
		}
		if got := tt.c.Environ(); strings.Join(got, ",") != strings.Join(tt.env, ",") {
			t.Errorf("%s environ: got %d entries, want %d", tt.c.Type, len(got), len(tt.env))
		}
	}
}

func TestFingerprint(t *testing.T) {
	key := []byte("k1")
	a := vault.Credential{Type: vault.TypeBearer, Token: "one"}
	b := vault.Credential{Type: vault.TypeBearer, Token: "two"}
	if a.Fingerprint(key) == b.Fingerprint(key) {
		t.Error("different tokens share a fingerprint")
	}
	if again := (vault.Credential{Type: vault.TypeBearer, Token: "one"}); a.Fingerprint(key) != again.Fingerprint(key) {
		t.Error("fingerprint is not stable")
	}
	if a.Fingerprint(key) == a.Fingerprint([]byte("k2")) {
		t.Error("fingerprint does not depend on the key")
	}
	if strings.Contains(a.Fingerprint(key), "one") {
		t.Error("fingerprint holds the token")
	}
	// Field boundaries matter: user "a:b" + password "c" differs from user "a" + password "b:c".
	x := vault.Credential{Type: vault.TypeBasic, Username: "a:b", Password: "c"}
	y := vault.Credential{Type: vault.TypeBasic, Username: "a", Password: "b:c"}
	if x.Fingerprint(key) == y.Fingerprint(key) {
		t.Error("fingerprints ignore field boundaries")
	}
}

func TestScrub(t *testing.T) {
	c := vault.Credential{Type: vault.TypeBearer, Token: secretToken}
	got := c.Scrub("upstream said: bad token " + secretToken + "!")
	if strings.Contains(got, secretToken) || !strings.Contains(got, "[redacted]") {
		t.Errorf("Scrub = %q", got)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		c    vault.Credential
		want string
	}{
		{vault.Credential{Type: vault.TypeBearer, Token: "x"}, ""},
		{vault.Credential{Type: vault.TypeBearer}, "needs a token"},
		{vault.Credential{Type: vault.TypeAPIKey}, "needs a key"},
		{vault.Credential{Type: vault.TypeBasic, Password: "p"}, "needs a username"},
		{vault.Credential{Type: vault.TypeBasic, Username: "u"}, "needs a password"},
		{vault.Credential{Type: vault.TypeEnv}, "at least one variable"},
		{vault.Credential{Type: vault.TypeEnv, Env: map[string]string{"1BAD": "v"}}, "not an environment variable name"},
		{vault.Credential{Type: "cookie"}, "unknown type"},
	}
	for _, tt := range tests {
		err := tt.c.Check()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.c.Type, err, tt.want)
		}
	}
}
