package enforce_test

import (
	"context"
	"testing"

	"github.com/lush-agents/lush/policies/authz"
)

// BenchmarkDecideBudget: what a budget costs a decision. Both runs decide and record the same
// allowed tools/call; "budget" has a tool_calls budget that applies to it (a limit it never
// reaches), so each call also reserves in the ledger, misses the decision cache (input.budget
// changes with every call) and charges the usage in the event's transaction.
func BenchmarkDecideBudget(b *testing.B) {
	for _, tc := range []struct{ name, yaml string }{
		{"none", ""},
		{"budget", "budgets:\n  - name: researcher-calls\n    agent: researcher\n    tool_calls: 1000000000\n    per: day\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e, _, _ := limitedEnforcer(b, engineWith(b, tc.yaml))
			ctx := context.Background()
			in := readCall("user:bob", fs, "read_text_file")
			for b.Loop() {
				if v := e.Decide(ctx, in); v.Outcome != authz.OutcomeAllow {
					b.Fatalf("%+v", v.Decision)
				}
			}
		})
	}
}
