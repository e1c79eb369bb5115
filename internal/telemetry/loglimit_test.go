package telemetry

import (
	"fmt"
	"testing"
	"time"
)

// clock is a test clock that moves only when told.
type clock struct{ t time.Time }

func (c *clock) now() time.Time            { return c.t }
func (c *clock) add(d time.Duration)       { c.t = c.t.Add(d) }
func newClock() *clock                     { return &clock{t: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)} }
func (c *clock) limiter(n int) *LogLimiter { return NewLogLimiter(time.Minute, n, c.now) }

type step struct {
	after time.Duration // the clock moves this much first
	key   string
	ok    bool // the line goes through
	held  int  // reporting this many held back
}

func TestLogLimiter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxKeys int
		steps   []step
	}{
		{"one line per key per interval, then the count of those held back", 10, []step{
			{0, "a", true, 0}, {time.Second, "a", false, 0}, {time.Second, "a", false, 0},
			{time.Minute, "a", true, 2}, {time.Second, "a", false, 0}, {time.Minute, "a", true, 1}, {time.Minute, "a", true, 0},
		}},
		{"keys are limited apart", 10, []step{
			{0, "a", true, 0}, {0, "b", true, 0}, {0, "a", false, 0}, {0, "b", false, 0}, {0, "c", true, 0},
		}},
		{"keys beyond the bound share one allowance", 2, []step{
			{0, "a", true, 0}, {0, "b", true, 0}, {0, "c", true, 0}, {0, "d", false, 0}, {0, "c", false, 0}, {0, "a", false, 0},
			{time.Second, "e", false, 0},
		}},
		{"expired keys make room", 2, []step{
			{0, "a", true, 0}, {0, "b", true, 0}, {time.Minute, "c", true, 0}, {0, "d", true, 0},
			{0, "e", true, 0}, {0, "f", false, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			l := c.limiter(tc.maxKeys)
			for i, s := range tc.steps {
				c.add(s.after)
				if ok, held := l.Allow(s.key); ok != s.ok || held != s.held {
					t.Errorf("step %d (%s): %v, %d held back; want %v, %d", i, s.key, ok, held, s.ok, s.held)
				}
			}
		})
	}
}

// TestLogLimiterMemory: however many keys come, it tracks at most its bound.
func TestLogLimiterMemory(t *testing.T) {
	c := newClock()
	l := c.limiter(100)
	for i := range 10_000 {
		if i%1000 == 0 {
			c.add(time.Minute)
		}
		l.Allow(fmt.Sprint(i))
	}
	if n := len(l.keys); n > 100 {
		t.Errorf("%d keys tracked, bound 100", n)
	}
}
