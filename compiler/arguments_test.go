package compiler_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
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
		{"an else branch reading through a helper rule", `package lush.policies.extra
level := 1 if {
	input.tool.ref == "mcp://example.com/mcp"
} else := 2 if {
	helper
}
helper if input.arguments.x == 1
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
			res := build(t, dir)
			got := res.Manifest.ArgumentReads
			if got == nil || !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("ArgumentReads = %+v\nwant %+v", got, tc.want)
			}
			sameWithoutArguments(t, res.Bundle, got)
		})
	}
}

// sameWithoutArguments checks the record against the policy itself: a call of a tool it does not
// name is decided the same with any arguments as without them, while some call of a tool it
// names is decided differently (so the check can tell).
func sameWithoutArguments(t *testing.T, bundle []byte, reads *manifest.ArgumentReads) {
	t.Helper()
	eng, err := authz.FromBytes(context.Background(), bundle, authz.Timeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	const fs = "mcp://npx/@modelcontextprotocol/server-filesystem"
	argSets := []map[string]any{{"path": "/etc/passwd"}, {"path": "drafts/a.md"}, {"source": "drafts/a", "destination": "/b"},
		{"x": 1}, {"x": "y", "requester": "user:alice"}, {}}
	differs := false
	for _, ref := range []string{fs, "mcp://example.com/mcp", "mcp://notes.example.com/mcp"} {
		for _, name := range []string{"read_text_file", "write_file", "move_file", "delete", "a", "b", "search"} {
			in := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "serviceaccount:digest-bot"}, Agent: "orchestrator",
				Chain: []string{"orchestrator"}, Depth: 1, LiveWrites: true, Tool: &authz.Tool{Ref: ref, Name: name}}
			base := eng.Decide(context.Background(), in)
			for _, args := range argSets {
				in.Arguments = args
				d := eng.Decide(context.Background(), in)
				if d.Outcome == "error" || base.Outcome == "error" {
					continue // a policy that fails on some arguments: an error denies either way
				}
				same := reflect.DeepEqual(d, base)
				if !same && !reads.Read(ref, name) {
					t.Errorf("%s (%s) is not recorded as reading its arguments, but %v decides %s %v, without arguments %s %v",
						ref, name, args, d.Outcome, d.Rules, base.Outcome, base.Rules)
				}
				differs = differs || !same
			}
		}
	}
	if !differs {
		t.Errorf("no call was decided differently for its arguments: the check cannot tell")
	}
}
