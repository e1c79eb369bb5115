package compiler_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lush-agents/lush/internal/manifest"
)

// TestArgumentReads: the manifest names the tools whose tools/call arguments the decision's
// rules can read, narrowed by the rules' top-level conditions on the call, and errs towards more
// tools when it cannot tell.
func TestArgumentReads(t *testing.T) {
	const fs = "mcp://npx/@modelcontextprotocol/server-filesystem"
	quick := manifest.ToolArguments{Ref: fs, Names: []string{"create_directory", "edit_file", "move_file", "write_file"}}
	tests := []struct {
		name   string
		policy string // policies/extra.rego added to the quickstart ("" for none)
		want   manifest.ArgumentReads
	}{
		{"quickstart: the writes of drafts.rego", "", manifest.ArgumentReads{Tools: []manifest.ToolArguments{quick}}},
		{"guarded by a constant reference", `package lush.policies.extra
deny contains "no" if {
	input.tool.ref == "mcp://example.com/mcp"
	input.arguments.x == 1
}`, manifest.ArgumentReads{Tools: []manifest.ToolArguments{{Ref: "mcp://example.com/mcp"}, quick}}},
		{"guarded by a name alone", `package lush.policies.extra
deny contains "no" if {
	input.tool.name == "delete"
	input.arguments.x == 1
}`, manifest.ArgumentReads{Tools: []manifest.ToolArguments{{Ref: "*", Names: []string{"delete"}}, quick}}},
		{"guard in the caller, read in a helper rule", `package lush.policies.extra
server := "mcp://example.com/mcp"
names := ["a", "b"]
deny contains "no" if {
	input.tool.ref == server
	input.tool.name in names
	bad
}
bad if input.arguments.x == 1`, manifest.ArgumentReads{Tools: []manifest.ToolArguments{{Ref: "mcp://example.com/mcp", Names: []string{"a", "b"}}, quick}}},
		{"another action", `package lush.policies.extra
deny contains "no" if {
	input.action == "agent/invoke"
	input.arguments.x == 1
}`, manifest.ArgumentReads{Tools: []manifest.ToolArguments{quick}}},
		{"unguarded", `package lush.policies.extra
deny contains "no" if input.arguments.x == 1`, manifest.ArgumentReads{All: true}},
		{"a negated condition rules nothing out", `package lush.policies.extra
deny contains "no" if {
	not input.tool.ref == "mcp://example.com/mcp"
	input.arguments.x == 1
}`, manifest.ArgumentReads{All: true}},
		{"the whole input", `package lush.policies.extra
deny contains "no" if {
	input.tool.ref == "mcp://example.com/mcp"
	json.marshal(input) == ""
}
deny contains "no" if count(object.keys(input)) == 99`, manifest.ArgumentReads{All: true}},
		{"a key computed at run time", `package lush.policies.extra
deny contains "no" if {
	some k in ["tool", "arguments"]
	input[k].x == 1
}`, manifest.ArgumentReads{All: true}},
		{"with input", `package lush.policies.extra
deny contains "no" if {
	input.tool.ref == "mcp://example.com/mcp"
	other with input.tool as {}
}
other if input.agent == "x"`, manifest.ArgumentReads{Tools: []manifest.ToolArguments{{Ref: "mcp://example.com/mcp"}, quick}}},
		{"an else branch is not guarded by the body before it", `package lush.policies.extra
level := 1 if {
	input.tool.ref == "mcp://example.com/mcp"
} else := 2 if {
	input.arguments.x == 1
}
deny contains "no" if level == 2`, manifest.ArgumentReads{All: true}},
		{"rules the decision does not reach", `package lush.policies.extra
unused if input.arguments.x == 1`, manifest.ArgumentReads{Tools: []manifest.ToolArguments{quick}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, quickstart, dir, false)
			if tc.policy != "" {
				if err := os.WriteFile(filepath.Join(dir, "policies", "extra.rego"), []byte(tc.policy+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := build(t, dir).Manifest.ArgumentReads
			if got == nil || !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("ArgumentReads = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
