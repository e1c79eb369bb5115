package agentd

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/internal/identity"
)

// Tool names the gateway lists are offered to models under names they accept, unique, and
// mapped back to the gateway's names.
func TestToolNames(t *testing.T) {
	b := &toolbox{byName: map[string]string{}}
	long := strings.Repeat("x", 80)
	for _, name := range []string{"read_file", "fs/read file", "fs_read_file", "9lives", long, long + "y", "ok.name-1"} {
		b.add(mcp.Tool{Name: name})
	}
	want := map[string]string{
		"read_file": "read_file", "fs_read_file": "fs/read file", "fs_read_file_2": "fs_read_file",
		"t_9lives": "9lives", long[:64]: long, long[:62] + "_2": long + "y", "ok.name-1": "ok.name-1",
	}
	if len(b.byName) != len(want) {
		t.Fatalf("names %v", b.byName)
	}
	for offered, real := range want {
		if b.byName[offered] != real {
			t.Errorf("%q -> %q, want %q (all: %v)", offered, b.byName[offered], real, b.byName)
		}
	}
	for _, tool := range b.tools {
		if len(tool.Name) > 64 || invalidName.MatchString(tool.Name) {
			t.Errorf("offered name %q is not valid", tool.Name)
		}
	}
}

// A delegation token is reused while it has more than a minute left, and signed anew after.
func TestTokenRenewal(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	d := identity.Delegation{Principal: "user:alice", Agent: "a", Chain: []string{"a"}}
	long := &tokenSource{signer: identity.NewSigner(key, ""), d: d}
	long.d.TTL = 5 * time.Minute
	t1, err1 := long.token()
	t2, err2 := long.token()
	if err1 != nil || err2 != nil || t1 != t2 {
		t.Errorf("a fresh token was not reused: %v %v", err1, err2)
	}
	short := &tokenSource{signer: identity.NewSigner(key, ""), d: d}
	short.d.TTL = 30 * time.Second // always within a minute of expiring
	t1, _ = short.token()
	t2, _ = short.token()
	if t1 == "" || t1 == t2 {
		t.Error("a token about to expire was reused")
	}
}
