package enforce

import (
	"context"
	"time"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/budget"
)

// RuleBudgetExhausted is the rule id of the base policy's denial of a call that a budget of the
// project has no room for, or whose budget usage cannot be read (policies/limits.rego).
const RuleBudgetExhausted = "lush.budget.exhausted"

// budgetUnreadable is what the policy (and so the caller) is told when usage cannot be read:
// the store's own error goes to the decision's error field only.
const budgetUnreadable = "budget usage could not be read from the decision log"

// reserveBudgets reserves the call's cost of every budget of the build that applies to in, and
// returns the reservation (nil when no budget applies) and input.budget. When usage cannot be
// read, input.budget says so and is exhausted (fail closed), and err is why.
func (e *Enforcer) reserveBudgets(ctx context.Context, budgets []budget.Budget, in *authz.Input) (*budget.Reservation, *authz.Budget, error) {
	if len(budgets) == 0 || !budget.Applies(in.Action) {
		return nil, nil, nil
	}
	r, err := e.policy.cfg.Budgets.Reserve(ctx, budgets, budget.CallOf(in))
	if err != nil {
		return nil, &authz.Budget{Exhausted: true, Budgets: []authz.BudgetState{}, ExhaustedBy: []authz.BudgetState{}, Error: budgetUnreadable}, err
	}
	if r == nil {
		return nil, nil, nil
	}
	out := &authz.Budget{Exhausted: r.Exhausted, Budgets: make([]authz.BudgetState, 0, len(r.States)), ExhaustedBy: []authz.BudgetState{}}
	for _, s := range r.States {
		state := authz.BudgetState{Name: s.Budget.Name, Subject: s.Subject, Unit: s.Budget.Unit, Per: s.Budget.Per,
			Limit: s.Budget.Limit, Used: s.Used, Granted: s.Granted, Remaining: s.Remaining, Cost: s.Cost,
			PeriodEnd: s.End.UTC().Format(time.RFC3339)}
		out.Budgets = append(out.Budgets, state)
		if s.Exhausted {
			out.ExhaustedBy = append(out.ExhaustedBy, state)
		}
	}
	return r, out, nil
}

// charges reports whether a verdict's call runs, and so is charged: it is allowed outright or
// stubbed (a stubbed write still took its turn), and recorded.
func charges(v *Verdict) bool {
	return v.Recorded && v.Allow && (v.Outcome == authz.OutcomeAllow || v.Outcome == authz.OutcomeStub)
}
