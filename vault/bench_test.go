package vault_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/test/vaultserver"
	"github.com/lush-agents/lush/vault"
)

// BenchmarkLookup is what a call that needs a credential pays for finding it once it is cached:
// the local file (a stat per lookup, to see `auth add` at once) and Vault (a cache hit).
func BenchmarkLookup(b *testing.B) {
	declared := []manifest.Credential{{Tool: notes, Principal: "group:eng", Type: "bearer"}, {Tool: notes, Principal: "serviceaccount:bot", Type: "bearer"}}
	b.Run("source=file", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "credentials.local")
		vault.OpenFile(path).Add(vault.FileEntry{Tool: notes, Principal: "user:bob", Credential: vault.Credential{Type: "bearer", Token: "t"}})
		br, _ := vault.New(vault.Config{File: path})
		req := vault.Request{Project: "p", Tool: notes, Principal: "user:bob", Groups: []string{"group:eng"}, Declared: declared}
		for b.Loop() {
			if c, err := br.Lookup(context.Background(), req); err != nil || c == nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("source=vault-cached", func(b *testing.B) {
		vs := vaultserver.Start(b)
		vs.Client(b, vs.RootToken()).KVv2("secret").Put(context.Background(), "lush/p/notes.example.com/mcp/serviceaccount/bot", map[string]any{"token": "t"})
		tok := filepath.Join(b.TempDir(), "tok")
		writeTokenFile(b, tok, vs.RootToken())
		br, _ := vault.New(vault.Config{Vault: &vault.VaultConfig{Address: vs.Addr(), Auth: vault.VaultAuth{TokenFile: tok}}})
		defer br.Close()
		req := vault.Request{Project: "p", Tool: notes, Principal: "serviceaccount:bot", Declared: declared}
		for b.Loop() {
			if c, err := br.Lookup(context.Background(), req); err != nil || c == nil {
				b.Fatal(err)
			}
		}
	})
}
