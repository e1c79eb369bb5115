package authz_test

import (
	"strings"
	"testing"

	"github.com/lush-agents/lush/policies/authz"
)

func TestWriteExplanation(t *testing.T) {
	in := authz.Input{Action: authz.ActionToolsCall, Principal: authz.Principal{ID: "user:dave", Groups: []string{"group:eng"}},
		Agent: "writer", Chain: []string{"orchestrator", "writer"}, Tool: &authz.Tool{Ref: "mcp://notes.example.com/mcp", Name: "post_note"}}
	for _, tc := range []struct {
		name string
		d    authz.Decision
		want []string
		not  []string
	}{
		{"a denial", authz.Decision{Outcome: authz.OutcomeDeny, Access: "write", Risk: "write", Revision: "0123456789abcdef0123",
			Reasons: []authz.Reason{{Rule: "lush.privilege.no_grant", Message: "no grant"}}, Rules: []string{"lush.privilege.no_grant"}},
			[]string{"decision: DENY\n", "principal  user:dave (groups: group:eng)", "agent      writer (chain: orchestrator → writer)",
				"action     tools/call mcp://notes.example.com/mcp post_note", "class      access write, risk write", "revision   0123456789ab\n",
				"✗ lush.privilege.no_grant: no grant", "rules: lush.privilege.no_grant\n"}, nil},
		{"an approval", authz.Decision{Outcome: authz.OutcomeApproval, Allow: true, Approvals: []authz.Reason{{Rule: "corp.risk", Message: "risky"}}},
			[]string{"APPROVAL REQUIRED", "? corp.risk: risky"}, []string{"✗"}},
		{"a failed evaluation classifies nothing", authz.Decision{Outcome: authz.OutcomeError, Error: "timeout"},
			[]string{"DENY (evaluation failed", "error: timeout"}, []string{"class "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			authz.WriteExplanation(&b, in, tc.d)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("no %q in\n%s", w, b.String())
				}
			}
			for _, w := range tc.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("%q in\n%s", w, b.String())
				}
			}
		})
	}
}

func TestFilterTrace(t *testing.T) {
	trace := "Enter data.lush.authz.decision\n| Note \"hello\"\nExit\n"
	for _, tc := range []struct{ mode, want string }{
		{"full", trace},
		{"notes", "| Note \"hello\"\n"},
	} {
		if got := authz.FilterTrace(trace, tc.mode); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.mode, got, tc.want)
		}
	}
	if got := authz.FilterTrace("Enter\nExit\n", "notes"); !strings.Contains(got, "no trace(...) notes") {
		t.Errorf("notes of a trace without any: %q", got)
	}
}
