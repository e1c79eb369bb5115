package agentd

import (
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
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
