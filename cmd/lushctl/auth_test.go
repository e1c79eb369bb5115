package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &rows) != nil || len(rows) != 3 {
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
