package main

import (
	"strings"
	"testing"
)

// policy eval prints a decision as the policy made it: the class the policy gave the call, and
// for a failed evaluation that it failed, with no class (a failed evaluation classified nothing).
func TestPolicyEvalPrintsTheClassOnlyOfAnEvaluation(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"lush.yaml": "project: eval\ntool_classes:\n  mcp://notes.internal/mcp:\n    search: read\ntool_grants:\n  - tool: mcp://notes.internal/mcp\n" +
			"    grants:\n      - {principal: user:alice, access: read}\n",
		"agents/assistant/spec.yaml": "name: assistant\nmodel: gemini-2.5-flash\ndescription: Searches notes.\ntools:\n" +
			"  - server: mcp://notes.internal/mcp\n    access: read\nacl:\n  - {principal: user:alice, role: execute}\n",
		// Fails to evaluate when the arguments carry a "boom" that is not a number.
		"policies/boom.rego": "package lush.policies.boom\n\ndeny contains \"boom is too large\" if {\n\tto_number(input.arguments.boom) > 10\n}\n",
	})
	tests := []struct {
		name, args    string
		want, notWant []string
	}{
		{"evaluated", `{"boom": 1}`, []string{"decision: ALLOW", "  class      access read, risk read"}, nil},
		{"evaluation failed", `{"boom": "x"}`, []string{"decision: DENY (evaluation failed", "error: evaluate data.lush.authz.decision"}, []string{"class"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lushctl(t, "", "policy", "eval", dir, "--principal", "user:alice", "--agent", "assistant",
				"--tool", "mcp://notes.internal/mcp", "--tool-name", "search", "--args", tt.args)
			for _, want := range tt.want {
				if r.code != 0 || !strings.Contains(r.stdout, want) {
					t.Errorf("exit %d, output lacks %q:\n%s%s", r.code, want, r.stdout, r.stderr)
				}
			}
			for _, not := range tt.notWant {
				if strings.Contains(r.stdout, not) {
					t.Errorf("output has %q:\n%s", not, r.stdout)
				}
			}
		})
	}
}
