package scheduler

import "time"

// Clock is the scheduler's time: firing instants, leases and polls (not run timeouts, which are
// wall-clock). Tests give a clock they control.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
