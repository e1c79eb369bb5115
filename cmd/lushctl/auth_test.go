package main

import (
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/lush-agents/lush/vault"
)

const notesServer = "mcp://notes.example.com/mcp"

func TestAuthAddListRemove(t *testing.T) {
	dir := quickstartCopy(t)
	const token = "bob-secret-token-e41f0a"
	// The type comes from lush.yaml (group:engineering and the digest bot both declare bearer).
	r := lushctl(t, token+"\n", "auth", "add", notesServer, "--principal", "user:bob", "-C", dir)
	if r.code != exitOK || !strings.Contains(r.stdout, "added the bearer credential of user:bob") {
		t.Fatalf("add: %+v", r)
	}
	c, ok, err := vault.OpenFile(filepath.Join(dir, vault.LocalFile)).Lookup(notesServer, "user:bob")
	if err != nil || !ok || c.Token != token || c.Type != vault.TypeBearer {
		t.Fatalf("stored: ok=%v err=%v type=%s", ok, err, c.Type)
	}
	st, _ := os.Stat(filepath.Join(dir, vault.LocalFile))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	r = lushctl(t, "second-token\n", "auth", "add", notesServer, "--principal", "user:bob", "-C", dir, "-o", "json")
	var added map[string]any
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &added) != nil || added["replaced"] != true {
		t.Fatalf("replace: %+v", r)
	}

	r = lushctl(t, "", "auth", "list", "-C", dir)
	if r.code != exitOK || !strings.Contains(r.stdout, "user:bob") || !strings.Contains(r.stdout, "configured") ||
		!strings.Contains(r.stdout, "serviceaccount:digest-bot") || !strings.Contains(r.stdout, "per member") {
		t.Fatalf("list: %+v", r)
	}
	r = lushctl(t, "", "auth", "list", "-C", dir, "-o", "json")
	var rows []authRow
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &rows) != nil || len(rows) != 5 || rows[3].Status != "obtained by the gateway" || rows[4].Tool != "a2a://partner.example.com/agents/translator" {
		t.Fatalf("list json: %+v", r)
	}
	for _, out := range []string{r.stdout, lushctl(t, "", "auth", "list", "-C", dir).stdout} {
		if strings.Contains(out, token) || strings.Contains(out, "second-token") {
			t.Fatal("auth list shows a secret")
		}
	}

	if r = lushctl(t, "", "auth", "remove", notesServer, "--principal", "user:bob", "-C", dir); r.code != exitOK {
		t.Fatalf("remove: %+v", r)
	}
	if r = lushctl(t, "", "auth", "remove", notesServer, "--principal", "user:bob", "-C", dir); r.code != exitFailed {
		t.Fatalf("second remove should exit 1: %+v", r)
	}
}

func TestAuthAddTypes(t *testing.T) {
	dir := quickstartCopy(t)
	file := vault.OpenFile(filepath.Join(dir, vault.LocalFile))
	tests := []struct {
		name  string
		stdin string
		args  []string
		check func(vault.Credential) bool
	}{
		{"api key with header", "k-123\n", []string{"mcp://keys.example.com/mcp", "--type", "api_key", "--header", "X-Key"},
			func(c vault.Credential) bool { return c.Key == "k-123" && c.Header == "X-Key" }},
		{"basic", "pw-123\n", []string{"mcp://basic.example.com/mcp", "--type", "basic", "--username", "svc"},
			func(c vault.Credential) bool { return c.Username == "svc" && c.Password == "pw-123" }},
		{"one variable, bare value", "gh-123\n", []string{"mcp://uvx/mcp-server-github", "--type", "env", "--env", "GITHUB_TOKEN"},
			func(c vault.Credential) bool { return c.Env["GITHUB_TOKEN"] == "gh-123" }},
		{"A2A agent, bearer", "a2a-123\n", []string{"a2a://agents.example.com/travel", "--type", "bearer"},
			func(c vault.Credential) bool { return c.Token == "a2a-123" }},
		{"several variables", "A_KEY=a=1\nB_KEY=b\n", []string{"mcp://npx/@acme/server", "--type", "env", "--env", "A_KEY", "--env", "B_KEY"},
			func(c vault.Credential) bool { return c.Env["A_KEY"] == "a=1" && c.Env["B_KEY"] == "b" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lushctl(t, tt.stdin, append([]string{"auth", "add", "-C", dir, "--principal", "user:kim"}, tt.args...)...)
			if r.code != exitOK {
				t.Fatalf("%+v", r)
			}
			c, ok, err := file.Lookup(tt.args[0], "user:kim")
			if err != nil || !ok || !tt.check(c) {
				t.Fatalf("stored %v (ok=%v, %v)", c, ok, err)
			}
		})
	}
}

func TestAuthAddErrors(t *testing.T) {
	dir := quickstartCopy(t)
	tests := []struct {
		name, stdin string
		args        []string
		code        int
		want        string
	}{
		{"no secret on stdin", "", []string{notesServer}, exitUsage, "no token on standard input"},
		{"not an MCP server", "x", []string{"tools/clock", "--type", "bearer"}, exitUsage, "not an MCP server"},
		{"unknown type", "x", []string{notesServer, "--type", "cookie"}, exitUsage, `--type "cookie" is not one of`},
		{"undeclared, no type", "x", []string{"mcp://other.example.com/mcp"}, exitUsage, "--type is required"},
		{"stdio needs env", "x", []string{"mcp://npx/@acme/server", "--type", "bearer"}, exitUsage, "stdio server"},
		{"remote cannot take env", "x", []string{"mcp://other.example.com/mcp", "--type", "env", "--env", "X"}, exitUsage, "remote server"},
		{"A2A agent cannot take env", "x", []string{"a2a://agents.example.com/travel", "--type", "env", "--env", "X"}, exitUsage, "remote server"},
		{"basic without user", "x", []string{"mcp://other.example.com/mcp", "--type", "basic"}, exitUsage, "needs --username"},
		{"bad principal", "x", []string{notesServer, "--principal", "bob"}, exitUsage, "--principal"},
		{"env line for another variable", "OTHER=1\n", []string{"mcp://npx/@acme/server", "--type", "env", "--env", "A", "--env", "B"}, exitUsage, "expected NAME=value"},
		{"a secret flag does not exist", "", []string{notesServer, "--token", "t"}, exitUsage, "unknown flag: --token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lushctl(t, tt.stdin, append([]string{"auth", "add", "-C", dir}, tt.args...)...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("code %d, stderr %q; want %d and %q", r.code, r.stderr, tt.code, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, vault.LocalFile)); err == nil {
		t.Error("a failed add wrote the file")
	}
}

// TestAuthActorKey: auth actor-key creates the actor key (0600) once, and prints the JWK set of
// its public half, with kid its thumbprint, on every run; a key others can read is refused.
func TestAuthActorKey(t *testing.T) {
	dir := t.TempDir()
	r := lushctl(t, "", "auth", "actor-key", "--dir", dir)
	if r.code != exitOK || !strings.Contains(r.stderr, "a new actor key") {
		t.Fatalf("actor-key: %+v", r)
	}
	set, err := jwk.Parse([]byte(r.stdout))
	if err != nil || set.Len() != 1 {
		t.Fatalf("stdout is not a JWK set of one key (%v): %s", err, r.stdout)
	}
	pub, _ := set.Key(0)
	kid, _ := pub.KeyID()
	tp, err := pub.Thumbprint(crypto.SHA256)
	if err != nil || kid != base64.RawURLEncoding.EncodeToString(tp) {
		t.Errorf("kid %q is not the key's RFC 7638 thumbprint (%v)", kid, err)
	}
	keyFile := filepath.Join(dir, "actor.key")
	st, err := os.Stat(keyFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("actor.key: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	data, _ := os.ReadFile(keyFile)
	block, _ := pem.Decode(data)
	priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	var raw ed25519.PublicKey
	if err := jwk.Export(pub, &raw); err != nil || !raw.Equal(priv.(ed25519.PrivateKey).Public()) {
		t.Errorf("the printed key is not actor.key's public half (%v)", err)
	}

	r = lushctl(t, "", "auth", "actor-key", "--dir", dir, "-o", "json")
	var again struct {
		Created bool   `json:"created"`
		KID     string `json:"kid"`
	}
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &again) != nil || again.Created || again.KID != kid {
		t.Errorf("second run: %+v; want the same key (kid %s), not a new one", r, kid)
	}

	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if r = lushctl(t, "", "auth", "actor-key", "--dir", dir); r.code == exitOK || !strings.Contains(r.stderr, "chmod 600") {
		t.Errorf("a key others can read: %+v; want a refusal naming chmod 600", r)
	}
}

// TestAuthLoginRefusesA2A: auth login signs in to MCP servers; an A2A agent's credential is
// stored with auth add.
func TestAuthLoginRefusesA2A(t *testing.T) {
	dir := quickstartCopy(t)
	r := lushctl(t, "", "auth", "login", "-C", dir, "--principal", "user:kim", "a2a://agents.example.com/travel")
	if r.code != exitUsage || !strings.Contains(r.stderr, "is an A2A agent: auth login signs in to MCP servers only") {
		t.Fatalf("code %d, stderr %q", r.code, r.stderr)
	}
}
