package vault_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lush-agents/lush/vault"
)

const notes = "mcp://notes.example.com/mcp"

func TestFileAddLookupRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".lush", "credentials.local")
	f := vault.OpenFile(path)
	if _, ok, err := f.Lookup(notes, "user:bob"); ok || err != nil {
		t.Fatalf("missing file: ok=%v err=%v", ok, err)
	}
	replaced, err := f.Add(vault.FileEntry{Tool: notes, Principal: "user:bob", Credential: vault.Credential{Type: vault.TypeBearer, Token: secretToken}})
	if err != nil || replaced {
		t.Fatalf("add: replaced=%v err=%v", replaced, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v, %v", st.Mode(), err)
	}
	if dir, _ := os.Stat(filepath.Dir(path)); dir.Mode().Perm() != 0o700 {
		t.Errorf(".lush mode %v", dir.Mode().Perm())
	}
	c, ok, err := f.Lookup(notes, "user:bob")
	if err != nil || !ok || c.Token != secretToken || !strings.Contains(c.Source, path) {
		t.Fatalf("lookup: ok=%v err=%v source=%s", ok, err, c.Source)
	}
	// Another process (another File) replaces it; this File sees the change.
	other := vault.OpenFile(path)
	if replaced, err := other.Add(vault.FileEntry{Tool: notes, Principal: "user:bob", Credential: vault.Credential{Type: vault.TypeBearer, Token: "second-token"}}); err != nil || !replaced {
		t.Fatalf("replace: %v %v", replaced, err)
	}
	if c, _, _ := f.Lookup(notes, "user:bob"); c.Token != "second-token" {
		t.Error("the change was not seen")
	}
	if removed, err := f.Remove(notes, "user:bob"); err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	if removed, _ := f.Remove(notes, "user:bob"); removed {
		t.Error("removed twice")
	}
	if _, ok, _ := f.Lookup(notes, "user:bob"); ok {
		t.Error("still there after remove")
	}
}

func TestFileConcurrentAdds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "credentials.local")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := "user:u" + string(rune('a'+i))
			if _, err := vault.OpenFile(path).Add(vault.FileEntry{Tool: notes, Principal: p, Credential: vault.Credential{Type: vault.TypeBearer, Token: "t"}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	entries, err := vault.OpenFile(path).Entries()
	if err != nil || len(entries) != 8 {
		t.Fatalf("%d entries, %v: concurrent adds lost some", len(entries), err)
	}
}

func TestFileRefused(t *testing.T) {
	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
	}{
		{"group readable", `{"version":1,"credentials":[]}`, 0o640, "chmod 600"},
		{"world readable", `{"version":1,"credentials":[]}`, 0o604, "can be read by others (mode 0604)"},
		{"bad json", "{\n\"version\": 1,\n\"credentials\": [ {\"token\": \"" + secretToken + "\" \n]}", 0o600, "line 4: invalid JSON"},
		{"wrong type", `{"version":1,"credentials":[{"tool":"` + notes + `","principal":"user:a","type":"bearer","token":["` + secretToken + `"]}]}`, 0o600, "field credentials.token must be a string"},
		{"unknown field", `{"version":1,"credentials":[],"extra":1}`, 0o600, `unknown field "extra"`},
		{"version", `{"version":2,"credentials":[]}`, 0o600, "has version 2"},
		{"incomplete", `{"version":1,"credentials":[{"tool":"` + notes + `","principal":"user:a","type":"basic","username":"u"}]}`, 0o600, "credentials[0]: type basic needs a password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "credentials.local")
			if err := os.WriteFile(path, []byte(tt.content), tt.mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(path, tt.mode)
			_, err := vault.OpenFile(path).Entries()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), secretToken) {
				t.Fatalf("the error quotes the secret: %v", err)
			}
			// Add refuses to rewrite a file it cannot trust, rather than dropping its entries.
			if _, err := vault.OpenFile(path).Add(vault.FileEntry{Tool: notes, Principal: "user:z", Credential: vault.Credential{Type: vault.TypeBearer, Token: "t"}}); err == nil {
				t.Error("Add rewrote a refused file")
			}
		})
	}
}

func TestFileModeChangeIsSeen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "credentials.local")
	f := vault.OpenFile(path)
	if _, err := f.Add(vault.FileEntry{Tool: notes, Principal: "user:a", Credential: vault.Credential{Type: vault.TypeBearer, Token: "t"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Entries(); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644)
	if _, err := f.Entries(); err == nil {
		t.Fatal("a file made world-readable after it was read is still used")
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
