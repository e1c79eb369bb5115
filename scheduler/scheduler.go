// Package scheduler fires loops: scheduled invocations of an agent, as the loop's run_as service
// account, with the loop's instruction (loops/<name>.yaml). It gives them production guarantees:
//
//   - At least once. A firing is recorded in the store before it runs. After a restart, firings
//     missed within the loop's catch-up window are replayed; older ones are recorded as skipped.
//   - Never twice. A firing's key is (loop, scheduled time), the store's primary key. Planning
//     and claiming run in one transaction under a store-wide lock, so several replicas (or a
//     restarted one) never run the same key twice. A run holds a lease it renews; a crashed run's
//     lease expires and the firing is retried (up to MaxAttempts); a finished one is final.
//   - Bounded. Each loop runs at most `concurrency` firings at once (default 1); a firing due
//     while the loop is at its limit is skipped or queued (the loop's overlap policy), and each
//     run has a wall-clock timeout that cancels it and records it as timed out.
//   - Deterministic. Firings that fall on the same instant are claimed and started in order of
//     loop name; `@every` schedules are anchored to the Unix epoch plus the loop's phase, so
//     every replica computes the same instants (LeMMing's ticks map onto this).
//
// The store is SQLite (one process: lushctl run, a single serve) or PostgreSQL (replicas).
// Reading a loop's history and triggering it by hand are decided by the shared policy decision
// (loop/read, loop/trigger) and logged like every other decision; see Handler.
package scheduler

import (
	"cmp"
	"container/heap"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/schedule"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// Point is the enforcement point name of the scheduler's decisions (loop/read, loop/trigger).
const Point = "scheduler"

// Defaults of Config.
const (
	DefaultCatchUp     = time.Hour
	DefaultLease       = 30 * time.Second
	DefaultPoll        = 2 * time.Second
	DefaultMaxAttempts = 3
	DefaultMaxRunning  = 64
	DefaultTimeout     = 10 * time.Minute
)

// maxSkipRecords bounds the skipped firings recorded one by one for a loop after a long
// downtime; the earliest one recorded says how many more were missed.
const maxSkipRecords = 100

// Config configures a Scheduler. The zero value of each field means its default.
type Config struct {
	// Store is a SQLite file (optionally "sqlite:<path>") or a postgres:// URL. Required.
	Store string
	// CatchUp is how old a missed firing may be and still run after downtime, for loops that set
	// no catch_up (default 1h).
	CatchUp time.Duration
	// Lease is how long a claimed firing stays claimed without renewal (default 30s): a
	// scheduler that dies mid-run loses its firings to another (or its restart) after this long.
	Lease time.Duration
	// Poll is how often the store is checked for queued, manual and orphaned firings (default 2s).
	Poll time.Duration
	// MaxAttempts bounds the runs of a firing whose scheduler died (default 3).
	MaxAttempts int
	// MaxRunning bounds the firings this instance runs at once, over all loops (default 64).
	MaxRunning int
	// Timeout is the wall-clock limit of a run for loops that set no timeout (default 10m).
	Timeout time.Duration
	// Instance names this scheduler in the store (default host-pid-random).
	Instance string
}

// Options are the scheduler's collaborators.
type Options struct {
	Invoker Invoker                 // required: runs a firing (Agents for agentd)
	Auth    *identity.Authenticator // the HTTP API's callers
	Policy  *enforce.Policy         // decides (and logs) loop/read and loop/trigger: the process's policy
	Metrics *telemetry.Metrics      // optional
	Logger  *slog.Logger            // optional
	Clock   Clock                   // optional: the real clock
}

// Run is a firing to execute.
type Run struct {
	Loop        manifest.Loop
	Firing      Firing
	Instruction string // the firing's instruction, or else the loop's
	Revision    string // the build the loop comes from
}

// Outcome is how a run ended.
type Outcome struct {
	Status     Status // succeeded, failed, denied; the scheduler sets timed_out itself
	DecisionID string
	Response   string
	Error      string
	Revision   string // the build that decided, when the invoker knows it
}

// Invoker runs firings. Invoke must return when ctx ends.
type Invoker interface {
	Invoke(ctx context.Context, r Run) Outcome
}

// InvokerFunc adapts a function to Invoker.
type InvokerFunc func(ctx context.Context, r Run) Outcome

// Invoke calls f.
func (f InvokerFunc) Invoke(ctx context.Context, r Run) Outcome { return f(ctx, r) }

// Errors of Trigger.
var (
	ErrUnknownLoop = errors.New("no such loop in the deployed build")
	ErrNoBuild     = errors.New("no build is deployed yet")
)

// Scheduler plans, claims and runs firings. Start it, Deploy builds to it, Close it.
type Scheduler struct {
	cfg     Config
	opts    Options
	store   *store
	clock   Clock
	gate    *policyhttp.Gate // the HTTP API's: authenticates and decides
	logger  *slog.Logger
	started time.Time // firings due before this were missed while no scheduler of ours ran

	mu       sync.Mutex
	loops    map[string]*loopState
	deploys  uint64 // counts Deploy calls: loops is the same map as long as it is unchanged
	revision string
	due      dueHeap
	replan   bool // the next tick considers every loop (after a deploy)
	running  map[firingKey]*run
	invoking int // runs claimed whose invoker has not returned: what MaxRunning bounds

	poke    chan struct{}
	runCtx  context.Context // parent of runs; cancelled by Close after the grace period
	stopRun context.CancelFunc
	stop    context.CancelFunc // stops the planning goroutine
	loopWG  sync.WaitGroup     // the planning goroutine
	runWG   sync.WaitGroup     // runs
}

type loopState struct {
	spec    manifest.Loop
	sched   *schedule.Schedule
	next    time.Time
	limit   int
	queue   bool
	timeout time.Duration
	catchUp time.Duration
	index   int // in the due heap
}

type firingKey struct {
	loop string
	at   int64
}

func keyOf(f Firing) firingKey { return firingKey{f.Loop, micros(f.ScheduledAt)} }

type run struct {
	firing Firing
	done   chan struct{}
}

// New opens the store and returns a scheduler with no loops; Start starts it.
func New(ctx context.Context, cfg Config, opts Options) (*Scheduler, error) {
	if cfg.Store == "" {
		return nil, errors.New("scheduler: no store: set a SQLite file or a postgres:// URL")
	}
	if opts.Invoker == nil {
		return nil, errors.New("scheduler: an invoker is required")
	}
	setDefault(&cfg.CatchUp, DefaultCatchUp)
	setDefault(&cfg.Lease, DefaultLease)
	setDefault(&cfg.Poll, DefaultPoll)
	setDefault(&cfg.Timeout, DefaultTimeout)
	setDefault(&cfg.MaxAttempts, DefaultMaxAttempts)
	setDefault(&cfg.MaxRunning, DefaultMaxRunning)
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		var b [4]byte
		rand.Read(b[:])
		cfg.Instance = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	st, err := openStore(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg, opts: opts, store: st, clock: opts.Clock, logger: opts.Logger.With("component", "scheduler"),
		loops: map[string]*loopState{}, running: map[firingKey]*run{}, poke: make(chan struct{}, 1)}
	s.started = s.clock.Now()
	s.gate = newGate(opts)
	s.runCtx, s.stopRun = context.WithCancel(context.WithoutCancel(ctx))
	return s, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Start starts planning and running firings in a goroutine that Close stops.
func (s *Scheduler) Start() {
	ctx, stop := context.WithCancel(s.runCtx)
	s.stop = stop
	s.loopWG.Go(func() { s.loop(ctx) })
}

// Close stops planning, lets runs in flight finish until ctx ends, then cancels the rest and
// gives their firings back (pending) for another scheduler or the next start, and closes the
// store.
func (s *Scheduler) Close(ctx context.Context) error {
	if s.stop != nil {
		s.stop()
	}
	s.loopWG.Wait()
	done := make(chan struct{})
	go func() { s.runWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.stopRun()
		<-done
	}
	s.stopRun()
	return s.store.close()
}

// Deploy makes m's loops the scheduled ones (the build's policy engine is deployed to the
// scheduler's Policy by whoever deployed the build). Loops keep their history and their place in
// time across deploys.
func (s *Scheduler) Deploy(m *manifest.Manifest, hash string) {
	loops := map[string]*loopState{}
	for _, l := range m.Loops {
		sched, err := l.Parsed()
		if err != nil { // the compiler checked it: a build that gets here is broken
			s.logger.Error("loop has an invalid schedule; it will not fire", "loop", l.Name, "error", err)
			continue
		}
		ls := &loopState{spec: l, sched: sched, limit: max(l.Concurrency, 1), queue: l.Overlap == "queue",
			timeout: time.Duration(l.TimeoutMS) * time.Millisecond, catchUp: s.cfg.CatchUp}
		if ls.timeout <= 0 {
			ls.timeout = s.cfg.Timeout
		}
		if l.CatchUpMS != nil {
			ls.catchUp = time.Duration(*l.CatchUpMS) * time.Millisecond
		}
		loops[l.Name] = ls
	}
	s.mu.Lock()
	s.loops, s.revision, s.replan = loops, hash, true
	s.deploys++
	s.due = s.due[:0]
	s.mu.Unlock()
	s.wake()
}

func (s *Scheduler) wake() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// loop plans and claims at every firing instant, at every poll, and when woken.
func (s *Scheduler) loop(ctx context.Context) {
	for {
		s.step(ctx)
		wait := s.cfg.Poll
		s.mu.Lock()
		if len(s.due) > 0 {
			wait = min(wait, s.due[0].next.Sub(s.clock.Now()))
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-s.clock.After(max(wait, 0)):
		case <-s.poke:
		}
	}
}

// step runs one tick at the clock's now and starts what it claimed.
func (s *Scheduler) step(ctx context.Context) {
	now := s.clock.Now()
	claimed, err := s.tick(ctx, now)
	if err != nil {
		if ctx.Err() == nil {
			s.logger.Error("scheduler tick failed; nothing was started", "error", err)
		}
		return
	}
	for _, c := range claimed {
		s.start(c)
	}
}

type claimedRun struct {
	firing   Firing
	loop     *loopState
	revision string
}

// tick records the firings due by now, and claims the live firings this instance may run now.
func (s *Scheduler) tick(ctx context.Context, now time.Time) ([]claimedRun, error) {
	s.mu.Lock()
	if s.revision == "" {
		s.mu.Unlock()
		return nil, nil
	}
	loops, revision, deploys := s.loops, s.revision, s.deploys
	var candidates []*loopState
	if s.replan {
		for _, ls := range loops {
			candidates = append(candidates, ls)
		}
	} else {
		for len(s.due) > 0 && !s.due[0].next.After(now) {
			candidates = append(candidates, heap.Pop(&s.due).(*loopState))
		}
	}
	budget := s.cfg.MaxRunning - s.invoking
	mine := make(map[firingKey]bool, len(s.running))
	for k := range s.running {
		mine[k] = true
	}
	s.mu.Unlock()
	slices.SortFunc(candidates, func(a, b *loopState) int { return cmp.Compare(a.spec.Name, b.spec.Name) })

	claimed, err := s.plan(ctx, now, loops, candidates, mine, budget, revision)

	// Whatever happened, the candidates' next instants are after now: a failed tick is retried
	// by the next poll, which replans every loop.
	s.mu.Lock()
	if err != nil {
		s.replan = true
	} else if s.replan && s.deploys == deploys {
		s.replan = false
		s.due = s.due[:0]
		for _, ls := range loops {
			if ls.next = ls.sched.Next(now); !ls.next.IsZero() { // a cron that never fires is never due
				s.due = append(s.due, ls)
			}
		}
		heap.Init(&s.due)
	} else if s.deploys == deploys {
		for _, ls := range candidates {
			if ls.next = ls.sched.Next(now); !ls.next.IsZero() {
				heap.Push(&s.due, ls)
			}
		}
	}
	for _, c := range claimed {
		s.running[keyOf(c.firing)] = &run{firing: c.firing, done: make(chan struct{})}
	}
	s.invoking += len(claimed)
	s.mu.Unlock()
	return claimed, err
}

// plan is tick's transaction.
// mine are the firings this instance runs: they count as running even if a slow renewal let
// their lease lapse, and are never claimed again.
func (s *Scheduler) plan(ctx context.Context, now time.Time, loops map[string]*loopState, candidates []*loopState,
	mine map[firingKey]bool, budget int, revision string) ([]claimedRun, error) {
	tx, err := s.store.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if len(candidates) > 0 {
		cursors, err := s.store.cursors(ctx, tx)
		if err != nil {
			return nil, fmt.Errorf("read cursors: %w", err)
		}
		for _, ls := range candidates {
			if err := s.planLoop(ctx, tx, now, ls, cursors); err != nil {
				return nil, fmt.Errorf("plan loop %s: %w", ls.spec.Name, err)
			}
		}
	}
	// The running firings say which loops are at their limit.
	runningRows, err := s.store.running(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("read running firings: %w", err)
	}
	running := map[string]int{}
	held := func(f Firing) bool {
		return f.Status == StatusRunning && (f.leaseUntil.After(now) || f.Owner == s.cfg.Instance && mine[keyOf(f)])
	}
	for _, f := range runningRows {
		if held(f) {
			running[f.Loop]++
		}
	}
	var claimed []claimedRun
	handle := func(f Firing) error {
		ls, ok := loops[f.Loop]
		if !ok {
			return nil // a loop of another build (a rollout in progress): its scheduler runs it
		}
		if f.Status == StatusRunning {
			if held(f) {
				return nil
			}
			if f.Attempts >= s.cfg.MaxAttempts {
				msg := fmt.Sprintf("abandoned: the scheduler running it stopped %d times without finishing (last: %s)", f.Attempts, f.Owner)
				if err := s.store.closeLive(ctx, tx, &f, StatusFailed, now, msg); err != nil {
					return fmt.Errorf("close firing %s@%s: %w", f.Loop, f.ScheduledAt.Format(time.RFC3339Nano), err)
				}
				s.observe(ls, f)
				return nil
			}
		}
		switch {
		case running[f.Loop] < ls.limit && budget > 0:
			if err := s.store.claim(ctx, tx, &f, s.cfg.Instance, now, now.Add(s.cfg.Lease)); err != nil {
				return fmt.Errorf("claim firing %s@%s: %w", f.Loop, f.ScheduledAt.Format(time.RFC3339Nano), err)
			}
			running[f.Loop]++
			budget--
			claimed = append(claimed, claimedRun{firing: f, loop: ls, revision: revision})
		case running[f.Loop] >= ls.limit && !ls.queue && f.Status == StatusPending:
			msg := fmt.Sprintf("overlap: %d firing(s) of this loop were still running (concurrency %d, overlap: skip)", running[f.Loop], ls.limit)
			if err := s.store.closeLive(ctx, tx, &f, StatusSkipped, now, msg); err != nil {
				return fmt.Errorf("skip firing %s@%s: %w", f.Loop, f.ScheduledAt.Format(time.RFC3339Nano), err)
			}
			s.observe(ls, f)
		}
		return nil
	}
	// The live firings in order (oldest first, then by loop name), a page at a time while this
	// instance may claim more.
	last := firingKey{at: math.MinInt64} // the last firing read
	exhausted := false
	for budget > 0 && !exhausted {
		n := budget + len(runningRows) + 32 // enough for the budget, unless loops are at their limit
		page, err := s.store.live(ctx, tx, last, n)
		if err != nil {
			return nil, fmt.Errorf("read live firings: %w", err)
		}
		exhausted = len(page) < n
		for _, f := range page {
			if err := handle(f); err != nil {
				return nil, err
			}
			last = keyOf(f)
		}
	}
	if !exhausted {
		// No more claims: of the live firings not read, the only ones this tick changes are the
		// pending firings of loops at their limit (skipped), and running ones given up on.
		beyond := func(f Firing) bool {
			k := keyOf(f)
			return k.at > last.at || k.at == last.at && k.loop > last.loop
		}
		for _, f := range runningRows {
			if beyond(f) && !held(f) && f.Attempts >= s.cfg.MaxAttempts {
				if err := handle(f); err != nil {
					return nil, err
				}
			}
		}
		pending, err := s.store.pendingOfRunning(ctx, tx)
		if err != nil {
			return nil, fmt.Errorf("read pending firings: %w", err)
		}
		slices.SortFunc(pending, func(a, b Firing) int {
			return cmp.Or(a.ScheduledAt.Compare(b.ScheduledAt), cmp.Compare(a.Loop, b.Loop))
		})
		pending = slices.CompactFunc(pending, func(a, b Firing) bool { return keyOf(a) == keyOf(b) })
		for _, f := range pending {
			if beyond(f) {
				if err := handle(f); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return claimed, nil
}

// planLoop records ls's firings in (cursor, now] and moves its cursor to now. A loop seen for
// the first time starts now: nothing before its first deploy is owed.
func (s *Scheduler) planLoop(ctx context.Context, tx *sql.Tx, now time.Time, ls *loopState, cursors map[string]time.Time) error {
	name := ls.spec.Name
	from, ok := cursors[name]
	if !ok {
		return s.store.setCursor(ctx, tx, name, now)
	}
	if !from.Before(now) {
		return nil // another replica planned it already
	}
	windowStart := now.Add(-ls.catchUp)
	var skipped []time.Time
	missed := 0
	for t, n := ls.sched.Next(from), 0; !t.IsZero() && !t.After(now); t, n = ls.sched.Next(t), n+1 {
		if n >= maxPlanPerTick {
			// Years behind with a short interval: what is left is far outside any window.
			missed++
			break
		}
		if t.Before(windowStart) {
			missed++
			if len(skipped) == maxSkipRecords {
				skipped = skipped[1:]
			}
			skipped = append(skipped, t)
			continue
		}
		trigger := TriggerSchedule
		if t.Before(s.started) {
			trigger = TriggerCatchUp
		}
		if _, err := s.store.insert(ctx, tx, Firing{Loop: name, ScheduledAt: t, Trigger: trigger, Status: StatusPending}); err != nil {
			return err
		}
	}
	for i, t := range skipped {
		msg := fmt.Sprintf("missed: no scheduler ran at %s, and it is older than the catch-up window (%s)", t.Format(time.RFC3339), schedule.FormatDuration(ls.catchUp))
		if i == 0 && missed > len(skipped) {
			msg += fmt.Sprintf("; %d earlier firings since %s were missed too", missed-len(skipped), from.Format(time.RFC3339))
		}
		if _, err := s.store.insert(ctx, tx, Firing{Loop: name, ScheduledAt: t, Trigger: TriggerCatchUp, Status: StatusSkipped,
			FinishedAt: now, Error: msg}); err != nil {
			return err
		}
		s.observe(ls, Firing{Status: StatusSkipped})
	}
	return s.store.setCursor(ctx, tx, name, now)
}

// maxPlanPerTick bounds the instants one tick walks for a loop.
const maxPlanPerTick = 1_000_000

// start runs a claimed firing in a goroutine that Close waits for.
func (s *Scheduler) start(c claimedRun) {
	s.runWG.Go(func() { s.execute(c) })
}

var errLeaseLost = errors.New("the firing's lease was lost to another scheduler")

// execute runs a claimed firing, renewing its lease, and records how it ended.
func (s *Scheduler) execute(c claimedRun) {
	f := c.firing
	log := s.logger.With("loop", f.Loop, "scheduled_at", f.ScheduledAt, "attempt", f.Attempts)
	defer func() {
		s.mu.Lock()
		r := s.running[keyOf(f)]
		delete(s.running, keyOf(f))
		s.mu.Unlock()
		if r != nil {
			close(r.done)
		}
		s.wake() // a slot is free: queued firings may run
	}()
	if m := s.opts.Metrics; m != nil {
		m.LoopLag.Observe(max(f.StartedAt.Sub(f.ScheduledAt), 0).Seconds())
	}
	ctx, cancel := context.WithCancelCause(s.runCtx)
	defer cancel(nil)
	ctx, cancelTimeout := context.WithTimeout(ctx, c.loop.timeout)
	defer cancelTimeout()

	// Renew the lease until the run ends; losing it cancels the run.
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		every := s.cfg.Lease / 3
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.clock.After(every):
			}
			ok, err := s.store.renew(ctx, f, s.cfg.Instance, s.clock.Now().Add(s.cfg.Lease))
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("renew the firing's lease", "error", err)
				}
				continue // the store may come back before the lease ends
			}
			if !ok {
				cancel(errLeaseLost)
				return
			}
		}
	}()

	instruction := f.Instruction
	if instruction == "" {
		instruction = c.loop.spec.Instruction
	}
	log.Info("loop firing started", "trigger", f.Trigger)
	out := s.opts.Invoker.Invoke(ctx, Run{Loop: c.loop.spec, Firing: f, Instruction: instruction, Revision: c.revision})
	s.mu.Lock()
	s.invoking--
	s.mu.Unlock()
	s.wake() // a slot is free: queued firings may run
	ctxErr, cause := ctx.Err(), context.Cause(ctx)
	timedOut := errors.Is(ctxErr, context.DeadlineExceeded)
	// Interrupted by shutdown: the run's context ended, not by its timeout, and it did not
	// succeed anyway (a run that succeeded just as the grace ran out is recorded, not rerun).
	interrupted := ctxErr != nil && !timedOut && s.runCtx.Err() != nil && out.Status != StatusSucceeded
	cancel(nil)
	<-renewed

	bg := context.WithoutCancel(ctx)
	switch {
	case errors.Is(cause, errLeaseLost):
		log.Warn("loop firing abandoned: another scheduler took it over", "error", cause)
		return
	case interrupted:
		// Shutting down: the run did not finish; give it back.
		if err := s.store.release(bg, f, s.cfg.Instance); err != nil {
			log.Error("give back an unfinished firing (it is retried when its lease expires)", "error", err)
		}
		log.Info("loop firing interrupted by shutdown; it will run again")
		return
	}
	f.Status, f.DecisionID, f.Response, f.Error = out.Status, out.DecisionID, out.Response, out.Error
	f.Revision = firstNonEmpty(out.Revision, c.revision)
	if timedOut {
		f.Status, f.Error = StatusTimedOut, fmt.Sprintf("timed out after %s (the loop's timeout)", schedule.FormatDuration(c.loop.timeout))
	}
	if f.Status == "" || !f.Status.Final() {
		f.Status = StatusFailed
	}
	f.FinishedAt = s.clock.Now()
	ok, err := s.store.finish(bg, f, s.cfg.Instance)
	switch {
	case err != nil:
		log.Error("record the end of a loop firing (it is retried when its lease expires)", "error", err)
	case !ok:
		log.Warn("loop firing finished after another scheduler took it over; its result is not recorded")
	default:
		s.observe(c.loop, f)
		log.Info("loop firing finished", "status", f.Status, "duration", f.Duration(), "decision_id", f.DecisionID)
	}
}

func (s *Scheduler) observe(ls *loopState, f Firing) {
	if m := s.opts.Metrics; m != nil {
		m.LoopFirings.WithLabelValues(ls.spec.Name, string(f.Status)).Inc()
	}
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Trigger records a manual firing of loop now, with instruction instead of the loop's when it
// is not empty, and wakes the scheduler to run it. It does not decide: callers decide
// loop/trigger first (Handler does).
func (s *Scheduler) Trigger(ctx context.Context, loop, instruction, by string) (Firing, error) {
	s.mu.Lock()
	_, ok := s.loops[loop]
	built := s.revision != ""
	s.mu.Unlock()
	if !built {
		return Firing{}, ErrNoBuild
	}
	if !ok {
		return Firing{}, fmt.Errorf("trigger loop %q: %w", loop, ErrUnknownLoop)
	}
	f := Firing{Loop: loop, ScheduledAt: s.clock.Now().UTC().Truncate(time.Microsecond), Trigger: TriggerManual,
		Status: StatusPending, Instruction: instruction, TriggeredBy: by}
	for range 100 { // two triggers in the same microsecond: the second takes the next one
		inserted, err := s.store.insert(ctx, nil, f)
		if err != nil {
			return Firing{}, fmt.Errorf("trigger loop %q: record the firing: %w", loop, err)
		}
		if inserted {
			s.wake()
			return f, nil
		}
		f.ScheduledAt = f.ScheduledAt.Add(time.Microsecond)
	}
	return Firing{}, fmt.Errorf("trigger loop %q: too many firings at %s", loop, f.ScheduledAt)
}

// Firing reads one firing.
func (s *Scheduler) Firing(ctx context.Context, loop string, at time.Time) (Firing, error) {
	f, err := s.store.get(ctx, loop, at)
	if err != nil {
		return Firing{}, fmt.Errorf("read firing %s@%s: %w", loop, at.Format(time.RFC3339Nano), err)
	}
	return f, nil
}

// Wait waits until a firing is final, polling the store (another replica may run it).
func (s *Scheduler) Wait(ctx context.Context, loop string, at time.Time) (Firing, error) {
	for {
		f, err := s.Firing(ctx, loop, at)
		if err != nil || f.Status.Final() {
			return f, err
		}
		s.mu.Lock()
		r := s.running[keyOf(f)]
		s.mu.Unlock()
		var done <-chan struct{}
		if r != nil {
			done = r.done
		}
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// History reads a loop's firings, newest first, scheduled before before (zero: the newest).
func (s *Scheduler) History(ctx context.Context, loop string, before time.Time, limit int) ([]Firing, error) {
	if limit <= 0 {
		limit = 50
	}
	out, err := s.store.history(ctx, loop, before, limit)
	if err != nil {
		return nil, fmt.Errorf("read the history of loop %s: %w", loop, err)
	}
	return out, nil
}

// LoopInfo is a deployed loop and where it stands.
type LoopInfo struct {
	manifest.Loop
	Next time.Time `json:"next"`
	Last *Firing   `json:"last,omitempty"`
}

// Loops lists the deployed loops by name, with their next instant and last firing.
func (s *Scheduler) Loops(ctx context.Context) ([]LoopInfo, error) {
	s.mu.Lock()
	var out []LoopInfo
	now := s.clock.Now()
	for _, ls := range s.loops {
		out = append(out, LoopInfo{Loop: ls.spec, Next: ls.sched.Next(now)})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b LoopInfo) int { return cmp.Compare(a.Name, b.Name) })
	for i := range out {
		h, err := s.store.history(ctx, out[i].Name, time.Time{}, 1)
		if err != nil {
			return nil, fmt.Errorf("read the last firing of loop %s: %w", out[i].Name, err)
		}
		if len(h) == 1 {
			out[i].Last = &h[0]
		}
	}
	return out, nil
}

// dueHeap orders loops by their next instant, then by name.
type dueHeap []*loopState

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if !h[i].next.Equal(h[j].next) {
		return h[i].next.Before(h[j].next)
	}
	return h[i].spec.Name < h[j].spec.Name
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *dueHeap) Push(x any)   { ls := x.(*loopState); ls.index = len(*h); *h = append(*h, ls) }
func (h *dueHeap) Pop() any {
	old := *h
	ls := old[len(old)-1]
	*h = old[:len(old)-1]
	return ls
}
