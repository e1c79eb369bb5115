package vault_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/vault"
)

func TestRender(t *testing.T) {
	tests := []struct {
		tmpl, tool, principal, want, err string
	}{
		{vault.DefaultPath, notes, "serviceaccount:digest-bot", "secret/data/lush/quickstart/notes.example.com/mcp/serviceaccount/digest-bot", ""},
		{"kv/data/{principal_kind}/{principal_name}/{type}", notes, "user:alice@example.com", "kv/data/user/alice@example.com/bearer", ""},
		{"secret/data/{server}", "mcp://npx/@acme/server-x#work", "user:a", "secret/data/npx/@acme/server-x_work", ""},
		{"secret/data/{server}/x", "mcp://h:8080/p q", "user:a", "secret/data/h_8080/p_q/x", ""},
		{vault.DefaultPath, "model://openai", "serviceaccount:agentd", "secret/data/lush/quickstart/model/openai/serviceaccount/agentd", ""},
		{"database/creds/{principal_name}", notes, "user:..", "", "empty or relative segment"},
		{"secret/{nope}", notes, "user:a", "", "unknown variable {nope}"},
		{"secret/{principal", notes, "user:a", "", "unbalanced brace"},
		{"/secret/x", notes, "user:a", "", "must not start with /"},
	}
	for _, tt := range tests {
		got, err := vault.Render(tt.tmpl, vault.Target{Project: "quickstart", Tool: tt.tool, Principal: tt.principal, Type: "bearer"})
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Render(%q) err = %v, want %q", tt.tmpl, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Render(%q, %s) = %q, %v; want %q", tt.tmpl, tt.principal, got, err, tt.want)
		}
	}
}

// TestLookupFromFile covers the lookup order without Vault: declarations by principal and group,
// undeclared tools, type and variable checks, and the messages that say how to fix a gap.
func TestLookupFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "credentials.local")
	f := vault.OpenFile(path)
	add := func(tool, p string, c vault.Credential) {
		t.Helper()
		if _, err := f.Add(vault.FileEntry{Tool: tool, Principal: p, Credential: c}); err != nil {
			t.Fatal(err)
		}
	}
	const fs = "mcp://npx/@acme/server-fs"
	const open = "mcp://open.example.com/mcp"
	add(notes, "user:bob", vault.Credential{Type: vault.TypeBearer, Token: "bob-token"})
	add(notes, "user:eve", vault.Credential{Type: vault.TypeBearer, Token: "eve-token"})
	add(notes, "user:kim", vault.Credential{Type: vault.TypeAPIKey, Key: "kim-key"})
	add(notes, "serviceaccount:bot", vault.Credential{Type: vault.TypeOAuth, Token: "bot-token"})
	add(fs, "user:bob", vault.Credential{Type: vault.TypeEnv, Env: map[string]string{"FS_TOKEN": "fs-bob", "OTHER": "x"}})
	add(fs, "user:eve", vault.Credential{Type: vault.TypeEnv, Env: map[string]string{"OTHER": "x"}})
	add(open, "user:bob", vault.Credential{Type: vault.TypeAPIKey, Key: "open-key", Header: "X-Open"})
	declared := []manifest.Credential{
		{Tool: notes, Principal: "group:eng", Type: "bearer"},
		{Tool: notes, Principal: "user:kim", Type: "bearer"},
		{Tool: notes, Principal: "serviceaccount:bot", Type: "bearer"},
		{Tool: fs, Principal: "group:eng", Type: "env", Env: []string{"FS_TOKEN"}},
	}
	b, err := vault.New(vault.Config{File: path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tests := []struct {
		name      string
		tool, who string
		groups    []string
		check     func(*vault.Credential) bool
		err       string
	}{
		{"group declaration, own secret", notes, "user:bob", []string{"group:eng"}, func(c *vault.Credential) bool { return c.Token == "bob-token" }, ""},
		{"another member, another secret", notes, "user:eve", []string{"group:eng"}, func(c *vault.Credential) bool { return c.Token == "eve-token" }, ""},
		{"declared, nothing stored", notes, "user:ann", []string{"group:eng"}, nil, "mcp://notes.example.com/mcp needs a bearer credential for user:ann, and none is configured. Configure it with: lushctl auth add mcp://notes.example.com/mcp --principal user:ann --type bearer"},
		{"not declared for the caller, stored", notes, "user:eve", nil, func(c *vault.Credential) bool { return c.Token == "eve-token" }, ""},
		{"not declared for the caller, nothing stored", notes, "user:zed", nil, nil, "declares credentials for mcp://notes.example.com/mcp only (group:eng, user:kim, serviceaccount:bot)"},
		{"stored type differs from declared", notes, "user:kim", nil, nil, "holds an api_key credential, and lush.yaml declares bearer"},
		{"oauth serves a bearer declaration; service account from the file without Vault", notes, "serviceaccount:bot", nil, func(c *vault.Credential) bool { return c.Token == "bot-token" }, ""},
		{"env: only declared variables", fs, "user:bob", []string{"group:eng"}, func(c *vault.Credential) bool {
			return len(c.Env) == 1 && c.Env["FS_TOKEN"] == "fs-bob"
		}, ""},
		{"env: declared variable missing", fs, "user:eve", []string{"group:eng"}, nil, "has no value for FS_TOKEN"},
		{"undeclared tool, stored", open, "user:bob", nil, func(c *vault.Credential) bool { return c.Headers()["X-Open"] == "open-key" }, ""},
		{"undeclared tool, nothing stored: none needed", open, "user:eve", nil, func(c *vault.Credential) bool { return c == nil }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := b.Lookup(context.Background(), vault.Request{Project: "p", Tool: tt.tool, Principal: tt.who, Groups: tt.groups, Declared: declared})
			if tt.err != "" {
				var m *vault.MissingError
				if !errors.As(err, &m) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want a MissingError with %q", err, tt.err)
				}
				if m.Rule() != vault.RuleMissing {
					t.Errorf("rule %s", m.Rule())
				}
				return
			}
			if err != nil || !tt.check(c) {
				t.Fatalf("got %v, %v", c, err)
			}
		})
	}
}

func TestLookupWithoutSources(t *testing.T) {
	b, err := vault.New(vault.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Lookup(context.Background(), vault.Request{Tool: notes, Principal: "user:a",
		Declared: []manifest.Credential{{Tool: notes, Principal: "user:a", Type: "bearer"}}})
	var m *vault.MissingError
	if !errors.As(err, &m) {
		t.Fatalf("err = %v", err)
	}
	if c, err := b.Lookup(context.Background(), vault.Request{Tool: notes, Principal: "user:a"}); c != nil || err != nil {
		t.Fatalf("undeclared: %v %v", c, err)
	}
}

func TestBrokenFileFailsClosedOnlyWhereNeeded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "credentials.local")
	if _, err := vault.OpenFile(path).Add(vault.FileEntry{Tool: notes, Principal: "user:a", Credential: vault.Credential{Type: vault.TypeBearer, Token: "t"}}); err != nil {
		t.Fatal(err)
	}
	chmod(t, path, 0o644)
	b, _ := vault.New(vault.Config{File: path})
	_, err := b.Lookup(context.Background(), vault.Request{Tool: notes, Principal: "user:a",
		Declared: []manifest.Credential{{Tool: notes, Principal: "user:a", Type: "bearer"}}})
	var u *vault.UnavailableError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("declared tool with a refused file: %v", err)
	}
	if strings.Contains(u.Reason(), path) {
		t.Errorf("the caller's reason names the file: %s", u.Reason())
	}
	// A tool that needs no credential keeps working.
	if c, err := b.Lookup(context.Background(), vault.Request{Tool: "mcp://other.example.com/mcp", Principal: "user:a"}); c != nil || err != nil {
		t.Fatalf("undeclared tool: %v %v", c, err)
	}
}

func TestConfigCheck(t *testing.T) {
	tests := []struct {
		cfg  vault.Config
		want string
	}{
		{vault.Config{CacheTTL: -1}, "credentials.cache_ttl"},
		{vault.Config{Vault: &vault.VaultConfig{Address: "http://127.0.0.1:1", Auth: vault.VaultAuth{Method: "ldap"}}}, `credentials.vault.auth.method: "ldap"`},
		{vault.Config{Vault: &vault.VaultConfig{Address: "http://127.0.0.1:1", Auth: vault.VaultAuth{Method: "approle"}}}, "approle needs role_id and secret_id_file"},
		{vault.Config{Vault: &vault.VaultConfig{Address: "http://127.0.0.1:1", Auth: vault.VaultAuth{Method: "kubernetes"}}}, "credentials.vault.auth.role"},
		{vault.Config{Vault: &vault.VaultConfig{Address: "http://127.0.0.1:1", Path: "secret/{who}"}}, "credentials.vault.path: unknown variable {who}"},
	}
	for _, tt := range tests {
		err := tt.cfg.Check()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Check() = %v, want %q", err, tt.want)
		}
	}
}
