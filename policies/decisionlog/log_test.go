package decisionlog

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lush-agents/lush/policies/authz"
)

func TestRoundTripEveryField(t *testing.T) {
	ctx := context.Background()
	l := openLog(t)
	want := sampleEvent(uuid.NewString())
	// Every field of Event must be set, so that a field added later without storage fails here.
	// (Charges are not part of the stored event: budgets_test.go covers them.)
	v := reflect.ValueOf(*want)
	for i := range v.NumField() {
		if name := v.Type().Field(i).Name; v.Field(i).IsZero() && name != "Error" && name != "Charges" {
			t.Fatalf("sampleEvent leaves %s unset", v.Type().Field(i).Name)
		}
	}
	errEvent := sampleEvent(uuid.NewString())
	errEvent.Outcome, errEvent.Error = authz.OutcomeError, "evaluation timed out"
	for _, e := range []*Event{want, errEvent} {
		before := *e
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(before, *e) {
			t.Error("Record modified the caller's event")
		}
	}
	completion := &Completion{DecisionID: want.DecisionID, Timestamp: want.Timestamp.Add(3 * time.Millisecond), Status: StatusOK,
		LatencyNS: 2_500_000, Response: json.RawMessage(`{"content": [{"type": "text", "text": "wrote <b>q3.md</b>"}]}`), Error: "partial",
		TokensInput: 85, TokensOutput: 57}
	if err := l.Complete(ctx, completion); err != nil {
		t.Fatal(err)
	}
	recs, err := l.Query(ctx, Filter{DecisionID: want.DecisionID})
	if err != nil || len(recs) != 1 {
		t.Fatalf("query: %v %v", recs, err)
	}
	got := recs[0]
	if !reflect.DeepEqual(got.Event, *want) {
		gj, _ := json.Marshal(got.Event)
		wj, _ := json.Marshal(want)
		t.Errorf("event round trip:\n got %s\nwant %s", gj, wj)
	}
	wantC := *completion
	wantC.Response = json.RawMessage(`{"content":[{"type":"text","text":"wrote <b>q3.md</b>"}]}`) // compacted, not escaped
	if !reflect.DeepEqual(got.Completion, &wantC) {
		t.Errorf("completion round trip:\n got %+v\nwant %+v", got.Completion, wantC)
	}
	recs, err = l.Query(ctx, Filter{DecisionID: errEvent.DecisionID})
	if err != nil || len(recs) != 1 || !reflect.DeepEqual(recs[0].Event, *errEvent) || recs[0].Completion != nil {
		t.Errorf("error event: %+v %v", recs, err)
	}
	// The stored JSON is what the caller would grep for: no HTML escaping.
	raw := rawColumn(t, l.Path(), "SELECT event FROM events WHERE decision_id = ?", want.DecisionID)
	if !strings.Contains(raw, `"content":"<h1>Q3 & more</h1>"`) {
		t.Errorf("stored event is escaped: %s", raw)
	}
}

func TestDefaultsStampedInCopy(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("CET", 3600))
	l := openLog(t, Clock(func() time.Time { return at }))
	e := &Event{DecisionID: "d1", Outcome: authz.OutcomeDeny, Principal: "user:bob", Action: "tools/call"}
	if err := l.Record(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if !e.Timestamp.IsZero() || e.Path != "" {
		t.Errorf("caller's event changed: %+v", e)
	}
	if err := l.Complete(context.Background(), &Completion{DecisionID: "d1", Status: StatusCancelled}); err != nil {
		t.Fatal(err)
	}
	recs, err := l.Query(context.Background(), Filter{})
	if err != nil || len(recs) != 1 {
		t.Fatal(recs, err)
	}
	got := recs[0]
	if !got.Event.Timestamp.Equal(at) || got.Event.Timestamp.Location() != time.UTC || got.Event.Path != DefaultPath {
		t.Errorf("defaults: timestamp %v, path %q", got.Event.Timestamp, got.Event.Path)
	}
	if !got.Completion.Timestamp.Equal(at) {
		t.Errorf("completion timestamp %v", got.Completion.Timestamp)
	}
	if got.Seq != 1 {
		t.Errorf("seq = %d", got.Seq)
	}
}

func TestConcurrentRecords(t *testing.T) {
	const writers, each = 64, 40
	ctx := context.Background()
	l := openLog(t)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e := sampleEvent(fmt.Sprintf("w%02d-%03d", w, i))
				if err := l.Record(ctx, e); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	recs, err := l.Query(ctx, Filter{Limit: MaxLimit, Oldest: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != writers*each {
		t.Fatalf("%d events logged, want %d", len(recs), writers*each)
	}
	seqs := map[int64]bool{}
	ids := map[string]bool{}
	for i, r := range recs {
		if seqs[r.Seq] || ids[r.Event.DecisionID] {
			t.Fatalf("duplicate seq %d or id %s", r.Seq, r.Event.DecisionID)
		}
		seqs[r.Seq], ids[r.Event.DecisionID] = true, true
		if i > 0 && r.Seq <= recs[i-1].Seq {
			t.Fatalf("seq not increasing at %d", i)
		}
	}
	// Each writer's events were committed in the order it recorded them.
	last := map[string]int64{}
	for _, r := range recs {
		w := r.Event.DecisionID[:3]
		if r.Seq < last[w] {
			t.Fatalf("writer %s's events out of order", w)
		}
		last[w] = r.Seq
	}
	if st := l.Stats(); st != (Stats{Written: writers * each}) {
		t.Errorf("stats = %+v", st)
	}
}

// TestRecordReturnsAfterCommit: a reader opened separately (as lushctl would be) sees every event
// as soon as Record returns.
func TestRecordReturnsAfterCommit(t *testing.T) {
	ctx := context.Background()
	l := openLog(t)
	r, err := OpenReader(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				id := fmt.Sprintf("vis-%d-%d", w, i)
				if err := l.Record(ctx, sampleEvent(id)); err != nil {
					t.Error(err)
					return
				}
				recs, err := r.Query(ctx, Filter{DecisionID: id})
				if err != nil || len(recs) != 1 {
					t.Errorf("%s not visible after Record returned: %v %v", id, recs, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// lockDB holds SQLite's write lock on path from another connection, as another process would,
// until the returned function is called.
func lockDB(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := openDB(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
				t.Error(err)
			}
			conn.Close()
			db.Close()
		})
	}
	t.Cleanup(release)
	return release
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBackpressure(t *testing.T) {
	ctx := context.Background()
	l := openLog(t, QueueSize(2))
	release := lockDB(t, l.Path())
	results := make(chan error, 3)
	record := func(id string) { results <- l.Record(ctx, sampleEvent(id)) }
	go record("a")
	// The writer takes a and blocks on the lock; b and c fill the queue.
	waitFor(t, "the writer to take a", func() bool { return l.Stats().Queued == 1 && len(l.queue) == 0 })
	go record("b")
	go record("c")
	waitFor(t, "a full queue", func() bool { return len(l.queue) == 2 })
	start := time.Now()
	err := l.Record(ctx, sampleEvent("d"))
	if !errors.Is(err, ErrBackpressure) {
		t.Fatalf("full queue: %v", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("a full queue took %s to refuse", d)
	}
	if err := l.Complete(ctx, &Completion{DecisionID: "a", Status: StatusOK}); !errors.Is(err, ErrBackpressure) {
		t.Errorf("complete on a full queue: %v", err)
	}
	if st := l.Stats(); st.Rejected != 2 || st.Queued != 3 || st.Written != 0 {
		t.Errorf("stats while blocked: %+v", st)
	}
	release()
	for range 3 {
		if err := <-results; err != nil {
			t.Errorf("queued record: %v", err)
		}
	}
	recs, err := l.Query(ctx, Filter{Oldest: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Event.DecisionID)
	}
	if len(ids) != 3 || ids[0] != "a" {
		t.Errorf("logged %v, want a, then b and c", ids)
	}
	if st := l.Stats(); st != (Stats{Written: 3, Rejected: 2}) {
		t.Errorf("stats = %+v", st)
	}
}

// TestRecordContextEnds: a caller whose context ends stops waiting (and must deny); the queued
// event is still committed, never half-written.
func TestRecordContextEnds(t *testing.T) {
	l := openLog(t)
	release := lockDB(t, l.Path())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := l.Record(ctx, sampleEvent("slow"))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "not known to be committed") {
		t.Fatalf("got %v", err)
	}
	release()
	waitFor(t, "the queued event to commit", func() bool { return l.Stats() == Stats{Written: 1} })
	if recs, err := l.Query(context.Background(), Filter{DecisionID: "slow"}); err != nil || len(recs) != 1 {
		t.Errorf("%v %v", recs, err)
	}
}

func TestUnwritableDatabase(t *testing.T) {
	ctx := context.Background()
	t.Run("disk full", func(t *testing.T) {
		var conn *sql.Conn
		capture := func(c *config) error {
			c.onConn = func(ctx context.Context, cn *sql.Conn) error {
				conn = cn
				var pages int
				if err := cn.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
					return err
				}
				_, err := cn.ExecContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages+8))
				return err
			}
			return nil
		}
		l := openLog(t, capture)
		var err error
		var n int
		for n = 0; n < 200 && err == nil; n++ {
			err = l.Record(ctx, sampleEvent(fmt.Sprintf("full-%d", n)))
		}
		if err == nil || !strings.Contains(err.Error(), "full") {
			t.Fatalf("after %d events: %v", n, err)
		}
		st := l.Stats()
		if st.Failed != 1 || st.Written != int64(n-1) {
			t.Errorf("stats = %+v after %d records", st, n)
		}
		// The failed event is not in the log; once there is room again, writes succeed.
		if recs, _ := l.Query(ctx, Filter{DecisionID: fmt.Sprintf("full-%d", n-1)}); len(recs) != 0 {
			t.Error("failed event was logged")
		}
		if _, err := conn.ExecContext(ctx, "PRAGMA max_page_count = 1000000"); err != nil {
			t.Fatal(err)
		}
		if err := l.Record(ctx, sampleEvent("after")); err != nil {
			t.Errorf("after freeing space: %v", err)
		}
	})
	t.Run("locked by another process", func(t *testing.T) {
		l := openLog(t, func(c *config) error { c.busyTimeout = 50 * time.Millisecond; return nil })
		release := lockDB(t, l.Path())
		err := l.Record(ctx, sampleEvent("locked"))
		if err == nil || !strings.Contains(err.Error(), "locked") {
			t.Fatalf("locked: %v", err)
		}
		if st := l.Stats(); st.Failed != 1 || st.Written != 0 {
			t.Errorf("stats = %+v", st)
		}
		release()
		if err := l.Record(ctx, sampleEvent("locked")); err != nil {
			t.Errorf("after the lock is released: %v", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		l := openLog(t)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := l.Record(ctx, sampleEvent("late")); !errors.Is(err, ErrClosed) {
			t.Errorf("record after close: %v", err)
		}
		if err := l.Complete(ctx, &Completion{DecisionID: "late", Status: StatusOK}); !errors.Is(err, ErrClosed) {
			t.Errorf("complete after close: %v", err)
		}
		if st := l.Stats(); st.Rejected != 2 {
			t.Errorf("stats = %+v", st)
		}
		if err := l.Close(); err != nil {
			t.Errorf("second close: %v", err)
		}
	})
	t.Run("read-only directory", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root ignores file permissions")
		}
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o700)
		if _, err := Open(ctx, filepath.Join(dir, "decisions.db")); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("open in a read-only directory: %v", err)
		}
	})
	t.Run("file made read-only after open", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root ignores file permissions")
		}
		path := filepath.Join(t.TempDir(), "decisions.db")
		l, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Record(ctx, sampleEvent("before")); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o400); err != nil {
			t.Fatal(err)
		}
		if l, err := Open(ctx, path); err == nil {
			l.Close()
			t.Error("opened a read-only log for writing")
		}
	})
	t.Run("parent is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(ctx, filepath.Join(file, "decisions.db"))
		if err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("open under a file: %v", err)
		}
	})
}

func TestCloseDrainsQueue(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "decisions.db")
	l, err := Open(ctx, path, QueueSize(100))
	if err != nil {
		t.Fatal(err)
	}
	release := lockDB(t, path)
	const n = 50
	results := make(chan error, n)
	for i := range n {
		go func() { results <- l.Record(ctx, sampleEvent(fmt.Sprintf("drain-%02d", i))) }()
	}
	waitFor(t, "all records queued", func() bool { return l.Stats().Queued == n })
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	waitFor(t, "Close to stop accepting", func() bool {
		l.mu.RLock()
		defer l.mu.RUnlock()
		return l.closed
	})
	if err := l.Record(ctx, sampleEvent("too-late")); !errors.Is(err, ErrClosed) {
		t.Errorf("record while closing: %v", err)
	}
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-results; err != nil {
			t.Errorf("queued record: %v", err)
		}
	}
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := r.Query(ctx, Filter{})
	if err != nil || len(recs) != n {
		t.Errorf("%d events after Close, want %d (%v)", len(recs), n, err)
	}
	r.Close()
	noLeaks(t)
}

func TestNoGoroutinesAfterClose(t *testing.T) {
	for range 3 {
		l, err := Open(context.Background(), filepath.Join(t.TempDir(), "decisions.db"))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Record(context.Background(), sampleEvent(uuid.NewString())); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	noLeaks(t)
}

func TestConstraintFailsOnlyItsWrite(t *testing.T) {
	ctx := context.Background()
	l := openLog(t)
	if err := l.Record(ctx, sampleEvent("dup")); err != nil {
		t.Fatal(err)
	}
	// Queue a batch that mixes good writes with a duplicate decision, a completion of an unknown
	// decision and a second completion: only the bad ones fail.
	release := lockDB(t, l.Path())
	type write struct {
		name string
		do   func() error
		want string
	}
	writes := []write{
		{"good-1", func() error { return l.Record(ctx, sampleEvent("good-1")) }, ""},
		{"duplicate", func() error { return l.Record(ctx, sampleEvent("dup")) }, "decision_id is already in the log"},
		{"complete dup", func() error { return l.Complete(ctx, &Completion{DecisionID: "dup", Status: StatusOK}) }, ""},
		{"complete unknown", func() error { return l.Complete(ctx, &Completion{DecisionID: "nope", Status: StatusOK}) }, "decision_id is not in the log"},
		{"complete twice", func() error { return l.Complete(ctx, &Completion{DecisionID: "dup", Status: StatusError}) }, "already in the log"},
		{"good-2", func() error { return l.Record(ctx, sampleEvent("good-2")) }, ""},
	}
	results := make([]chan error, len(writes))
	for i, w := range writes {
		results[i] = make(chan error, 1)
		go func() { results[i] <- w.do() }()
		// Queue them in order.
		waitFor(t, w.name+" queued", func() bool { return l.Stats().Queued == int64(i+1) })
	}
	release()
	for i, w := range writes {
		err := <-results[i]
		switch {
		case w.want == "" && err != nil:
			t.Errorf("%s: %v", w.name, err)
		case w.want != "" && (err == nil || !strings.Contains(err.Error(), w.want)):
			t.Errorf("%s: got %v, want %q", w.name, err, w.want)
		}
	}
	recs, err := l.Query(ctx, Filter{Oldest: true})
	if err != nil || len(recs) != 3 {
		t.Fatalf("%d events (%v)", len(recs), err)
	}
	if c := recs[0].Completion; c == nil || c.Status != StatusOK {
		t.Errorf("completion of dup = %+v", c)
	}
	if st := l.Stats(); st.Written != 4 || st.Failed != 3 {
		t.Errorf("stats = %+v", st)
	}
}

func TestInvalidWritesNameTheField(t *testing.T) {
	ctx := context.Background()
	l := openLog(t)
	const secret = "s3cr3t-Hunter2"
	bad := func(mod func(*Event)) *Event { e := sampleEvent("x"); mod(e); return e }
	events := []struct {
		e    *Event
		want string
	}{
		{nil, "event is nil"},
		{bad(func(e *Event) { e.DecisionID = "" }), "decision_id is empty"},
		{bad(func(e *Event) { e.DecisionID = strings.Repeat("x", 300) }), "decision_id is longer"},
		{bad(func(e *Event) { e.Outcome = "" }), `outcome must be one of`},
		{bad(func(e *Event) { e.Outcome = "maybe" }), `not "maybe"`},
		{bad(func(e *Event) { e.Input = json.RawMessage(`{"password": "` + secret + `"`) }), "input is not valid JSON"},
		{bad(func(e *Event) { e.Input = json.RawMessage(secret) }), "input is not valid JSON"},
		{bad(func(e *Event) { e.Result = json.RawMessage(`{`) }), "result is not valid JSON"},
		{bad(func(e *Event) { e.Timestamp = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }), "timestamp 3000-01-01T00:00:00Z is out of range"},
	}
	for _, tc := range events {
		err := l.Record(ctx, tc.e)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("error leaks the input: %v", err)
		}
	}
	completions := []struct {
		c    *Completion
		want string
	}{
		{nil, "completion is nil"},
		{&Completion{Status: StatusOK}, "decision_id is empty"},
		{&Completion{DecisionID: "x", Status: "done"}, `status must be one of [ok error timeout cancelled stubbed unavailable max_turns approved approval_denied approval_expired approval_pending], not "done"`},
		{&Completion{DecisionID: "x", Status: StatusOK, Response: json.RawMessage(secret)}, "response is not valid JSON"},
	}
	for _, tc := range completions {
		err := l.Complete(ctx, tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("error leaks the response: %v", err)
		}
	}
	if st := l.Stats(); st.Rejected != int64(len(events)+len(completions)) || st.Written != 0 || st.Failed != 0 {
		t.Errorf("stats = %+v", st)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Record(cancelled, sampleEvent("c")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}

func TestOpenOptions(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{BatchSize(0), "BatchSize must be at least 1"},
		{BatchDelay(-time.Second), "BatchDelay must not be negative"},
		{QueueSize(0), "QueueSize must be at least 1"},
		{Synchronous("off"), `Synchronous must be "normal" or "full", not "off"`},
		{Clock(nil), "Clock must not be nil"},
	} {
		if _, err := Open(context.Background(), filepath.Join(dir, "x.db"), tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	if _, err := Open(context.Background(), ""); err == nil || !strings.Contains(err.Error(), "path is empty") {
		t.Errorf("empty path: %v", err)
	}
	for mode, want := range map[string]int{"normal": 1, "FULL": 2} {
		var got int
		check := func(c *config) error {
			c.onConn = func(ctx context.Context, cn *sql.Conn) error {
				return cn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&got)
			}
			return nil
		}
		l := openLog(t, Synchronous(mode), BatchSize(1), BatchDelay(0), check)
		if got != want {
			t.Errorf("Synchronous(%q): PRAGMA synchronous = %d, want %d", mode, got, want)
		}
		if err := l.Record(context.Background(), sampleEvent("s")); err != nil {
			t.Error(err)
		}
	}
}

func TestReopenAndSchemaVersion(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a?b#c %d", "decisions.db") // characters a URI must escape
	l, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, sampleEvent("one")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("log file mode %v, want 0600", info.Mode().Perm())
	}
	l, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, sampleEvent("two")); err != nil {
		t.Fatal(err)
	}
	recs, err := l.Query(ctx, Filter{})
	if err != nil || len(recs) != 2 || recs[0].Seq != 2 {
		t.Errorf("after reopen: %+v %v", recs, err)
	}
	l.Close()

	execRaw(t, path, "PRAGMA user_version = 99")
	if _, err := Open(ctx, path); err == nil || !strings.Contains(err.Error(), "schema version 99 is newer") {
		t.Errorf("newer schema: %v", err)
	}
	if _, err := OpenReader(path); err == nil || !strings.Contains(err.Error(), "schema version 99 is newer") {
		t.Errorf("reader, newer schema: %v", err)
	}
}

func TestAppendOnly(t *testing.T) {
	l := openLog(t)
	if err := l.Record(context.Background(), sampleEvent("a")); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(context.Background(), &Completion{DecisionID: "a", Status: StatusOK}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"UPDATE events SET outcome = 'allow'",
		"DELETE FROM events",
		"UPDATE completions SET status = 'error'",
		"DELETE FROM completions",
	} {
		if err := execRawErr(l.Path(), stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v", stmt, err)
		}
	}
}

// TestMaskedSecretNeverStored: the gateway's path (mask, then record) leaves no trace of a
// secret in the database files.
func TestMaskedSecretNeverStored(t *testing.T) {
	const secret = "ghp_TOPSECRETtoken0123456789"
	l := openLog(t)
	e := sampleEvent("masked")
	e.Erased, e.Masked = nil, nil
	e.Input = json.RawMessage(`{"action":"tools/call","arguments":{"token":"` + secret + `","password":"` + secret + `","path":"a"}}`)
	err := ApplyMask(e, []authz.MaskOp{
		{Op: "remove", Path: "/input/arguments/token"},
		{Op: "upsert", Path: "/input/arguments/password", Value: "**REDACTED**"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Record(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(l.Path() + "*")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("%s contains the secret", f)
		}
	}
	r, err := OpenReader(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Query(context.Background(), Filter{})
	if err != nil || len(recs) != 1 {
		t.Fatal(recs, err)
	}
	got := recs[0].Event
	if string(got.Input) != `{"action":"tools/call","arguments":{"password":"**REDACTED**","path":"a"}}` ||
		!reflect.DeepEqual(got.Erased, []string{"/input/arguments/token"}) || !reflect.DeepEqual(got.Masked, []string{"/input/arguments/password"}) {
		t.Errorf("stored %s erased %v masked %v", got.Input, got.Erased, got.Masked)
	}
}

func rawColumn(t *testing.T, path, query string, args ...any) string {
	t.Helper()
	db, err := openDB(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var s string
	if err := db.QueryRow(query, args...).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func execRawErr(path, stmt string) error {
	db, err := openDB(path, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(stmt)
	return err
}

func execRaw(t *testing.T, path, stmt string) {
	t.Helper()
	if err := execRawErr(path, stmt); err != nil {
		t.Fatal(err)
	}
}

func TestCompleteAsync(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "decisions.db")
	l, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Record(ctx, sampleEvent("a")); err != nil {
		t.Fatal(err)
	}
	// While another connection holds the write lock, CompleteAsync returns at once; the
	// completion is committed after the lock is released, and Sync waits for it.
	release := lockDB(t, path)
	results := make(chan error, 3)
	if err := l.CompleteAsync(&Completion{DecisionID: "a", Status: StatusOK, LatencyNS: 7}, func(err error) { results <- err }); err != nil {
		t.Fatal(err)
	}
	// A completion that the database refuses reports its error through the callback.
	if err := l.CompleteAsync(&Completion{DecisionID: "missing", Status: StatusOK}, func(err error) { results <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-results:
		t.Fatalf("completion answered while the database is locked: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-results; err != nil {
		t.Errorf("first completion: %v", err)
	}
	if err := <-results; err == nil || !strings.Contains(err.Error(), "decision_id is not in the log") {
		t.Errorf("completion of an unknown decision: %v", err)
	}
	recs, err := l.Query(ctx, Filter{})
	if err != nil || len(recs) != 1 || recs[0].Completion == nil || recs[0].Completion.LatencyNS != 7 {
		t.Fatalf("records after Sync: %+v (%v)", recs, err)
	}
	if st := l.Stats(); st.Written != 2 || st.Failed != 1 || st.Queued != 0 {
		t.Errorf("stats %+v: want 2 written (event, completion), 1 failed, Sync not counted", st)
	}
	// Invalid completions are refused before the queue.
	if err := l.CompleteAsync(&Completion{DecisionID: "a", Status: "maybe"}, nil); err == nil || !strings.Contains(err.Error(), "status must be one of") {
		t.Errorf("invalid status: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.CompleteAsync(&Completion{DecisionID: "a", Status: StatusOK}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := l.Sync(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close: %v", err)
	}
}

// A log written by the previous schema (version 1, without token counts) is upgraded in place
// when opened: its events stay, and completions gain token counts.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := openDB(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, migrations[0]+"; PRAGMA user_version = 1"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	l, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("open a version-1 log: %v", err)
	}
	defer l.Close()
	e := sampleEvent(uuid.NewString())
	if err := l.Record(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, &Completion{DecisionID: e.DecisionID, Status: StatusOK, TokensInput: 12, TokensOutput: 3}); err != nil {
		t.Fatal(err)
	}
	recs, err := l.Query(ctx, Filter{DecisionID: e.DecisionID})
	if err != nil || len(recs) != 1 || recs[0].Completion == nil || recs[0].Completion.TokensInput != 12 || recs[0].Completion.TokensOutput != 3 {
		t.Fatalf("after the migration: %+v %v", recs, err)
	}
}

// Queued completions alone wait (CompletionDelay) for a write someone waits for, and commit in its
// transaction; nothing that waits ever waits for them: a decision, Sync and Close commit at once.
func TestCompletionDelay(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "decisions.db")
	l, err := Open(ctx, path, CompletionDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, id := range []string{"a", "b", "c"} {
		if err := l.Record(ctx, sampleEvent(id)); err != nil {
			t.Fatal(err)
		}
	}
	results := make(chan error, 3)
	then := func(err error) { results <- err }
	if err := l.CompleteAsync(&Completion{DecisionID: "a", Status: StatusOK}, then); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the writer has it, and waits
	if st := l.Stats(); st.Queued != 1 || st.Written != 3 {
		t.Fatalf("stats %+v: want the completion still queued", st)
	}
	// The next decision carries it: both are committed when Record returns.
	if err := l.Record(ctx, sampleEvent("d")); err != nil {
		t.Fatal(err)
	}
	if err := <-results; err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Queued != 0 || st.Written != 5 {
		t.Fatalf("stats %+v: want the completion committed with the decision", st)
	}
	// Sync does not wait for the delay.
	if err := l.CompleteAsync(&Completion{DecisionID: "b", Status: StatusOK}, then); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-results; err != nil {
		t.Fatal(err)
	}
	// Nor does a completion that charges a budget.
	if err := l.Record(ctx, sampleEvent("e")); err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	if err := l.CompleteAsync(&Completion{DecisionID: "e", Status: StatusOK, TokensInput: 1,
		Charges: []Charge{{Budget: "tokens", Subject: "researcher", Period: day, Used: 1}}}, then); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-results:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a completion that charges a budget waited for the completion delay")
	}
	// Nor does Close, which commits what is queued.
	if err := l.CompleteAsync(&Completion{DecisionID: "c", Status: StatusOK}, then); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close waited for the completion delay")
	}
	if err := <-results; err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Query(ctx, Filter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	completed := 0
	for _, rec := range recs {
		if rec.Completion != nil {
			completed++
		}
	}
	if len(recs) != 5 || completed != 4 {
		t.Errorf("%d decisions, %d completed: want 5, 4", len(recs), completed)
	}
	if rep, err := r.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Errorf("verify: %+v, %v", rep, err)
	}
}
