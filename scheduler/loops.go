package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
)

// Errors of Trigger.
var (
	ErrUnknownLoop = errors.New("no such loop in the deployed build")
	ErrNoBuild     = errors.New("no build is deployed yet")
)

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
