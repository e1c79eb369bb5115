package scheduler

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/test/pgtest"
)

// scenarios run on every store: SQLite (always) and PostgreSQL (when installed; always in CI).
var scenarios = []struct {
	name string
	run  func(t *testing.T, store string)
}{
	{"FiringTimes", testFiringTimes},
	{"SameInstantRunsInLoopNameOrder", testSameInstantRunsInLoopNameOrder},
	{"CatchUpAfterDowntime", testCatchUpAfterDowntime},
	{"NoCatchUpBeyondWindowOfLongDowntime", testNoCatchUpBeyondWindowOfLongDowntime},
	{"Overlap", testOverlap},
	{"ConcurrencyLimit", testConcurrencyLimit},
	{"Timeout", testTimeout},
	{"CrashedRunIsRetriedFinishedOneNever", testCrashedRunIsRetriedFinishedOneNever},
	{"ReplicasNeverRunAFiringTwice", testReplicasNeverRunAFiringTwice},
	{"TriggerAndShutdownGivesBackUnfinishedRuns", testTriggerAndShutdownGivesBackUnfinishedRuns},
}

func TestSQLite(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, filepath.Join(t.TempDir(), "scheduler.db")) })
	}
}

func TestPostgres(t *testing.T) {
	c := pgtest.Start(t)
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, c.CreateDatabase(t, fmt.Sprintf("scheduler_%d", i))) })
	}
}

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, fakeTimer{c.now.Add(d), ch})
	return ch
}

// Set moves the clock to t, firing the timers due by then.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(t) {
			kept = append(kept, tm)
			continue
		}
		tm.ch <- t
	}
	c.timers = kept
}

// recorder is an invoker that records runs and can hold them until released.
type recorder struct {
	mu    sync.Mutex
	runs  []Run
	hold  chan struct{} // when set, runs wait for it (or their context)
	block bool          // runs wait for their context only
}

func (r *recorder) Invoke(ctx context.Context, run Run) Outcome {
	r.mu.Lock()
	r.runs = append(r.runs, run)
	hold, block := r.hold, r.block
	r.mu.Unlock()
	if block {
		<-ctx.Done()
		return Outcome{Status: StatusFailed, Error: ctx.Err().Error()}
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return Outcome{Status: StatusFailed, Error: ctx.Err().Error()}
		}
	}
	return Outcome{Status: StatusSucceeded, DecisionID: "dec-" + run.Firing.Loop + "-" + run.Firing.ScheduledAt.Format("150405"), Response: "done: " + run.Instruction}
}

func (r *recorder) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, x := range r.runs {
		out = append(out, x.Firing.Loop+"@"+x.Firing.ScheduledAt.UTC().Format("15:04:05"))
	}
	return out
}

var t0 = time.Date(2026, 11, 23, 10, 0, 30, 0, time.UTC)

func at(hms string) time.Time {
	t, err := time.Parse("2006-01-02 15:04:05", "2026-11-23 "+hms)
	if err != nil {
		panic(err)
	}
	return t
}

func loop(name, sched string, opts ...func(*manifest.Loop)) manifest.Loop {
	l := manifest.Loop{Name: name, Schedule: sched, Agent: "agent", RunAs: "serviceaccount:bot", Instruction: "do " + name}
	for _, o := range opts {
		o(&l)
	}
	return l
}

func queue(l *manifest.Loop) { l.Overlap = "queue" }

func catchUp(d time.Duration) func(*manifest.Loop) {
	return func(l *manifest.Loop) { ms := d.Milliseconds(); l.CatchUpMS = &ms }
}

type harness struct {
	t     *testing.T
	clock *fakeClock
	inv   *recorder
	s     *Scheduler
	path  string
}

func newHarness(t *testing.T, store string, start time.Time, loops ...manifest.Loop) *harness {
	t.Helper()
	h := &harness{t: t, clock: &fakeClock{now: start}, inv: &recorder{}, path: store}
	h.s = h.open(loops...)
	return h
}

// open starts a scheduler (a new instance) on the harness's store.
func (h *harness) open(loops ...manifest.Loop) *Scheduler {
	h.t.Helper()
	s, err := New(context.Background(), Config{Store: h.path, Lease: 30 * time.Second}, Options{Invoker: h.inv, Clock: h.clock})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { s.Close(context.Background()) })
	s.Deploy(&manifest.Manifest{Loops: loops}, "rev-1")
	return s
}

// stepAt moves the clock to t, ticks, and waits for the runs started to end.
func (h *harness) stepAt(t time.Time) {
	h.clock.Set(t)
	h.s.step(context.Background())
	h.s.runWG.Wait()
}

// history is the loop's firings, oldest first, as "hh:mm:ss status".
func (h *harness) history(name string) []string {
	h.t.Helper()
	fs, err := h.s.History(context.Background(), name, time.Time{}, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, f := range slices.Backward(fs) {
		out = append(out, f.ScheduledAt.UTC().Format("15:04:05")+" "+string(f.Status))
	}
	return out
}

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func testFiringTimes(t *testing.T, store string) {
	h := newHarness(t, store, t0, loop("every", "@every 1m"), loop("cron", "*/2 * * * *"),
		loop("phased", "@every 3m", func(l *manifest.Loop) { l.PhaseMS = time.Minute.Milliseconds() }))
	h.stepAt(t0) // first sight: nothing before the deploy is owed
	for _, hms := range []string{"10:01:00", "10:02:00", "10:03:00", "10:04:00"} {
		h.stepAt(at(hms))
	}
	eq(t, "every", h.history("every"), []string{"10:01:00 succeeded", "10:02:00 succeeded", "10:03:00 succeeded", "10:04:00 succeeded"})
	eq(t, "cron", h.history("cron"), []string{"10:02:00 succeeded", "10:04:00 succeeded"})
	eq(t, "phased", h.history("phased"), []string{"10:01:00 succeeded", "10:04:00 succeeded"})
	fs, _ := h.s.History(context.Background(), "every", time.Time{}, 1)
	if f := fs[0]; f.Trigger != TriggerSchedule || f.Attempts != 1 || f.DecisionID != "dec-every-100400" || f.Response != "done: do every" || f.Revision != "rev-1" {
		t.Errorf("last firing = %+v", f)
	}
}

func testSameInstantRunsInLoopNameOrder(t *testing.T, store string) {
	h := newHarness(t, store, t0, loop("charlie", "@every 1m"), loop("alpha", "@every 1m"), loop("bravo", "* * * * *"))
	h.stepAt(t0)
	h.clock.Set(at("10:01:00"))
	claimed, err := h.s.tick(context.Background(), h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range claimed {
		got = append(got, c.firing.Loop)
		h.s.start(c)
	}
	h.s.runWG.Wait()
	eq(t, "claim order", got, []string{"alpha", "bravo", "charlie"})
}

func testCatchUpAfterDowntime(t *testing.T, store string) {
	h := newHarness(t, store, t0, loop("q", "@every 10m", queue, catchUp(25*time.Minute)), loop("s", "@every 10m", catchUp(25*time.Minute)))
	h.stepAt(t0)
	h.stepAt(at("10:10:00"))
	h.s.Close(context.Background())

	// Down from 10:10 to 10:55: 10:20 is older than the 25m window, 10:30..10:50 are replayed.
	h.clock.Set(at("10:55:00"))
	h.s = h.open(loop("q", "@every 10m", queue, catchUp(25*time.Minute)), loop("s", "@every 10m", catchUp(25*time.Minute)))
	for range 4 {
		h.stepAt(at("10:55:00")) // queued firings run one at a time (concurrency 1)
	}
	eq(t, "queue", h.history("q"), []string{"10:10:00 succeeded", "10:20:00 skipped", "10:30:00 succeeded", "10:40:00 succeeded", "10:50:00 succeeded"})
	// With overlap: skip, the replayed firings that find the first one running are skipped.
	eq(t, "skip", h.history("s"), []string{"10:10:00 succeeded", "10:20:00 skipped", "10:30:00 succeeded", "10:40:00 skipped", "10:50:00 skipped"})
	fs, _ := h.s.History(context.Background(), "q", time.Time{}, 10)
	for _, f := range fs {
		switch f.ScheduledAt.Format("15:04") {
		case "10:30":
			if f.Trigger != TriggerCatchUp {
				t.Errorf("10:30 trigger = %s, want catch_up", f.Trigger)
			}
		case "10:20":
			if !strings.Contains(f.Error, "older than the catch-up window (25m)") {
				t.Errorf("10:20 error = %q", f.Error)
			}
		}
	}
}

func testNoCatchUpBeyondWindowOfLongDowntime(t *testing.T, store string) {
	h := newHarness(t, store, t0, loop("l", "@every 1m", catchUp(0)))
	h.stepAt(t0)
	h.s.Close(context.Background())
	h.clock.Set(t0.Add(24*time.Hour - 30*time.Second)) // 10:00:00 the next day
	h.s = h.open(loop("l", "@every 1m", catchUp(0)))
	h.stepAt(h.clock.Now())
	fs, _ := h.s.History(context.Background(), "l", time.Time{}, 1000)
	if len(fs) != maxSkipRecords+1 { // the firing at now runs, the 1439 before it are skipped (100 recorded)
		t.Fatalf("%d firings recorded, want %d", len(fs), maxSkipRecords+1)
	}
	if fs[0].Status != StatusSucceeded || !fs[0].ScheduledAt.Equal(h.clock.Now().Truncate(time.Minute)) {
		t.Errorf("newest = %+v", fs[0])
	}
	if oldest := fs[len(fs)-1]; oldest.Status != StatusSkipped || !strings.Contains(oldest.Error, "1339 earlier firings") {
		t.Errorf("oldest = %s %q", oldest.Status, oldest.Error)
	}
}

func testOverlap(t *testing.T, store string) {
	for _, policy := range []string{"skip", "queue"} {
		t.Run(policy, func(t *testing.T) {
			l := loop(policy, "@every 1m", func(l *manifest.Loop) { l.Overlap = policy }) // both share the store
			h := newHarness(t, store, t0, l)
			h.stepAt(t0)
			hold := make(chan struct{})
			h.inv.hold = hold
			h.clock.Set(at("10:01:00"))
			h.s.step(context.Background()) // 10:01 runs and holds
			waitFor(t, func() bool { return len(h.inv.names()) == 1 })
			h.clock.Set(at("10:02:00"))
			h.s.step(context.Background()) // 10:02 is due while 10:01 runs
			close(hold)
			h.s.runWG.Wait()
			h.stepAt(at("10:02:01"))
			want := map[string][]string{
				"skip":  {"10:01:00 succeeded", "10:02:00 skipped"},
				"queue": {"10:01:00 succeeded", "10:02:00 succeeded"},
			}[policy]
			eq(t, "history", h.history(policy), want)
		})
	}
}

func testConcurrencyLimit(t *testing.T, store string) {
	h := newHarness(t, store, t0, loop("l", "@every 1m", queue, func(l *manifest.Loop) { l.Concurrency = 2 }))
	h.stepAt(t0)
	hold := make(chan struct{})
	h.inv.hold = hold
	for _, hms := range []string{"10:01:00", "10:02:00", "10:03:00"} {
		h.clock.Set(at(hms))
		h.s.step(context.Background())
	}
	// Claims are made within step: the third firing waits in the store, whatever the two runs'
	// goroutines do. Which of the two invokes first is theirs to decide.
	eq(t, "claimed", h.history("l"), []string{"10:01:00 running", "10:02:00 running", "10:03:00 pending"})
	waitFor(t, func() bool { return len(h.inv.names()) == 2 })
	eq(t, "running", slices.Sorted(slices.Values(h.inv.names())), []string{"l@10:01:00", "l@10:02:00"})
	close(hold)
	h.s.runWG.Wait()
	h.stepAt(at("10:03:01"))
	eq(t, "history", h.history("l"), []string{"10:01:00 succeeded", "10:02:00 succeeded", "10:03:00 succeeded"})
}

func testTimeout(t *testing.T, store string) {
	h := newHarness(t, store, t0, loop("l", "@every 1m", func(l *manifest.Loop) { l.TimeoutMS = 50 }))
	h.inv.block = true
	h.stepAt(t0)
	h.stepAt(at("10:01:00"))
	fs, _ := h.s.History(context.Background(), "l", time.Time{}, 1)
	if f := fs[0]; f.Status != StatusTimedOut || f.Error != "timed out after 50ms (the loop's timeout)" {
		t.Errorf("firing = %s %q", f.Status, f.Error)
	}
}

func testCrashedRunIsRetriedFinishedOneNever(t *testing.T, store string) {
	h := newHarness(t, store, t0, loop("l", "@every 1m"))
	h.stepAt(t0)
	ctx := context.Background()
	// A scheduler that died mid-run: its firings hold leases that expire at 10:00:40.
	db := h.s.store.db
	for _, row := range []struct {
		at       string
		status   Status
		attempts int
	}{{"09:58:00", StatusRunning, 1}, {"09:59:00", StatusRunning, DefaultMaxAttempts}, {"09:57:00", StatusSucceeded, 1}} {
		if _, err := db.ExecContext(ctx, h.s.store.q(`INSERT INTO lush_loop_firings (loop_name, scheduled_at, trigger_kind, status, attempts, owner, lease_until)
			VALUES ('l', ?, 'schedule', ?, ?, 'dead', ?)`), micros(at(row.at)), string(row.status), row.attempts, micros(at("10:00:40"))); err != nil {
			t.Fatal(err)
		}
	}
	h.stepAt(at("10:00:39")) // leases still held
	if n := len(h.inv.names()); n != 0 {
		t.Fatalf("%d runs while the dead scheduler's leases held", n)
	}
	h.stepAt(at("10:00:41"))
	eq(t, "runs", h.inv.names(), []string{"l@09:58:00"})
	eq(t, "history", h.history("l"), []string{"09:57:00 succeeded", "09:58:00 succeeded", "09:59:00 failed"})
	f, _ := h.s.Firing(ctx, "l", at("09:58:00"))
	if f.Attempts != 2 || f.Owner != "" {
		t.Errorf("retried firing = %+v", f)
	}
	f, _ = h.s.Firing(ctx, "l", at("09:59:00"))
	if !strings.Contains(f.Error, "abandoned") {
		t.Errorf("abandoned firing error = %q", f.Error)
	}
}

func testReplicasNeverRunAFiringTwice(t *testing.T, store string) {
	h := newHarness(t, store, t0, loop("a", "@every 1m"), loop("b", "@every 1m", queue))
	other := h.open(loop("a", "@every 1m"), loop("b", "@every 1m", queue))
	h.stepAt(t0)
	for _, hms := range []string{"10:01:00", "10:02:00", "10:03:00"} {
		h.clock.Set(at(hms))
		var wg sync.WaitGroup
		for _, s := range []*Scheduler{h.s, other} {
			wg.Go(func() { s.step(context.Background()) })
		}
		wg.Wait()
		h.s.runWG.Wait()
		other.runWG.Wait()
	}
	got := h.inv.names()
	slices.Sort(got)
	eq(t, "runs", got, []string{"a@10:01:00", "a@10:02:00", "a@10:03:00", "b@10:01:00", "b@10:02:00", "b@10:03:00"})
}

func testTriggerAndShutdownGivesBackUnfinishedRuns(t *testing.T, store string) {
	h := newHarness(t, store, t0, loop("l", "@every 1h"))
	h.stepAt(t0)
	ctx := context.Background()
	if _, err := h.s.Trigger(ctx, "nope", "", "user:alice"); err == nil {
		t.Fatal("triggering an unknown loop succeeded")
	}
	f, err := h.s.Trigger(ctx, "l", "say hi", "user:alice")
	if err != nil {
		t.Fatal(err)
	}
	h.inv.block = true
	h.s.step(ctx)
	waitFor(t, func() bool { return len(h.inv.names()) == 1 })
	// Shut down with no grace: the run is cancelled and its firing given back.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	h.s.Close(cctx)
	h.inv.block = false
	h.s = h.open(loop("l", "@every 1h"))
	h.stepAt(t0.Add(time.Second))
	got, err := h.s.Firing(ctx, "l", f.ScheduledAt)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusSucceeded || got.Attempts != 1 || got.Trigger != TriggerManual || got.TriggeredBy != "user:alice" || got.Response != "done: say hi" {
		t.Errorf("firing = %+v", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(time.Millisecond)
	}
}
