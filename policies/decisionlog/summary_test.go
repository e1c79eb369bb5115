package decisionlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/test/pgtest"
)

// bothStores opens a new log in SQLite or in PostgreSQL (a throwaway cluster), with checkpoints
// only when asked for.
func bothStores(ctx context.Context) map[string]func(t *testing.T) *Log {
	return map[string]func(t *testing.T) *Log{
		"sqlite": func(t *testing.T) *Log { return openLog(t, CheckpointEvery(0)) },
		"postgres": func(t *testing.T) *Log {
			dsn := pgtest.Start(t).CreateDatabase(t, "summary")
			l, err := Open(ctx, dsn, CheckpointEvery(0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		},
	}
}

// TestSummarize: the overview's counts, by the store, in SQLite and PostgreSQL alike: per bucket
// and outcome, live writes, the most denied tools, principals and rules, the revisions that
// decided; the window's bounds are half-open and the bucket count is bounded.
func TestSummarize(t *testing.T) {
	ctx := context.Background()
	stores := bothStores(ctx)
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	type call struct {
		min             int // minutes after t0
		outcome, access string
		principal, tool string
		rules           []string // the rules of the result's reasons
		revision        string
		nullReasons     bool
	}
	calls := []call{
		{0, "allow", "read", "user:alice", "search", nil, "rev1", false},
		{1, "allow", "write", "user:alice", "post", nil, "rev1", false},
		{2, "deny", "read", "user:dave", "search", []string{"lush.privilege.no_grant"}, "rev1", false},
		{11, "deny", "write", "user:dave", "post", []string{"lush.privilege.no_grant", "corp.no_posts"}, "rev2", false},
		{12, "deny", "read", "user:erin", "search", []string{"lush.privilege.no_grant"}, "rev2", false},
		{13, "stub", "write", "user:alice", "post", nil, "rev2", false},
		{25, "error", "write", "user:alice", "post", nil, "rev2", true},
		{26, "approval_required", "write", "user:alice", "post", nil, "rev2", false},
		{30, "allow", "read", "user:alice", "search", nil, "rev2", false}, // at until: outside
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			l := open(t)
			for i, c := range calls {
				e := sampleEvent(fmt.Sprintf("d%02d", i))
				e.Timestamp = t0.Add(time.Duration(c.min) * time.Minute)
				e.Outcome, e.Access, e.Principal, e.ToolName, e.Revision = c.outcome, c.access, c.principal, c.tool, c.revision
				reasons := []authz.Reason{}
				for _, r := range c.rules {
					reasons = append(reasons, authz.Reason{Rule: r, Message: "no"})
				}
				res, _ := json.Marshal(map[string]any{"outcome": c.outcome, "reasons": reasons})
				if c.nullReasons {
					res = json.RawMessage(`{"outcome":"error","reasons":null}`)
				}
				e.Result = res
				if err := l.Record(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			s, err := l.Summarize(ctx, SummaryFilter{Since: t0, Until: t0.Add(30 * time.Minute), Bucket: 10 * time.Minute, Top: 5})
			if err != nil {
				t.Fatal(err)
			}
			want := []map[string]int64{
				{"allow": 2, "deny": 1, "stub": 0, "approval_required": 0, "error": 0},
				{"allow": 0, "deny": 2, "stub": 1, "approval_required": 0, "error": 0},
				{"allow": 0, "deny": 0, "stub": 0, "approval_required": 1, "error": 1},
			}
			if len(s.Buckets) != 3 {
				t.Fatalf("%d buckets, want 3: %+v", len(s.Buckets), s.Buckets)
			}
			for i, b := range s.Buckets {
				if !b.Start.Equal(t0.Add(time.Duration(i) * 10 * time.Minute)) {
					t.Errorf("bucket %d starts %s", i, b.Start)
				}
				if fmt.Sprint(b.Counts) != fmt.Sprint(want[i]) {
					t.Errorf("bucket %d: %v, want %v", i, b.Counts, want[i])
				}
			}
			if got := fmt.Sprint(s.Totals); got != fmt.Sprint(map[string]int64{"allow": 2, "deny": 3, "stub": 1, "approval_required": 1, "error": 1}) {
				t.Errorf("totals %s", got)
			}
			if s.LiveWrites != 1 {
				t.Errorf("live writes %d, want 1", s.LiveWrites)
			}
			counts := func(cs []Count) string {
				out := ""
				for _, c := range cs {
					out += fmt.Sprintf("%s=%d;", c.Key, c.Count)
				}
				return out
			}
			tool := sampleEvent("x").Tool
			for _, tc := range []struct {
				name string
				got  []Count
				want string
			}{
				{"denied tools", s.TopDeniedTools, tool + " (search)=2;" + tool + " (post)=1;"},
				{"denied principals", s.TopDeniedPrincipals, "user:dave=2;user:erin=1;"},
				{"denied rules", s.TopDeniedRules, "lush.privilege.no_grant=3;corp.no_posts=1;"},
				{"live-write tools", s.TopLiveWriteTools, tool + " (post)=1;"},
			} {
				if got := counts(tc.got); got != tc.want {
					t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
				}
			}
			if len(s.Revisions) != 2 || s.Revisions[0].Revision != "rev1" || s.Revisions[0].Decisions != 3 ||
				!s.Revisions[1].First.Equal(t0.Add(11*time.Minute)) || !s.Revisions[1].Last.Equal(t0.Add(26*time.Minute)) {
				t.Errorf("revisions %+v", s.Revisions)
			}
			// Top 1 cuts the lists.
			s, err = l.Summarize(ctx, SummaryFilter{Since: t0, Until: t0.Add(30 * time.Minute), Bucket: 10 * time.Minute, Top: 1})
			if err != nil || len(s.TopDeniedRules) != 1 || len(s.TopDeniedTools) != 1 {
				t.Errorf("top 1: %+v %v", s, err)
			}
		})
	}
}

func TestSummarizeRefuses(t *testing.T) {
	l := openLog(t)
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		f    SummaryFilter
		want string
	}{
		{SummaryFilter{Until: t0, Bucket: time.Minute}, "needs both since and until"},
		{SummaryFilter{Since: t0, Until: t0, Bucket: time.Minute}, "must be before until"},
		{SummaryFilter{Since: t0, Until: t0.Add(time.Hour)}, "positive duration"},
		{SummaryFilter{Since: t0, Until: t0.Add(time.Hour), Bucket: time.Minute, Top: MaxSummaryTop + 1}, "top must be"},
		{SummaryFilter{Since: t0, Until: t0.Add(MaxSummaryBuckets*time.Minute + 1), Bucket: time.Minute}, "501 buckets"},
	}
	for _, tc := range tests {
		_, err := l.Summarize(context.Background(), tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.f, err, tc.want)
		}
	}
	_, err := l.Summarize(context.Background(), SummaryFilter{Since: t0, Until: t0.Add(time.Hour), Bucket: time.Second})
	if !errors.Is(err, ErrTooManyBuckets) {
		t.Errorf("3600 buckets: %v", err)
	}
}

// TestChainPositionAndHealth: a decision's place in the chain (its neighbours, its completion, the
// checkpoint that covers it) and the partition's head, last checkpoint and unprotected tail.
func TestChainPositionAndHealth(t *testing.T) {
	ctx := context.Background()
	for name, open := range bothStores(ctx) {
		t.Run(name, func(t *testing.T) {
			l := open(t)
			for _, id := range []string{"a", "b"} {
				if err := l.Record(ctx, sampleEvent(id)); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Complete(ctx, &Completion{DecisionID: "a", Status: StatusOK}); err != nil {
				t.Fatal(err)
			}
			ck, err := l.Checkpoint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Record(ctx, sampleEvent("c")); err != nil {
				t.Fatal(err)
			}
			p, err := l.ChainPosition(ctx, "b")
			if err != nil {
				t.Fatal(err)
			}
			if p.Partition == "" || p.Entry.Pos != 2 || p.Previous == nil || p.Previous.DecisionID != "a" || p.Previous.Kind != KindEvent ||
				p.Next == nil || p.Next.Kind != KindCompletion || p.Next.DecisionID != "a" || p.Completion != nil ||
				p.Checkpoint == nil || p.Checkpoint.Pos != ck.Pos || len(p.Entry.Hash) != 64 {
				t.Errorf("position of b: %+v", p)
			}
			p, err = l.ChainPosition(ctx, "a")
			if err != nil || p.Previous != nil || p.Completion == nil || p.Completion.Pos != 3 {
				t.Errorf("position of a: %+v %v", p, err)
			}
			p, err = l.ChainPosition(ctx, "c")
			if err != nil || p.Checkpoint != nil || p.Next != nil || p.Previous == nil || p.Previous.Kind != KindCompletion {
				t.Errorf("position of c (after the checkpoint): %+v %v", p, err)
			}
			if p, err := l.ChainPosition(ctx, "zz"); p != nil || err != nil {
				t.Errorf("unknown decision: %+v %v", p, err)
			}
			h, err := l.Health(ctx)
			if err != nil || len(h) != 1 || h[0].Head != 4 || h[0].LastCheckpoint == nil || h[0].LastCheckpoint.Pos != 3 || h[0].Unprotected != 1 {
				t.Errorf("health: %+v %v", h, err)
			}
		})
	}
}

// BenchmarkSummarize: the overview of a day of 20,000 decisions (a tenth denied) in 48 buckets,
// on SQLite.
func BenchmarkSummarize(b *testing.B) {
	ctx := context.Background()
	l := openLog(b, CheckpointEvery(0))
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	const n = 20000
	for i := range n {
		e := sampleEvent(fmt.Sprintf("b%05d", i))
		e.Timestamp = t0.Add(time.Duration(i) * 24 * time.Hour / n)
		e.Principal = fmt.Sprintf("user:u%d", i%50)
		if i%10 == 0 {
			e.Outcome = authz.OutcomeDeny
			e.Result = json.RawMessage(`{"outcome":"deny","reasons":[{"rule":"lush.privilege.no_grant","message":"no"}]}`)
		}
		if err := l.Record(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	f := SummaryFilter{Since: t0, Until: t0.Add(24 * time.Hour), Bucket: 30 * time.Minute}
	b.ResetTimer()
	for b.Loop() {
		s, err := l.Summarize(ctx, f)
		if err != nil || s.Totals["deny"] != n/10 {
			b.Fatalf("%v %v", s.Totals, err)
		}
	}
}
