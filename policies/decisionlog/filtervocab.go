package decisionlog

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lush-agents/lush/policies/authz"
)

// The filter vocabulary auditors write, shared by `lushctl audit` and the audit API: each caller
// words its own message (a flag, a query parameter) around these errors.

// OutcomeLiveWrite is the outcome filter for allowed writes that ran for real (not stubbed): it
// selects outcome allow with access write.
const OutcomeLiveWrite = "live_write"

// Errors of SetOutcome and ParseTime.
var (
	ErrUnknownOutcome   = errors.New("not an outcome")
	ErrLiveWriteIsWrite = errors.New("live_write is a write: it cannot be combined with access read")
	ErrNotATime         = errors.New("neither an RFC 3339 time nor a duration")
	ErrNotPositive      = errors.New("not a positive duration")
	ErrTimeOutOfRange   = errors.New("out of range (years 1678 to 2262)")
)

// SetOutcome sets the outcome filter to v, one of authz.Outcomes or OutcomeLiveWrite (which also sets
// Access to write; an Access of read contradicts it). Set Access first.
func (f *Filter) SetOutcome(v string) error {
	switch {
	case v == OutcomeLiveWrite && f.Access == "read":
		return ErrLiveWriteIsWrite
	case v == OutcomeLiveWrite:
		f.Outcome, f.Access = authz.OutcomeAllow, "write"
	case v == "" || slices.Contains(authz.Outcomes, v):
		f.Outcome = v
	default:
		return ErrUnknownOutcome
	}
	return nil
}

// ParseTime reads a time bound: an RFC 3339 time, or a positive duration before now (Go's units,
// or whole days: 7d). Empty is the zero time (no bound).
func ParseTime(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		if checkTime("", t) != nil {
			return time.Time{}, ErrTimeOutOfRange
		}
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if days, ok := strings.CutSuffix(v, "d"); ok && err != nil {
		if n, nerr := strconv.Atoi(days); nerr == nil && n <= 100*365 {
			d, err = time.Duration(n)*24*time.Hour, nil
		}
	}
	switch {
	case err != nil:
		return time.Time{}, ErrNotATime
	case d <= 0:
		return time.Time{}, ErrNotPositive
	}
	return now.Add(-d), nil
}
