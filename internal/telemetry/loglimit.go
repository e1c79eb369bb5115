package telemetry

import (
	"sync"
	"time"
)

// LogLimiter keeps a flood of one event (failed logins from one address, a decision log that
// cannot be written) from flooding the log: it lets at most one line per key through per interval
// and counts the lines it holds back, which the next line of that key that goes through reports.
// The first line of a key always goes through.
//
// Its memory is bounded: it tracks at most maxKeys keys. When that many are tracked, keys whose
// interval has passed are dropped (at most once per interval, so that a stream of new keys does
// not make every line scan them all), and keys beyond the bound share one allowance until then.
// What a dropped key held back is not reported; metrics, not log lines, are the count of events.
// It is safe for concurrent use.
type LogLimiter struct {
	interval time.Duration
	maxKeys  int
	now      func() time.Time

	mu    sync.Mutex
	keys  map[string]*allowance
	other allowance // shared by the keys beyond maxKeys
	swept time.Time // when keys were last dropped
}

// allowance is one key's state: when its next line may go through, and how many were held back.
type allowance struct {
	next time.Time
	held int
}

// NewLogLimiter returns a limiter of one line per key per interval, tracking at most maxKeys keys
// (at least 1), on the clock now (time.Now when nil).
func NewLogLimiter(interval time.Duration, maxKeys int, now func() time.Time) *LogLimiter {
	if now == nil {
		now = time.Now
	}
	return &LogLimiter{interval: interval, maxKeys: max(1, maxKeys), now: now, keys: map[string]*allowance{}}
}

// Allow reports whether a line for key may be written now and, when it may, how many lines for
// key were held back since the last one written.
func (l *LogLimiter) Allow(key string) (ok bool, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	a := l.keys[key]
	if a == nil {
		a = l.track(key, now)
	}
	if now.Before(a.next) {
		a.held++
		return false, 0
	}
	held = a.held
	a.next, a.held = now.Add(l.interval), 0
	return true, held
}

// track starts tracking key, making room first when it can; it returns the shared allowance when
// it cannot.
func (l *LogLimiter) track(key string, now time.Time) *allowance {
	if len(l.keys) >= l.maxKeys && !now.Before(l.swept.Add(l.interval)) {
		l.swept = now
		for k, a := range l.keys {
			if !now.Before(a.next) {
				delete(l.keys, k)
			}
		}
	}
	if len(l.keys) >= l.maxKeys {
		return &l.other
	}
	a := &allowance{}
	l.keys[key] = a
	return a
}
