package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/lush-agents/lush/internal/schedule"
)

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
		s.keepLease(ctx, f, cancel, log)
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
	s.recordEnd(bg, c, out, timedOut, log)
}

// keepLease renews the lease of f, a firing this instance runs, every third of Lease until ctx
// ends. When the store says the firing is no longer this instance's, it cancels the run with
// errLeaseLost.
func (s *Scheduler) keepLease(ctx context.Context, f Firing, cancel context.CancelCauseFunc, log *slog.Logger) {
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
}

// recordEnd records how a run of c's firing ended: out's status and result, or timed out; a
// status that is not final counts as failed.
func (s *Scheduler) recordEnd(ctx context.Context, c claimedRun, out Outcome, timedOut bool, log *slog.Logger) {
	f := c.firing
	f.Status, f.DecisionID, f.Response, f.Error = out.Status, out.DecisionID, out.Response, out.Error
	f.Revision = firstNonEmpty(out.Revision, c.revision)
	if timedOut {
		f.Status, f.Error = StatusTimedOut, fmt.Sprintf("timed out after %s (the loop's timeout)", schedule.FormatDuration(c.loop.timeout))
	}
	if f.Status == "" || !f.Status.Final() {
		f.Status = StatusFailed
	}
	f.FinishedAt = s.clock.Now()
	ok, err := s.store.finish(ctx, f, s.cfg.Instance)
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
