package decisionlog

import (
	"errors"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/authz"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		err  error
	}{
		{"", time.Time{}, nil},
		{"90s", now.Add(-90 * time.Second), nil},
		{"7d", now.Add(-7 * 24 * time.Hour), nil},
		{"2026-05-01T00:00:00Z", time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), nil},
		{"-1h", time.Time{}, ErrNotPositive},
		{"0d", time.Time{}, ErrNotPositive},
		{"99999999999d", time.Time{}, ErrNotATime}, // would overflow a duration
		{"yesterday", time.Time{}, ErrNotATime},
		{"2300-01-01T00:00:00Z", time.Time{}, ErrTimeOutOfRange},
	} {
		got, err := ParseTime(tc.in, now)
		if !errors.Is(err, tc.err) || !got.Equal(tc.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestSetOutcome(t *testing.T) {
	for _, tc := range []struct {
		access, in       string
		outcome, wantAcc string
		err              error
	}{
		{"", "deny", "deny", "", nil},
		{"", "", "", "", nil},
		{"", OutcomeLiveWrite, authz.OutcomeAllow, "write", nil},
		{"write", OutcomeLiveWrite, authz.OutcomeAllow, "write", nil},
		{"read", OutcomeLiveWrite, "", "read", ErrLiveWriteIsWrite},
		{"", "allowed", "", "", ErrUnknownOutcome},
	} {
		f := Filter{Access: tc.access}
		err := f.SetOutcome(tc.in)
		if !errors.Is(err, tc.err) || f.Outcome != tc.outcome || f.Access != tc.wantAcc {
			t.Errorf("access %q outcome %q: %+v %v", tc.access, tc.in, f, err)
		}
	}
}
