package budget

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lush-agents/lush/policies/decisionlog"
)

// Status is the usage of one budget by one subject in the current period.
type Status struct {
	Budget    string    `json:"budget"`
	Agent     string    `json:"agent,omitempty"`
	Principal string    `json:"principal,omitempty"`
	Subject   string    `json:"subject"`
	Unit      string    `json:"unit"`
	Per       string    `json:"per"`
	Limit     int64     `json:"limit"`
	Used      int64     `json:"used"`
	Granted   int64     `json:"granted"`
	Remaining int64     `json:"remaining"`
	Period    time.Time `json:"period"` // the current period's start
	Resets    time.Time `json:"resets"` // its end
}

// Report returns the usage of the current period (at now) of every budget in budgets named by
// budgetName (all when empty), by every subject that has used it, or only by subject when set.
// An agent budget, and a budget of one principal, is listed even when unused.
func Report(ctx context.Context, store Store, budgets []Budget, now time.Time, budgetName, subject string) ([]Status, error) {
	var out []Status
	for i := range budgets {
		b := &budgets[i]
		if budgetName != "" && b.Name != budgetName {
			continue
		}
		start, end := b.Period(now)
		rows, err := store.BudgetUsage(ctx, decisionlog.BudgetFilter{Budget: b.Name, Subject: subject, Period: start})
		if err != nil {
			return nil, fmt.Errorf("report budget %s: %w", b.Name, err)
		}
		status := func(subj string, used, granted int64) Status {
			return Status{Budget: b.Name, Agent: b.Agent, Principal: b.Principal, Subject: subj, Unit: b.Unit, Per: b.Per,
				Limit: b.Limit, Used: used, Granted: granted, Remaining: b.Limit + granted - used, Period: start, Resets: end}
		}
		for _, r := range rows {
			out = append(out, status(r.Subject, r.Used, r.Granted))
		}
		if len(rows) == 0 {
			if own := b.OwnSubject(); own != "" && (subject == "" || subject == own) {
				out = append(out, status(own, 0, 0))
			}
		}
	}
	return out, nil
}

// OwnSubject is the one subject of a budget that has only one: the agent of an agent budget,
// the principal of a budget of one user or service account; "" for groups and "*".
func (b *Budget) OwnSubject() string {
	switch {
	case b.Agent != "":
		return b.Agent
	case strings.HasPrefix(b.Principal, "user:"), strings.HasPrefix(b.Principal, "serviceaccount:"):
		return b.Principal
	}
	return ""
}

// CheckSubject checks that subject can have usage of b: the agent of an agent budget, the
// principal of a budget of one principal, a principal id for a budget of a group or "*".
func (b *Budget) CheckSubject(subject string) error {
	if own := b.OwnSubject(); own != "" {
		if subject != own {
			return fmt.Errorf("budget %s has one subject, %s: subject %q is not it", b.Name, own, subject)
		}
		return nil
	}
	for _, p := range []string{"user:", "serviceaccount:", "group:"} {
		if strings.HasPrefix(subject, p) && len(subject) > len(p) {
			return nil
		}
	}
	return fmt.Errorf("budget %s counts each caller: subject must be a principal id such as user:alice, not %q", b.Name, subject)
}
