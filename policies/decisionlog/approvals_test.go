package decisionlog

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lush-agents/lush/test/pgtest"
)

// TestApprovals runs the approvals store through its lifecycle on both stores: pending,
// decided once, consumed by exactly one call, expired, and kept across a reopen.
func TestApprovals(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"sqlite": func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "decisions.db")
			l, err := Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			return path
		},
		"postgres": func(t *testing.T) string {
			dsn := pgtest.Start(t).CreateDatabase(t, "approvals")
			l, err := Open(context.Background(), dsn, CheckpointEvery(0))
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			return dsn
		},
	}
	for name, create := range stores {
		t.Run(name, func(t *testing.T) {
			testApprovals(t, create(t))
		})
	}
}

func testApprovals(t *testing.T, location string) {
	ctx := context.Background()
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	open := func() *Approvals {
		t.Helper()
		a, err := OpenApprovals(location)
		if err != nil {
			t.Fatal(err)
		}
		a.now = func() time.Time { return *clock.Load() }
		t.Cleanup(func() { a.Close() })
		return a
	}
	a := open()
	pending := func(id, digest string) Approval {
		return Approval{ID: id, Created: now, Expires: now.Add(time.Hour), Digest: digest, Principal: "user:alice", Agent: "ops",
			Tool: "tools/shell", Reasons: []byte(`[{"rule":"lush.approval.risk","message":"destructive"}]`)}
	}
	for _, ap := range []Approval{pending("a1", "d1"), pending("a2", "d2"), pending("a3", "d3")} {
		if err := a.Create(ctx, ap); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Create(ctx, pending("a1", "d1")); err == nil {
		t.Error("an approval id was recorded twice")
	}
	if err := a.Create(ctx, Approval{ID: "x", Digest: "d", Created: now, Expires: now}); err == nil {
		t.Error("an approval that expires when it is made was accepted")
	}

	got, err := a.Get(ctx, "a1")
	if err != nil || got.Status != ApprovalPending || got.Principal != "user:alice" || !got.Created.Equal(now) || string(got.Reasons) == "" {
		t.Fatalf("Get a1 = %+v, %v", got, err)
	}
	if _, err := a.Get(ctx, "nope"); !errors.Is(err, ErrNoApproval) {
		t.Errorf("Get of an unknown id: %v", err)
	}
	if p, ok, err := a.Pending(ctx, "d2"); err != nil || !ok || p.ID != "a2" {
		t.Errorf("Pending(d2) = %v %v %v", p.ID, ok, err)
	}

	// Decided once: the second decision is refused with the approval as it is.
	if ap, err := a.Decide(ctx, "a1", true, "user:sam", "looks fine", "dec-1"); err != nil || ap.Status != ApprovalApproved || ap.DecidedBy != "user:sam" || ap.Note != "looks fine" || ap.DecidedAt == nil {
		t.Fatalf("approve a1 = %+v, %v", ap, err)
	}
	var np *NotPendingError
	if _, err := a.Decide(ctx, "a1", false, "user:olga", "", "dec-2"); !errors.As(err, &np) || np.Approval.Status != ApprovalApproved {
		t.Errorf("deciding an approved approval: %v", err)
	}
	if _, err := a.Decide(ctx, "nope", true, "user:sam", "", "dec-3"); !errors.Is(err, ErrNoApproval) {
		t.Errorf("deciding an unknown approval: %v", err)
	}
	if ap, err := a.Decide(ctx, "a2", false, "user:sam", "not today", "dec-4"); err != nil || ap.Status != ApprovalDenied {
		t.Errorf("deny a2 = %+v, %v", ap, err)
	}
	if _, ok, _ := a.Pending(ctx, "d2"); ok {
		t.Error("a denied approval is still pending")
	}

	// One approval, one call: of concurrent consumers exactly one wins.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			ap, ok, err := a.ConsumeApproved(ctx, "d1", fmt.Sprintf("call-%d", i))
			if err != nil {
				t.Error(err)
			}
			if ok {
				wins.Add(1)
				if ap.ID != "a1" || ap.Status != ApprovalConsumed {
					t.Errorf("consumed %+v", ap)
				}
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d calls ran under one approval", wins.Load())
	}
	if _, ok, _ := a.ConsumeApproved(ctx, "d2", "call-x"); ok {
		t.Error("a denied approval was used")
	}
	if ok, _ := a.Consume(ctx, "a1", "call-y"); ok {
		t.Error("a consumed approval was used again")
	}

	// An approval approved but never used expires like a pending one.
	if err := a.Create(ctx, pending("a4", "d4")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Decide(ctx, "a4", true, "user:sam", "", "dec-6"); err != nil {
		t.Fatal(err)
	}

	// Expiry: past it, a pending approval reads as expired, cannot be decided, and Expire records it.
	later := now.Add(2 * time.Hour)
	clock.Store(&later)
	if ap, _ := a.Get(ctx, "a4"); ap.Status != ApprovalExpired {
		t.Errorf("an unused approval past its expiry reads %s", ap.Status)
	}
	if _, ok, _ := a.ConsumeApproved(ctx, "d4", "call-late"); ok {
		t.Error("an expired approval was used")
	}
	if ap, _ := a.Get(ctx, "a3"); ap.Status != ApprovalExpired {
		t.Errorf("a3 past its expiry reads %s", ap.Status)
	}
	if _, err := a.Decide(ctx, "a3", true, "user:sam", "", "dec-5"); !errors.As(err, &np) || np.Approval.Status != ApprovalExpired {
		t.Errorf("deciding an expired approval: %v", err)
	}
	if ap, err := a.Expire(ctx, "a3"); err != nil || ap.Status != ApprovalExpired {
		t.Errorf("Expire a3 = %+v, %v", ap, err)
	}
	if ap, err := a.Expire(ctx, "a4"); err != nil || ap.Status != ApprovalExpired {
		t.Errorf("Expire a4 = %+v, %v", ap, err)
	}
	for status, want := range map[string][]string{"": {"a4", "a3", "a2", "a1"}, ApprovalPending: nil, ApprovalApproved: nil,
		ApprovalExpired: {"a4", "a3"}, ApprovalDenied: {"a2"}, ApprovalConsumed: {"a1"}} {
		list, err := a.List(ctx, ApprovalFilter{Status: status})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, ap := range list {
			ids = append(ids, ap.ID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Errorf("List(%q) = %v, want %v", status, ids, want)
		}
	}
	if _, err := a.List(ctx, ApprovalFilter{Status: "maybe"}); err == nil {
		t.Error("an unknown status was listed")
	}

	// Kept across a reopen (a gateway restart).
	a.Close()
	b := open()
	if ap, err := b.Get(ctx, "a1"); err != nil || ap.Status != ApprovalConsumed || ap.UsedBy == "" || ap.Decision != "dec-1" {
		t.Errorf("after reopening: %+v, %v", ap, err)
	}
}

// TestPostgresUpgradeToVersion4 opens a PostgreSQL log made by the previous version (schema 3):
// the approvals and budget tables are added.
func TestPostgresUpgradeToVersion4(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t).CreateDatabase(t, "upgrade")
	db, _, err := openPostgresDB(dsn, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA lush_decisionlog; CREATE TABLE lush_decisionlog.schema_version (version INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, pgTables+"; INSERT INTO lush_decisionlog.schema_version VALUES (3)"); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenApprovals(dsn); err == nil {
		t.Fatal("approvals opened on a version-3 log")
	}
	l, err := Open(ctx, dsn, CheckpointEvery(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := OpenApprovals(dsn)
	if err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
	a.Close()
	var v int
	if err := db.QueryRowContext(ctx, "SELECT max(version) FROM lush_decisionlog.schema_version").Scan(&v); err != nil || v != 4 {
		t.Errorf("schema version %d, %v", v, err)
	}
	if _, err := db.ExecContext(ctx, "SELECT used, granted FROM lush_decisionlog.budget_usage"); err != nil {
		t.Errorf("budget_usage: %v", err)
	}
}
