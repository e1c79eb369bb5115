package vault_test

import (
	"testing"

	"github.com/lush-agents/lush/vault"
)

// A missing credential is named with the article its type takes: an oauth credential, a bearer
// credential.
func TestMissingErrorNamesTheType(t *testing.T) {
	want := map[string]string{
		vault.TypeOAuth:  "mcp://notes.example.com/mcp needs an oauth credential for user:ann, and none is configured",
		vault.TypeBearer: "mcp://notes.example.com/mcp needs a bearer credential for user:ann, and none is configured",
		vault.TypeAPIKey: "mcp://notes.example.com/mcp needs an api_key credential for user:ann, and none is configured",
		vault.TypeBasic:  "mcp://notes.example.com/mcp needs a basic credential for user:ann, and none is configured",
		vault.TypeEnv:    "mcp://notes.example.com/mcp needs an env credential for user:ann, and none is configured",
		"":               "mcp://notes.example.com/mcp needs a credential for user:ann, and none is configured",
	}
	for _, typ := range append(vault.Types, "") {
		err := &vault.MissingError{Tool: "mcp://notes.example.com/mcp", Principal: "user:ann", Type: typ}
		if got := err.Error(); got != want[typ] {
			t.Errorf("type %q: %q, want %q", typ, got, want[typ])
		}
	}
}
