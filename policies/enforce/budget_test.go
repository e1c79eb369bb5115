package enforce_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/budget"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

const budgetsYAML = `budgets:
  - name: researcher-calls
    agent: researcher
    tool_calls: 2
    per: day
  - name: researcher-tokens
    agent: researcher
    tokens: 200
    per: day
  - name: engineering-credits
    principal: group:engineering
    credits: 10
    per: month
    costs: {mcp://notes.example.com/mcp: 4}
`

var budgetDay = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

func budgetEnforcer(t *testing.T, store budget.Store) (*enforce.Enforcer, *decisionlog.Log, *fakeClock) {
	t.Helper()
	_, _, log := limitedEnforcer(t, engine(t))
	clock := &fakeClock{now: budgetDay}
	if store == nil {
		store = log
	}
	e := enforce.NewPolicy(enforce.Config{Log: log, Budgets: budget.New(store, budget.Clock(clock.Now))}).Enforcer("test")
	e.Policy().Set(engineWith(t, budgetsYAML))
	return e, log, clock
}

func exhausted(v *enforce.Verdict) bool {
	return !v.Allow && v.Recorded && len(v.Rules) == 1 && v.Rules[0] == enforce.RuleBudgetExhausted
}

func usage(t *testing.T, log *decisionlog.Log, name string) (used, granted int64) {
	t.Helper()
	if err := log.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows, err := log.BudgetUsage(context.Background(), decisionlog.BudgetFilter{Budget: name})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		used, granted = used+r.Used, granted+r.Granted
	}
	return used, granted
}

// A tool_calls budget allows its limit of calls and denies the next with the reason; the
// policy saw the budget in input.budget; the usage is in the log.
func TestBudgetToolCalls(t *testing.T) {
	e, log, clock := budgetEnforcer(t, nil)
	ctx := context.Background()
	for i := range 2 {
		if v := e.Decide(ctx, readCall("user:bob", fs, "read_text_file")); v.Outcome != authz.OutcomeAllow {
			t.Fatalf("call %d: %+v", i+1, v.Decision)
		}
	}
	v := e.Decide(ctx, readCall("user:bob", fs, "read_text_file"))
	want := "budget researcher-calls exhausted: 2 of 2 tool calls used this day; it resets at 2026-11-26T00:00:00Z or after a top-up (lushctl budget top-up)"
	if !exhausted(v) || v.Reasons[0].Message != want {
		t.Fatalf("third call: %+v\nwant reason %q", v.Decision, want)
	}
	if used, _ := usage(t, log, "researcher-calls"); used != 2 {
		t.Errorf("used %d, want 2", used)
	}
	recs, err := log.Query(ctx, decisionlog.Filter{DecisionID: v.ID})
	if err != nil || len(recs) != 1 || !strings.Contains(string(recs[0].Event.Input), `"exhausted":true,"exhausted_by":[{`) {
		t.Fatalf("the logged input has no budget: %v %s", err, recs[0].Event.Input)
	}
	// Another agent is not limited by it; the next day starts afresh.
	other := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "orchestrator",
		Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}}
	if v := e.Decide(ctx, other); !v.Allow {
		t.Fatalf("orchestrator: %+v", v.Decision)
	}
	clock.Advance(14 * time.Hour)
	if v := e.Decide(ctx, readCall("user:bob", fs, "read_text_file")); !v.Allow {
		t.Fatalf("the next day: %+v", v.Decision)
	}
}

// A call that does not run is not charged: denied by the policy, or by another budget.
func TestBudgetRefundWhenNotAllowed(t *testing.T) {
	e, log, _ := budgetEnforcer(t, nil)
	ctx := context.Background()
	for range 3 {
		// researcher does not allowlist write_file: denied, so not charged.
		if v := e.Decide(ctx, readCall("user:bob", fs, "write_file")); v.Allow {
			t.Fatalf("write_file allowed: %+v", v.Decision)
		}
	}
	if used, _ := usage(t, log, "researcher-calls"); used != 0 {
		t.Fatalf("denied calls charged %d", used)
	}
	// Notes cost 4 credits of 10: two calls, then the third is over the credits budget and
	// charges no tool call either.
	for i := range 2 {
		if v := e.Decide(ctx, readCall("user:bob", notes, "search_notes")); !v.Allow {
			t.Fatalf("notes call %d: %+v", i+1, v.Decision)
		}
	}
	v := e.Decide(ctx, readCall("user:bob", notes, "search_notes"))
	if !exhausted(v) || len(v.Reasons) != 2 || !strings.Contains(v.Reasons[0].Message, "budget engineering-credits exhausted: 8 of 10 credits used this month, and the call costs 4") {
		t.Fatalf("third notes call: %+v", v.Decision)
	}
	if used, _ := usage(t, log, "engineering-credits"); used != 8 {
		t.Errorf("credits used %d, want 8", used)
	}
	if used, _ := usage(t, log, "researcher-calls"); used != 2 {
		t.Errorf("tool calls used %d, want 2", used)
	}
}

// A stubbed write is charged (it took its turn); the credits budget is per caller.
func TestBudgetStubCharged(t *testing.T) {
	e, log, _ := budgetEnforcer(t, nil)
	in := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:alice", Groups: []string{"group:engineering"}}, Agent: "orchestrator",
		Tool: &authz.Tool{Ref: fs, Name: "write_file"}, Arguments: map[string]any{"path": "drafts/q3.md", "content": "x"}}
	v := e.Decide(context.Background(), in)
	if v.Outcome != authz.OutcomeStub {
		t.Fatalf("write: %+v", v.Decision)
	}
	rows, err := log.BudgetUsage(context.Background(), decisionlog.BudgetFilter{Budget: "engineering-credits"})
	if err != nil || len(rows) != 1 || rows[0].Subject != "user:alice" || rows[0].Used != 1 {
		t.Fatalf("usage %+v %v", rows, err)
	}
}

// Tokens are charged when the invocation ends, to the token budgets that applied to it; an
// exhausted token budget denies agent/invoke (the agent is not started) and the agent's calls.
func TestBudgetTokens(t *testing.T) {
	e, log, _ := budgetEnforcer(t, nil)
	ctx := context.Background()
	invoke := authz.Input{Action: "agent/invoke", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "researcher"}
	v := e.Decide(ctx, invoke)
	if v.Outcome != authz.OutcomeAllow {
		t.Fatalf("invoke: %+v", v.Decision)
	}
	if err := v.CompleteInvocation(decisionlog.StatusOK, time.Second, 150, 60, ""); err != nil {
		t.Fatal(err)
	}
	if used, _ := usage(t, log, "researcher-tokens"); used != 210 {
		t.Fatalf("tokens used %d, want 210", used)
	}
	recs, err := log.Query(ctx, decisionlog.Filter{DecisionID: v.ID})
	if err != nil || recs[0].Completion == nil || recs[0].Completion.TokensInput != 150 {
		t.Fatalf("completion: %v %+v", err, recs)
	}
	v = e.Decide(ctx, invoke)
	want := "budget researcher-tokens exhausted: 210 of 200 tokens used this day"
	if !exhausted(v) || !strings.HasPrefix(v.Reasons[0].Message, want) {
		t.Fatalf("invoke over the token budget: %+v", v.Decision)
	}
	if v := e.Decide(ctx, readCall("user:bob", fs, "read_text_file")); !exhausted(v) {
		t.Fatalf("a call of the agent over its token budget: %+v", v.Decision)
	}
	// A denied invocation's completion charges nothing.
	if err := v.CompleteInvocation(decisionlog.StatusError, 0, 1000, 0, "x"); err != nil {
		t.Fatal(err)
	}
	if used, _ := usage(t, log, "researcher-tokens"); used != 210 {
		t.Errorf("tokens used %d after a denied completion", used)
	}
}

type brokenStore struct{}

func (brokenStore) BudgetUsage(context.Context, decisionlog.BudgetFilter) ([]decisionlog.BudgetUsage, error) {
	return nil, errors.New("connection refused")
}

// Budgets fail closed: when usage cannot be read, a call they apply to is denied; others are not.
func TestBudgetStoreFailureDenies(t *testing.T) {
	e, log, _ := budgetEnforcer(t, brokenStore{})
	ctx := context.Background()
	v := e.Decide(ctx, readCall("user:bob", fs, "read_text_file"))
	if !exhausted(v) || !strings.Contains(v.Reasons[0].Message, "budget usage cannot be read") || strings.Contains(v.Explain(), "connection refused") {
		t.Fatalf("call with unreadable usage: %+v (%s)", v.Decision, v.Explain())
	}
	recs, err := log.Query(ctx, decisionlog.Filter{DecisionID: v.ID})
	if err != nil || !strings.Contains(recs[0].Event.Error, "connection refused") {
		t.Fatalf("the log does not say why: %v %+v", err, recs)
	}
	// A tool no budget applies to (another agent, a principal outside the group).
	other := authz.Input{Action: "tools/list", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "researcher",
		Tool: &authz.Tool{Ref: fs}}
	if v := e.Decide(ctx, other); !v.Allow {
		t.Fatalf("tools/list: %+v", v.Decision)
	}
}

// The enforcers of one policy share its ledger: calls decided at any point of a process cannot
// overspend together.
func TestBudgetLedgerSharedByPolicy(t *testing.T) {
	_, _, log := limitedEnforcer(t, engine(t))
	policy := enforce.NewPolicy(enforce.Config{Log: log})
	a, b := policy.Enforcer("a"), policy.Enforcer("b")
	if a.Budgets() == nil || a.Budgets() != b.Budgets() {
		t.Fatal("enforcers of one policy do not share a ledger")
	}
	if other := enforce.NewPolicy(enforce.Config{Log: log}).Enforcer("a"); other.Budgets() == a.Budgets() {
		t.Fatal("two policies share a ledger: one is found through the log")
	}
	policy.Set(engineWith(t, budgetsYAML))
	ctx := context.Background()
	if !a.Decide(ctx, readCall("user:bob", fs, "read_text_file")).Allow || !b.Decide(ctx, readCall("user:bob", fs, "read_text_file")).Allow {
		t.Fatal("first two calls denied")
	}
	if v := a.Decide(ctx, readCall("user:bob", fs, "read_text_file")); !exhausted(v) {
		t.Fatalf("third call, through the other enforcer: %+v", v.Decision)
	}
}

// Calls with room in their budgets are decided from the decision cache although the usage the
// policy sees changes with each: the base library reads only what is the same for all of them.
func TestBudgetCallsHitTheCache(t *testing.T) {
	e, _, _ := limitedEnforcer(t, engineWith(t, "budgets:\n  - name: researcher-calls\n    agent: researcher\n    tool_calls: 1000\n    per: day\n"))
	ctx := context.Background()
	for range 5 {
		if v := e.Decide(ctx, readCall("user:bob", fs, "read_text_file")); v.Outcome != authz.OutcomeAllow {
			t.Fatalf("%+v", v.Decision)
		}
	}
	if hits, _, _, _ := e.Engine().CacheStats(); hits < 4 {
		t.Errorf("%d cache hits for 5 calls with room, want at least 4", hits)
	}
}
