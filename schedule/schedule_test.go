package schedule

import (
	"strings"
	"testing"
	"time"
)

func TestParseAndNext(t *testing.T) {
	base := time.Date(2026, 11, 20, 8, 30, 0, 0, time.UTC) // a Friday
	tests := []struct {
		expr string
		want time.Time
	}{
		{"0 9 * * *", time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)},
		{"*/15 * * * *", time.Date(2026, 11, 20, 8, 45, 0, 0, time.UTC)},
		{"@hourly", time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)},
		{"@every 10m", base.Add(10 * time.Minute)},
		{"0 9 * * 1", time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)},
		// Day-of-month and day-of-week combine with OR, as in standard cron: the 1st OR Mondays.
		{"0 9 1 * 1", time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)},
		{"CRON_TZ=Europe/Berlin 0 9 * * *", time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		s, err := Parse(tt.expr)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.expr, err)
			continue
		}
		if got := s.Next(base); !got.Equal(tt.want) {
			t.Errorf("%q.Next(%v) = %v, want %v", tt.expr, base, got.UTC(), tt.want)
		}
		if s.String() != tt.expr {
			t.Errorf("String() = %q", s.String())
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ expr, want string }{
		{"0 0 9 * * *", "remove the seconds field"},
		{"0 9 * *", "4 fields"},
		{"0 25 * * *", "25"},
		{"CRON_TZ=00", "must be followed by a space"},
		{"CRON_TZ=Mars/Olympus 0 9 * * *", `unknown time zone "Mars/Olympus"`},
		{"TZ= 0 9 * * *", "unknown time zone"},
		{"@every -1s", ""},
		{"@fortnightly", ""},
		{strings.Repeat("*", 300), "longer than"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.expr)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) error = %v, want containing %q", tt.expr, err, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0 9 * * *", "@every 1s", "CRON_TZ=UTC @daily", "CRON_TZ=00", "TZ=", "*/0 * * * *", "1-0 * * * *"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := Parse(expr)
		if err != nil {
			return
		}
		// A valid schedule must be evaluable without panicking.
		s.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	})
}
