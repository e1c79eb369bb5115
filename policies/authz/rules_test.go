package authz_test

import (
	"os"
	"strings"
	"testing"
)

// TestRules: every rule id the base library names is described and located at the line of its
// rule in the bundle; the location points at a rule that names the id.
func TestRules(t *testing.T) {
	e := engine(t)
	rules := e.Rules()
	tests := []struct {
		id, title, file string
	}{
		{"lush.acl.no_agent_execute", "Principal may not execute the agent", "agents.rego"},
		{"lush.acl.agent_execute", "", "agents.rego"},
		{"lush.privilege.no_grant", "", ".rego"},
	}
	for _, tc := range tests {
		r, ok := rules[tc.id]
		if !ok {
			t.Errorf("%s: not in the catalog", tc.id)
			continue
		}
		if r.ID != tc.id || r.Line < 1 || !strings.HasSuffix(r.File, tc.file) || r.Description == "" || r.Package == "" {
			t.Errorf("%s: %+v", tc.id, r)
		}
		if tc.title != "" && r.Title != tc.title {
			t.Errorf("%s: title %q, want %q", tc.id, r.Title, tc.title)
		}
		// The line is the rule's own, in the base library's source: the METADATA naming the id
		// ends just above it.
		src, err := os.ReadFile("../" + r.File[strings.LastIndex(r.File, "/")+1:])
		if err != nil {
			t.Errorf("%s: %v", tc.id, err)
			continue
		}
		lines := strings.Split(string(src), "\n")
		if r.Line > len(lines) || !strings.Contains(strings.Join(lines[max(0, r.Line-4):r.Line-1], "\n"), "id: "+tc.id) {
			t.Errorf("%s: line %d of %s is not the rule under its METADATA:\n%s", tc.id, r.Line, r.File, strings.Join(lines[max(0, r.Line-4):min(len(lines), r.Line+1)], "\n"))
		}
	}
}
