package decisionlog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lush-agents/lush/test/pgtest"
)

// TestPostgresStore runs the shared store through what the SQLite one does: writes with group
// commit, the same refusals, the same queries, one chain per partition that Verify checks (and
// that tampering breaks), retention, and replicas writing at once.
func TestPostgresStore(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.Start(t)
	dsn := cluster.CreateDatabase(t, "audit")

	open := func(part string, opts ...Option) *Log {
		t.Helper()
		l, err := Open(ctx, dsn, append([]Option{Partition(part), CheckpointEvery(0)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// Two replicas with their own partitions and a third sharing gw-1 write concurrently.
	logs := []*Log{open("gw-1"), open("gw-2"), open("gw-1")}
	var wg sync.WaitGroup
	for n, l := range logs {
		wg.Go(func() {
			for i := range 40 {
				e := sampleEvent(fmt.Sprintf("r%d-%02d", n, i))
				e.Principal = fmt.Sprintf("user:u%d", i%4)
				if err := l.Record(ctx, e); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if err := l.Complete(ctx, &Completion{DecisionID: e.DecisionID, Status: StatusOK, TokensInput: 7}); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	l := logs[0]
	// Refusals fail only their own write.
	if err := l.Record(ctx, sampleEvent("r0-00")); err == nil || !strings.Contains(err.Error(), "already in the log") {
		t.Errorf("duplicate: %v", err)
	}
	if err := l.Complete(ctx, &Completion{DecisionID: "ghost", Status: StatusOK}); err == nil || !strings.Contains(err.Error(), "not in the log") {
		t.Errorf("completion without decision: %v", err)
	}
	if err := l.Complete(ctx, &Completion{DecisionID: "r0-00", Status: StatusOK}); err == nil || !strings.Contains(err.Error(), "already in the log") {
		t.Errorf("second completion: %v", err)
	}
	for _, tc := range []struct {
		f    Filter
		want int
	}{
		{Filter{Principal: "user:u1", Limit: 1000}, 30},
		{Filter{Group: "group:engineering", Limit: 1000}, 120},
		{Filter{Group: "user:u2", Limit: 1000}, 30},
		{Filter{Text: "q3.md", Limit: 1000}, 120},
		{Filter{Text: "nowhere", Limit: 1000}, 0},
		{Filter{DecisionID: "r1-0", Limit: 1000}, 10},
		{Filter{DecisionID: "r2-39"}, 1},
		{Filter{Since: time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC), Principal: "user:u0", Limit: 1000}, 30},
	} {
		recs, err := l.Query(ctx, tc.f)
		if err != nil || len(recs) != tc.want {
			t.Errorf("%+v: %d records, want %d (%v)", tc.f, len(recs), tc.want, err)
		}
	}
	recs, err := l.Query(ctx, Filter{DecisionID: "r0-03"})
	if err != nil || len(recs) != 1 || recs[0].Completion == nil || recs[0].Completion.TokensInput != 7 || recs[0].Event.Agent != "researcher" {
		t.Fatalf("record with completion: %+v %v", recs, err)
	}
	for _, l := range logs {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}

	r, err := OpenReader(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err := r.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || len(rep.Partitions) != 2 || rep.Partitions[0].Events != 80 || rep.Partitions[1].Events != 40 ||
		rep.Partitions[0].Completions != 28 || rep.Partitions[0].Uncovered != 0 {
		t.Fatalf("verify: %+v", rep)
	}

	// Retention and tampering, on the shared store.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("DELETE FROM lush_decisionlog.events WHERE decision_id = 'r1-05'"); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("delete: %v", err)
	}
	time.Sleep(10 * time.Millisecond)
	l = open("gw-2")
	rec, err := l.Retain(ctx, time.Now())
	if err != nil || rec == nil || rec.Events != 40 {
		t.Fatalf("retain: %+v %v", rec, err)
	}
	if err := l.Record(ctx, sampleEvent("after-retention")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if rep, err := r.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK || rep.Partitions[1].Retention == nil {
		t.Fatalf("verify after retention: %+v %v", rep, err)
	}
	if _, err := db.Exec(`ALTER TABLE lush_decisionlog.events DISABLE TRIGGER ALL;
UPDATE lush_decisionlog.events SET event = replace(event, 'q3.md', 'q9.md') WHERE decision_id = 'r2-07';
ALTER TABLE lush_decisionlog.events ENABLE TRIGGER ALL`); err != nil {
		t.Fatal(err)
	}
	rep, err = r.Verify(ctx, VerifyOptions{Partition: "gw-1"})
	if err != nil {
		t.Fatal(err)
	}
	if p := rep.Partitions[0].Problem; rep.OK || p == nil || p.DecisionID != "r2-07" || !strings.Contains(p.Reason, "altered") {
		t.Errorf("tampered event: %+v", p)
	}

	// The count bound: the transaction that takes the chain CheckpointEntries past the last
	// checkpoint signs its head; Close signs the rest.
	l = open("gw-3", CheckpointEntries(5))
	for i := range 12 {
		if err := l.Record(ctx, sampleEvent(fmt.Sprintf("r3-%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = r.Verify(ctx, VerifyOptions{Partition: "gw-3"})
	if p := rep.Partitions[0]; err != nil || !rep.OK || p.Checkpoints+p.Unsigned != 2 || p.LastCheckpoint == nil || p.LastCheckpoint.Pos != 10 || p.Uncovered != 2 {
		t.Errorf("the count bound: %+v %v", rep, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := r.Verify(ctx, VerifyOptions{Partition: "gw-3"}); err != nil || rep.Uncovered != 0 {
		t.Errorf("after Close: %+v %v", rep, err)
	}
}

func TestPostgresLocationNeverShowsPassword(t *testing.T) {
	_, err := Open(context.Background(), "postgres://lush:s3cr3t-pw@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err == nil {
		t.Fatal("opened an unreachable database")
	}
	if strings.Contains(err.Error(), "s3cr3t-pw") || !strings.Contains(err.Error(), "postgres://lush@127.0.0.1:1/none") {
		t.Errorf("error: %v", err)
	}
	if _, err := OpenReader("postgres://%zz"); err == nil || !strings.Contains(err.Error(), "does not parse") {
		t.Errorf("bad URL: %v", err)
	}
}

// BenchmarkRecordPostgres is BenchmarkRecord on the PostgreSQL store (a local cluster on
// loopback): 64 concurrent writers, one partition.
func BenchmarkRecordPostgres(b *testing.B) {
	ctx := context.Background()
	cluster := pgtest.Start(b)
	dsn := cluster.CreateDatabase(b, "bench")
	l, err := Open(ctx, dsn, Partition("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	template := sampleEvent("")
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				e := *template
				e.DecisionID = uuid.Must(uuid.NewV7()).String()
				if err := l.Record(ctx, &e); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}
