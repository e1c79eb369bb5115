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
		{"@every -1s", "@every -1s: the shortest interval is 1s"},
		{"@every 500ms", "@every 500ms: the shortest interval is 1s"},
		{"@every 0s", "the shortest interval is 1s"},
		{"@every 1500ms", "@every 1500ms: the interval must be a whole number of seconds, such as 1s"},
		{"@every ten", `@every ten: "ten" is not a duration`},
		{"CRON_TZ=UTC @every 1.5m5ms", "whole number of seconds"},
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
	for _, s := range []string{"0 9 * * *", "@every 1s", "CRON_TZ=UTC @daily", "@every 3m", "CRON_TZ=Europe/Berlin @every 90m", "@every 500ms", "@every 1500ms", "@every  2h ", "@every 2562047h", "CRON_TZ=00", "TZ=", "*/0 * * * *", "1-0 * * * *"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := Parse(expr)
		if err != nil {
			return
		}
		// A valid schedule must be evaluable without panicking.
		from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		next := s.Next(from)
		if every, ok := s.Every(); ok {
			if !next.After(from) || next.Sub(from) > every || next.Unix()%int64(every/time.Second) != 0 {
				t.Fatalf("%q.Next(%v) = %v", expr, from, next)
			}
			if p, err := s.WithPhase(every - time.Second); err != nil || !p.Next(from).After(from) {
				t.Fatalf("%q.WithPhase(%v): %v", expr, every-time.Second, err)
			}
		}
	})
}

func TestEveryIsAnchored(t *testing.T) {
	at := func(h, m, s int) time.Time { return time.Date(2026, 11, 20, h, m, s, 0, time.UTC) }
	tests := []struct {
		expr  string
		phase time.Duration
		from  []time.Time // all in the same interval
		want  time.Time
	}{
		// Without a phase the firings are on the epoch grid, wherever the asking starts.
		{"@every 10m", 0, []time.Time{at(8, 30, 0), at(8, 30, 1), at(8, 35, 0), at(8, 39, 59), at(8, 39, 59).Add(999 * time.Millisecond)}, at(8, 40, 0)},
		{"@every 7m", 0, []time.Time{at(8, 19, 0), at(8, 22, 0), at(8, 25, 59)}, at(8, 26, 0)}, // 29,919,386 minutes after the epoch = 7 × 4,274,198
		{"@every 1s", 0, []time.Time{at(8, 0, 0), at(8, 0, 0).Add(time.Nanosecond)}, at(8, 0, 1)},
		{"CRON_TZ=Asia/Kolkata @every 1h", 0, []time.Time{at(8, 0, 0), at(8, 59, 59)}, at(9, 0, 0)}, // the zone does not move @every
		{"@every 24h", 0, []time.Time{at(0, 0, 0), at(23, 59, 59)}, time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)},
		// A phase shifts the grid.
		{"@every 3m", time.Minute, []time.Time{at(0, 0, 0), at(0, 0, 59)}, at(0, 1, 0)},
		{"@every 3m", time.Minute, []time.Time{at(0, 1, 0), at(0, 3, 59)}, at(0, 4, 0)},
		{"@every 3m", 2 * time.Minute, []time.Time{at(0, 0, 0)}, at(0, 2, 0)},
		{"@every 1h", 59*time.Minute + 59*time.Second, []time.Time{at(7, 59, 59), at(8, 59, 58)}, at(8, 59, 59)},
		// Before the epoch too.
		{"@every 7m", 0, []time.Time{time.Unix(-1, 0), time.Unix(-419, 0)}, time.Unix(0, 0)},
		{"@every 7m", time.Second, []time.Time{time.Unix(-420, 0), time.Unix(-839, 0).Add(time.Nanosecond)}, time.Unix(-419, 0)},
	}
	for _, tt := range tests {
		s, err := Parse(tt.expr)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.expr, err)
		}
		if tt.phase != 0 {
			if s, err = s.WithPhase(tt.phase); err != nil {
				t.Fatalf("%q.WithPhase(%v): %v", tt.expr, tt.phase, err)
			}
		}
		for _, from := range tt.from {
			if got := s.Next(from); !got.Equal(tt.want) {
				t.Errorf("%q phase %v: Next(%v) = %v, want %v", tt.expr, tt.phase, from.UTC(), got.UTC(), tt.want.UTC())
			}
		}
	}

	// Next keeps the location of its argument.
	s, _ := Parse("@every 1h")
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if got := s.Next(at(8, 30, 0).In(berlin)); got.Location() != berlin || !got.Equal(at(9, 0, 0)) {
		t.Errorf("Next in Berlin = %v", got)
	}
}

func TestEveryAndWithPhase(t *testing.T) {
	every, _ := Parse("@every 3m")
	if d, ok := every.Every(); !ok || d != 3*time.Minute {
		t.Errorf("Every() = %v, %v", d, ok)
	}
	tz, _ := Parse("CRON_TZ=Europe/Berlin @every 90m")
	if d, ok := tz.Every(); !ok || d != 90*time.Minute {
		t.Errorf("Every() with CRON_TZ = %v, %v", d, ok)
	}
	for _, expr := range []string{"@hourly", "*/3 * * * *", "CRON_TZ=UTC 0 9 * * *"} {
		s, _ := Parse(expr)
		if d, ok := s.Every(); ok || d != 0 {
			t.Errorf("%q.Every() = %v, %v", expr, d, ok)
		}
	}

	phased, err := every.WithPhase(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := every.Next(from); !got.Equal(from.Add(3 * time.Minute)) {
		t.Errorf("WithPhase changed the original: Next = %v", got)
	}
	if d, ok := phased.Every(); !ok || d != 3*time.Minute || phased.String() != "@every 3m" {
		t.Errorf("phased: Every() = %v, %v; String() = %q", d, ok, phased.String())
	}
	if again, err := phased.WithPhase(0); err != nil || !again.Next(from).Equal(from.Add(3*time.Minute)) {
		t.Errorf("WithPhase(0) of a phased schedule: %v", err)
	}

	hourly, _ := Parse("@hourly")
	tests := []struct {
		s     *Schedule
		phase time.Duration
		want  string
	}{
		{every, 3 * time.Minute, `phase 3m is outside the interval of "@every 3m": write a phase from 0s up to (not including) 3m`},
		{every, -time.Second, "phase -1s is outside the interval"},
		{every, 3*time.Minute + time.Second, "phase 3m1s is outside the interval"},
		{every, 1500 * time.Millisecond, "phase 1.5s is not a whole number of seconds: write e.g. 1s"},
		{hourly, 0, `a phase applies only to @every schedules, not to "@hourly": remove the phase, or write an interval such as "@every 15m"`},
		{hourly, time.Minute, "only to @every schedules"},
	}
	for _, tt := range tests {
		if _, err := tt.s.WithPhase(tt.phase); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q.WithPhase(%v) error = %v, want containing %q", tt.s, tt.phase, err, tt.want)
		}
	}
}

func TestNeverFiringCronGivesZero(t *testing.T) {
	never, err := Parse("0 0 30 2 *") // February 30th
	if err != nil {
		t.Fatal(err)
	}
	if got := never.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); !got.IsZero() {
		t.Errorf("Next = %v, want the zero time (callers stop on it)", got)
	}
}
