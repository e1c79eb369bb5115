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
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
	// AuthFailures counts and logs failed authentications (optional; one per process).
	AuthFailures *identity.Failures
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
