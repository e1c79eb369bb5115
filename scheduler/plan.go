package scheduler

import (
	"cmp"
	"container/heap"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/lush-agents/lush/internal/schedule"
)

// maxSkipRecords bounds the skipped firings recorded one by one for a loop after a long
// downtime; the earliest one recorded says how many more were missed.
const maxSkipRecords = 100

// claimedRun is a firing this instance claimed, with its loop and the build the loop comes
// from: what start runs.
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

// plan is tick's transaction: it records the candidates' firings due by now, then claims the
// live firings this instance may run now.
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
	c := &claimer{s: s, tx: tx, now: now, loops: loops, mine: mine, revision: revision, running: map[string]int{}, budget: budget}
	for _, f := range runningRows {
		if c.held(f) {
			c.running[f.Loop]++
		}
	}
	last, exhausted, err := c.claimLive(ctx, len(runningRows))
	if err != nil {
		return nil, err
	}
	if !exhausted {
		// No more claims: of the live firings not read, the only ones this tick changes are the
		// pending firings of loops at their limit (skipped), and running ones given up on.
		if err := c.settleUnread(ctx, last, runningRows); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return c.claimed, nil
}

// claimer claims live firings within one tick's transaction (plan's): it counts the firings
// running per loop and what this instance may still claim, and collects what it claimed.
type claimer struct {
	s        *Scheduler
	tx       *sql.Tx
	now      time.Time
	loops    map[string]*loopState
	mine     map[firingKey]bool // the firings this instance runs (see plan)
	revision string
	running  map[string]int // the held firings (see held) per loop
	budget   int            // how many more firings this instance may claim
	claimed  []claimedRun
}

// held reports whether f is running and still held: its lease has not expired, or this
// instance runs it.
func (c *claimer) held(f Firing) bool {
	return f.Status == StatusRunning && (f.leaseUntil.After(c.now) || f.Owner == c.s.cfg.Instance && c.mine[keyOf(f)])
}

// claimLive handles the live firings in order (oldest first, then by loop name), a page at a
// time while this instance may claim more. nRunning is the number of running firings. It
// returns the last firing read, and whether every live firing was read.
func (c *claimer) claimLive(ctx context.Context, nRunning int) (firingKey, bool, error) {
	last := firingKey{at: math.MinInt64} // the last firing read
	exhausted := false
	for c.budget > 0 && !exhausted {
		n := c.budget + nRunning + 32 // enough for the budget, unless loops are at their limit
		page, err := c.s.store.live(ctx, c.tx, last, n)
		if err != nil {
			return last, false, fmt.Errorf("read live firings: %w", err)
		}
		exhausted = len(page) < n
		for _, f := range page {
			if err := c.handle(ctx, f); err != nil {
				return last, false, err
			}
			last = keyOf(f)
		}
	}
	return last, exhausted, nil
}

// settleUnread handles, of the live firings after last (those claimLive did not read), the ones
// a tick changes without claiming them: running firings given up on, and pending firings of
// loops at their limit. runningRows are the running firings.
func (c *claimer) settleUnread(ctx context.Context, last firingKey, runningRows []Firing) error {
	beyond := func(f Firing) bool {
		k := keyOf(f)
		return k.at > last.at || k.at == last.at && k.loop > last.loop
	}
	for _, f := range runningRows {
		if beyond(f) && !c.held(f) && f.Attempts >= c.s.cfg.MaxAttempts {
			if err := c.handle(ctx, f); err != nil {
				return err
			}
		}
	}
	pending, err := c.s.store.pendingOfRunning(ctx, c.tx)
	if err != nil {
		return fmt.Errorf("read pending firings: %w", err)
	}
	slices.SortFunc(pending, func(a, b Firing) int {
		return cmp.Or(a.ScheduledAt.Compare(b.ScheduledAt), cmp.Compare(a.Loop, b.Loop))
	})
	pending = slices.CompactFunc(pending, func(a, b Firing) bool { return keyOf(a) == keyOf(b) })
	for _, f := range pending {
		if beyond(f) {
			if err := c.handle(ctx, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// handle settles one live firing: it claims it while its loop is below its limit and this
// instance may claim more, skips it when its loop is at its limit and does not queue, and gives
// up on a running firing that is no longer held after MaxAttempts runs. A firing of a loop not
// in this build, or one still held, is left as it is.
func (c *claimer) handle(ctx context.Context, f Firing) error {
	ls, ok := c.loops[f.Loop]
	if !ok {
		return nil // a loop of another build (a rollout in progress): its scheduler runs it
	}
	if f.Status == StatusRunning {
		if c.held(f) {
			return nil
		}
		if f.Attempts >= c.s.cfg.MaxAttempts {
			msg := fmt.Sprintf("abandoned: the scheduler running it stopped %d times without finishing (last: %s)", f.Attempts, f.Owner)
			if err := c.s.store.closeLive(ctx, c.tx, &f, StatusFailed, c.now, msg); err != nil {
				return fmt.Errorf("close firing %s@%s: %w", f.Loop, f.ScheduledAt.Format(time.RFC3339Nano), err)
			}
			c.s.observe(ls, f)
			return nil
		}
	}
	switch {
	case c.running[f.Loop] < ls.limit && c.budget > 0:
		if err := c.s.store.claim(ctx, c.tx, &f, c.s.cfg.Instance, c.now, c.now.Add(c.s.cfg.Lease)); err != nil {
			return fmt.Errorf("claim firing %s@%s: %w", f.Loop, f.ScheduledAt.Format(time.RFC3339Nano), err)
		}
		c.running[f.Loop]++
		c.budget--
		c.claimed = append(c.claimed, claimedRun{firing: f, loop: ls, revision: c.revision})
	case c.running[f.Loop] >= ls.limit && !ls.queue && f.Status == StatusPending:
		msg := fmt.Sprintf("overlap: %d firing(s) of this loop were still running (concurrency %d, overlap: skip)", c.running[f.Loop], ls.limit)
		if err := c.s.store.closeLive(ctx, c.tx, &f, StatusSkipped, c.now, msg); err != nil {
			return fmt.Errorf("skip firing %s@%s: %w", f.Loop, f.ScheduledAt.Format(time.RFC3339Nano), err)
		}
		c.s.observe(ls, f)
	}
	return nil
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
