package budget

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time)         { c.mu.Lock(); c.now = t; c.mu.Unlock() }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func openLog(t *testing.T) *decisionlog.Log {
	t.Helper()
	l, err := decisionlog.Open(context.Background(), filepath.Join(t.TempDir(), "d.db"), decisionlog.CheckpointEvery(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// record records an event with charges, as the enforcer does for an allowed call.
func record(t *testing.T, log *decisionlog.Log, charges []decisionlog.Charge) {
	t.Helper()
	e := &decisionlog.Event{DecisionID: uuid.NewString(), Input: []byte(`{}`), Result: []byte(`{}`), Action: "tools/call",
		Principal: "user:bob", Outcome: authz.OutcomeAllow, Point: "test", Charges: charges}
	if err := log.Record(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

func call(agent, who string, groups ...string) Call {
	return Call{Action: authz.ActionToolsCall, Agent: agent, Principal: who, Groups: groups, Tool: "tools/clock"}
}

// spend reserves and, when allowed, records and commits; it reports whether the call could run.
func spend(t *testing.T, l *Ledger, log *decisionlog.Log, bs []Budget, c Call) (*Reservation, bool) {
	t.Helper()
	r, err := l.Reserve(context.Background(), bs, c)
	if err != nil {
		t.Fatal(err)
	}
	if r == nil || r.Exhausted {
		r.Release()
		return r, r == nil
	}
	record(t, log, r.Charges())
	r.Commit()
	return r, true
}

func TestSubjectAndCost(t *testing.T) {
	agent := Budget{Name: "a", Agent: "researcher", Unit: UnitToolCalls, Limit: 1, Per: "day"}
	group := Budget{Name: "g", Principal: "group:contractors", Unit: UnitCredits, Limit: 1, Per: "day",
		Costs: map[string]int64{"mcp://gh/mcp create_issue": 5, "mcp://gh/mcp": 2}}
	anyone := Budget{Name: "s", Principal: "*", Unit: UnitTokens, Limit: 1, Per: "day"}
	tests := []struct {
		b       Budget
		c       Call
		subject string
		applies bool
		cost    int64
	}{
		{agent, call("researcher", "user:bob"), "researcher", true, 1},
		{agent, call("coder", "user:bob"), "", false, 1},
		{agent, Call{Action: authz.ActionAgentInvoke, Agent: "researcher", Principal: "user:bob"}, "researcher", true, 0},
		{agent, Call{Action: authz.ActionToolsList, Agent: "researcher", Principal: "user:bob"}, "", false, 0},
		{group, call("x", "user:carl", "group:contractors"), "user:carl", true, 1},
		{group, Call{Action: authz.ActionToolsCall, Principal: "user:carl", Groups: []string{"group:contractors"}, Tool: "mcp://gh/mcp", ToolName: "create_issue"}, "user:carl", true, 5},
		{group, Call{Action: authz.ActionToolsCall, Principal: "user:carl", Groups: []string{"group:contractors"}, Tool: "mcp://gh/mcp", ToolName: "list"}, "user:carl", true, 2},
		{group, call("x", "user:bob", "group:engineering"), "", false, 1},
		{anyone, call("x", "user:bob"), "user:bob", true, 0},
		{anyone, Call{Action: authz.ActionToolsCall, Agent: "x"}, "", false, 0},
	}
	for i, tt := range tests {
		subject, ok := tt.b.Subject(tt.c)
		if subject != tt.subject || ok != tt.applies || tt.b.Cost(tt.c) != tt.cost {
			t.Errorf("%d: subject %q %v cost %d, want %q %v %d", i, subject, ok, tt.b.Cost(tt.c), tt.subject, tt.applies, tt.cost)
		}
	}
}

// Usage is per period: a UTC calendar day, week (from Monday) or month rolls over at its
// boundary, and a new period starts with nothing used.
func TestPeriodsRollOver(t *testing.T) {
	for _, tc := range []struct {
		per        string
		start      time.Time // the last instant of a period
		next       time.Time
		wantPeriod time.Time
	}{
		{"hour", time.Date(2026, 11, 25, 9, 59, 59, 0, time.UTC), time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC), time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)},
		{"day", time.Date(2026, 11, 25, 23, 59, 59, 0, time.UTC), time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)},
		{"week", time.Date(2026, 11, 29, 23, 59, 59, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)},
		{"month", time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.per, func(t *testing.T) {
			log := openLog(t)
			c := &clock{now: tc.start}
			l := New(log, Clock(c.Now))
			bs := []Budget{{Name: "calls", Agent: "researcher", Unit: UnitToolCalls, Limit: 2, Per: tc.per}}
			for i := range 2 {
				if _, ok := spend(t, l, log, bs, call("researcher", "user:bob")); !ok {
					t.Fatalf("call %d denied", i+1)
				}
			}
			r, ok := spend(t, l, log, bs, call("researcher", "user:bob"))
			if ok || !r.States[0].Exhausted || r.States[0].Used != 2 || r.States[0].Remaining != 0 {
				t.Fatalf("third call: %v %+v", ok, r.States)
			}
			if !r.States[0].Start.Equal(tc.wantPeriod) || !r.States[0].End.Equal(tc.next) {
				t.Errorf("period %v to %v, want %v to %v", r.States[0].Start, r.States[0].End, tc.wantPeriod, tc.next)
			}
			c.Set(tc.next)
			if r, ok := spend(t, l, log, bs, call("researcher", "user:bob")); !ok || r.States[0].Used != 0 {
				t.Fatalf("first call of the next period: %v %+v", ok, r.States)
			}
		})
	}
}

// N goroutines cannot overspend a budget, and released reservations give units back.
func TestConcurrentReservations(t *testing.T) {
	log := openLog(t)
	l := New(log)
	bs := []Budget{{Name: "calls", Principal: "*", Unit: UnitToolCalls, Limit: 25, Per: "day"},
		{Name: "credits", Agent: "researcher", Unit: UnitCredits, Limit: 1000, Per: "day"}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for i := range 100 {
		wg.Go(func() {
			r, err := l.Reserve(context.Background(), bs, call("researcher", "user:bob"))
			if err != nil {
				t.Error(err)
				return
			}
			if r.Exhausted {
				r.Release()
				return
			}
			if i%2 == 0 { // half the allowed calls are then not allowed (say, by the policy)
				r.Release()
				r, err = l.Reserve(context.Background(), bs, call("researcher", "user:bob"))
				if err != nil || r.Exhausted {
					r.Release()
					return
				}
			}
			record(t, log, r.Charges())
			r.Commit()
			mu.Lock()
			allowed++
			mu.Unlock()
		})
	}
	wg.Wait()
	// Calls denied while others held reservations that were then released may leave units
	// unspent, never overspent; the rest can then be spent one by one.
	if allowed < 1 || allowed > 25 {
		t.Fatalf("allowed %d calls, want 1 to 25", allowed)
	}
	for allowed < 25 {
		if _, ok := spend(t, l, log, bs, call("researcher", "user:bob")); !ok {
			t.Fatalf("call %d of 25 denied", allowed+1)
		}
		allowed++
	}
	if _, ok := spend(t, l, log, bs, call("researcher", "user:bob")); ok {
		t.Fatal("call 26 of 25 allowed")
	}
	rows, err := log.BudgetUsage(context.Background(), decisionlog.BudgetFilter{Budget: "calls"})
	if err != nil || len(rows) != 1 || rows[0].Used != 25 {
		t.Errorf("stored usage %+v %v", rows, err)
	}
	// The usage is all committed: a fresh ledger over the store agrees.
	r, err := New(log).Reserve(context.Background(), bs, call("researcher", "user:bob"))
	if err != nil || !r.Exhausted || r.States[0].Used != 25 || r.States[1].Used != 25 {
		t.Errorf("a fresh ledger: %v %+v", err, r)
	}
}

// Usage charged by another process (a replica, a top-up) is seen once the ledger's copy is
// older than MaxAge.
func TestRefreshFromStore(t *testing.T) {
	log := openLog(t)
	c := &clock{now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	l := New(log, Clock(c.Now), MaxAge(2*time.Second))
	bs := []Budget{{Name: "calls", Agent: "researcher", Unit: UnitToolCalls, Limit: 3, Per: "day"}}
	period := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	if _, ok := spend(t, l, log, bs, call("researcher", "user:bob")); !ok {
		t.Fatal("first call denied")
	}
	// Another replica spends the other two.
	record(t, log, []decisionlog.Charge{{Budget: "calls", Subject: "researcher", Period: period, Used: 2}})
	c.Advance(time.Second)
	r, ok := spend(t, l, log, bs, call("researcher", "user:bob"))
	if !ok || r.States[0].Used != 1 {
		t.Fatalf("within MaxAge the ledger's own copy answers: %v %+v", ok, r.States)
	}
	c.Advance(2 * time.Second)
	if r, ok := spend(t, l, log, bs, call("researcher", "user:bob")); ok || r.States[0].Used != 4 {
		t.Fatalf("after MaxAge: %v %+v", ok, r.States)
	}
	// A top-up recorded elsewhere; Charged makes one of this process visible at once.
	grant := []decisionlog.Charge{{Budget: "calls", Subject: "researcher", Period: period, Granted: 2}}
	record(t, log, grant)
	l.Charged(grant)
	r, ok = spend(t, l, log, bs, call("researcher", "user:bob"))
	if !ok || r.States[0].Granted != 2 || r.States[0].Remaining != 1 {
		t.Fatalf("after a top-up: %v %+v", ok, r.States)
	}
	// Reading the store again does not count the top-up twice.
	c.Advance(3 * time.Second)
	if r, ok := spend(t, l, log, bs, call("researcher", "user:bob")); ok || r.States[0].Used != 5 || r.States[0].Granted != 2 {
		t.Fatalf("after the next read: %v %+v", ok, r.States)
	}
}

// Token budgets are checked (something must remain), never reserved; an invocation's tokens
// are charged to the token budgets that applied to it.
func TestTokens(t *testing.T) {
	log := openLog(t)
	l := New(log)
	bs := []Budget{{Name: "tokens", Agent: "researcher", Unit: UnitTokens, Limit: 100, Per: "day"},
		{Name: "calls", Agent: "coder", Unit: UnitToolCalls, Limit: 100, Per: "day"}}
	invoke := Call{Action: authz.ActionAgentInvoke, Agent: "researcher", Principal: "user:bob"}
	r, err := l.Reserve(context.Background(), bs, invoke)
	if err != nil || r.Exhausted || len(r.States) != 1 || len(r.Charges()) != 0 {
		t.Fatalf("invoke: %v %+v", err, r)
	}
	r.Commit()
	charges := r.Tokens(150)
	if len(charges) != 1 || charges[0].Used != 150 || charges[0].Subject != "researcher" {
		t.Fatalf("token charges %+v", charges)
	}
	record(t, log, charges)
	l.Charged(charges)
	r, err = l.Reserve(context.Background(), bs, invoke)
	if err != nil || !r.Exhausted || r.States[0].Remaining != -50 {
		t.Fatalf("overrun budget: %v %+v", err, r)
	}
	if r, _ := l.Reserve(context.Background(), bs, call("researcher", "user:bob")); !r.Exhausted {
		t.Fatal("a tools/call of an agent whose token budget is exhausted is allowed")
	}
}

type failingStore struct{}

func (failingStore) BudgetUsage(context.Context, decisionlog.BudgetFilter) ([]decisionlog.BudgetUsage, error) {
	return nil, errors.New("database is locked")
}

// Budgets fail closed: usage that cannot be read is an error, not an empty budget.
func TestStoreFailure(t *testing.T) {
	l := New(failingStore{})
	bs := []Budget{{Name: "calls", Agent: "researcher", Unit: UnitToolCalls, Limit: 100, Per: "day"}}
	if _, err := l.Reserve(context.Background(), bs, call("researcher", "user:bob")); err == nil {
		t.Fatal("no error")
	}
	// Budgets that do not apply need no read.
	if r, err := l.Reserve(context.Background(), bs, call("coder", "user:bob")); err != nil || r != nil {
		t.Fatalf("unrelated call: %v %+v", err, r)
	}
}

func TestReport(t *testing.T) {
	log := openLog(t)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	bs := []Budget{{Name: "a", Agent: "researcher", Unit: UnitTokens, Limit: 100, Per: "day"},
		{Name: "g", Principal: "group:x", Unit: UnitToolCalls, Limit: 5, Per: "month"}}
	record(t, log, []decisionlog.Charge{{Budget: "g", Subject: "user:bob", Period: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), Used: 3, Granted: 1},
		{Budget: "g", Subject: "user:bob", Period: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), Used: 9}})
	got, err := Report(context.Background(), log, bs, now, "", "")
	if err != nil {
		t.Fatal(err)
	}
	want := "[a researcher 0/100 +0 =100 resets 2026-11-26T00:00:00Z g user:bob 3/5 +1 =3 resets 2026-12-01T00:00:00Z]"
	var parts []string
	for _, s := range got {
		parts = append(parts, fmt.Sprintf("%s %s %d/%d +%d =%d resets %s", s.Budget, s.Subject, s.Used, s.Limit, s.Granted, s.Remaining, s.Resets.Format(time.RFC3339)))
	}
	if fmt.Sprint(parts) != want {
		t.Errorf("report %v\nwant %s", parts, want)
	}
	if got, _ := Report(context.Background(), log, bs, now, "g", "user:carl"); len(got) != 0 {
		t.Errorf("unused subject: %+v", got)
	}
}
