package authz

import "github.com/open-policy-agent/opa/v1/ast"

// Budget tells the policy about the project's budgets that apply to a call (input.budget): the
// enforcer's ledger reserved the call's cost of each, or found one exhausted, or could not read
// usage at all (Error; Exhausted is then true: budgets fail closed).
type Budget struct {
	Exhausted bool          `json:"exhausted"`
	Budgets   []BudgetState `json:"budgets"`
	// ExhaustedBy are the budgets of Budgets that have no room for the call (empty when
	// Exhausted is false). The base library reads this, not Budgets, so that calls with room
	// keep hitting the decision cache while the usage they see changes.
	ExhaustedBy []BudgetState `json:"exhausted_by"`
	Error       string        `json:"error,omitempty"` // why usage is unknown; never internals
}

// BudgetState is one budget as the call sees it. Remaining is Limit + Granted - Used (negative
// when a token budget was overrun by an invocation); Cost is what the call is charged before it
// runs. The budget is exhausted for the call when Remaining < max(Cost, 1).
type BudgetState struct {
	Name      string `json:"name"`
	Subject   string `json:"subject"` // whose usage: the agent, or the caller
	Unit      string `json:"unit"`    // tokens, tool_calls or credits
	Per       string `json:"per"`     // hour, day, week or month
	Limit     int64  `json:"limit"`
	Used      int64  `json:"used"`
	Granted   int64  `json:"granted"`
	Remaining int64  `json:"remaining"`
	Cost      int64  `json:"cost"`
	PeriodEnd string `json:"period_end"` // RFC 3339, UTC: when the period resets
}

// value converts the budget verdict to an OPA value.
func (b *Budget) value() ast.Value {
	obj := ast.NewObject(
		ast.Item(ast.InternedTerm("exhausted"), ast.InternedTerm(b.Exhausted)),
		ast.Item(ast.InternedTerm("budgets"), statesTerm(b.Budgets)),
		ast.Item(ast.InternedTerm("exhausted_by"), statesTerm(b.ExhaustedBy)),
	)
	if b.Error != "" {
		obj.Insert(ast.InternedTerm("error"), ast.StringTerm(b.Error))
	}
	return obj
}

func statesTerm(states []BudgetState) *ast.Term {
	list := make([]*ast.Term, 0, len(states))
	for _, s := range states {
		list = append(list, ast.NewTerm(ast.NewObject(
			ast.Item(ast.InternedTerm("name"), ast.StringTerm(s.Name)),
			ast.Item(ast.InternedTerm("subject"), ast.StringTerm(s.Subject)),
			ast.Item(ast.InternedTerm("unit"), ast.StringTerm(s.Unit)),
			ast.Item(ast.InternedTerm("per"), ast.StringTerm(s.Per)),
			ast.Item(ast.InternedTerm("limit"), ast.IntNumberTerm(int(s.Limit))),
			ast.Item(ast.InternedTerm("used"), ast.IntNumberTerm(int(s.Used))),
			ast.Item(ast.InternedTerm("granted"), ast.IntNumberTerm(int(s.Granted))),
			ast.Item(ast.InternedTerm("remaining"), ast.IntNumberTerm(int(s.Remaining))),
			ast.Item(ast.InternedTerm("cost"), ast.IntNumberTerm(int(s.Cost))),
			ast.Item(ast.InternedTerm("period_end"), ast.StringTerm(s.PeriodEnd)),
		)))
	}
	return ast.ArrayTerm(list...)
}
