package decisionlog

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lush-agents/lush/test/pgtest"
)

var day = time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)

// testCharges runs the budget usage contract against a store: open(t) opens (and reopens) the
// same store. Charges of an event or completion are applied with it, summed per key; a
// refused event or completion charges nothing; an invalid charge is rejected with its entry;
// usage survives reopening; many writers charging at once lose nothing.
func testCharges(t *testing.T, open func(t *testing.T) *Log) {
	ctx := context.Background()
	l := open(t)
	usage := func(l *Log, f BudgetFilter) string {
		t.Helper()
		rows, err := l.BudgetUsage(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var parts []string
		for _, u := range rows {
			parts = append(parts, fmt.Sprintf("%s/%s/%s used %d granted %d", u.Budget, u.Subject, u.Period.Format(time.DateOnly), u.Used, u.Granted))
			if u.Updated.IsZero() {
				t.Errorf("%+v: updated not set", u)
			}
		}
		return strings.Join(parts, "; ")
	}
	e := sampleEvent("c-1")
	e.Charges = []Charge{{Budget: "calls", Subject: "researcher", Period: day, Used: 1}, {Budget: "calls", Subject: "researcher", Period: day, Used: 2},
		{Budget: "credits", Subject: "user:alice", Period: day, Used: 5}}
	if err := l.Record(ctx, e); err != nil {
		t.Fatal(err)
	}
	if got, want := usage(l, BudgetFilter{}), "calls/researcher/2026-11-25 used 3 granted 0; credits/user:alice/2026-11-25 used 5 granted 0"; got != want {
		t.Errorf("usage = %q, want %q", got, want)
	}
	// A duplicate decision is refused and charges nothing.
	if err := l.Record(ctx, e); err == nil {
		t.Fatal("duplicate recorded")
	}
	// A completion charges tokens; a refused completion charges nothing.
	if err := l.Complete(ctx, &Completion{DecisionID: "c-1", Status: StatusOK, TokensInput: 40, TokensOutput: 2,
		Charges: []Charge{{Budget: "tokens", Subject: "researcher", Period: day, Used: 42}}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, &Completion{DecisionID: "ghost", Status: StatusOK,
		Charges: []Charge{{Budget: "tokens", Subject: "researcher", Period: day, Used: 1000}}}); err == nil {
		t.Fatal("completion of a missing decision recorded")
	}
	// A top-up grants; another period is another row.
	top := sampleEvent("c-2")
	top.Charges = []Charge{{Budget: "calls", Subject: "researcher", Period: day, Granted: 10}, {Budget: "calls", Subject: "researcher", Period: day.AddDate(0, 0, 1), Used: 1}}
	if err := l.Record(ctx, top); err != nil {
		t.Fatal(err)
	}
	// Invalid charges are rejected with their entry.
	for _, c := range []Charge{{Subject: "x", Period: day, Used: 1}, {Budget: "b", Period: day, Used: 1}, {Budget: "b", Subject: "x", Used: 1},
		{Budget: "b", Subject: "x", Period: day, Used: -1}} {
		bad := sampleEvent("bad-" + c.Budget + c.Subject)
		bad.Charges = []Charge{c}
		if err := l.Record(ctx, bad); err == nil {
			t.Errorf("charge %+v accepted", c)
		}
	}
	// Many writers at once lose nothing.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 10 {
				e := sampleEvent(fmt.Sprintf("w%d-%d", i, j))
				e.Charges = []Charge{{Budget: "shared", Subject: "all", Period: day, Used: 1}}
				if err := l.Record(ctx, e); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	want := "calls/researcher/2026-11-25 used 3 granted 10; calls/researcher/2026-11-26 used 1 granted 0; credits/user:alice/2026-11-25 used 5 granted 0; " +
		"shared/all/2026-11-25 used 80 granted 0; tokens/researcher/2026-11-25 used 42 granted 0"
	if got := usage(l, BudgetFilter{}); got != want {
		t.Errorf("usage = %q\nwant %q", got, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Durable: a new process sees the same usage, and filters select it.
	l = open(t)
	defer l.Close()
	if got := usage(l, BudgetFilter{}); got != want {
		t.Errorf("after reopening: usage = %q\nwant %q", got, want)
	}
	for _, tc := range []struct {
		f    BudgetFilter
		want string
	}{
		{BudgetFilter{Budget: "calls", Period: day}, "calls/researcher/2026-11-25 used 3 granted 10"},
		{BudgetFilter{Budget: "calls", Since: day.AddDate(0, 0, 1)}, "calls/researcher/2026-11-26 used 1 granted 0"},
		{BudgetFilter{Subject: "user:alice"}, "credits/user:alice/2026-11-25 used 5 granted 0"},
		{BudgetFilter{Budget: "nothing"}, ""},
	} {
		if got := usage(l, tc.f); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.f, got, tc.want)
		}
	}
	// The event document does not carry the charges, and the chain still verifies.
	recs, err := l.Query(ctx, Filter{DecisionID: "c-1"})
	if err != nil || len(recs) != 1 || recs[0].Event.Charges != nil {
		t.Fatalf("query: %v %+v", err, recs)
	}
	rep, err := l.Reader().Verify(ctx, VerifyOptions{})
	if err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}

func TestChargesSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db")
	testCharges(t, func(t *testing.T) *Log {
		l, err := Open(context.Background(), path, CheckpointEvery(0))
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

func TestChargesPostgres(t *testing.T) {
	cluster := pgtest.Start(t)
	dsn := cluster.CreateDatabase(t, "budgets")
	testCharges(t, func(t *testing.T) *Log {
		l, err := Open(context.Background(), dsn, Partition("gw-1"), CheckpointEvery(0))
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}
