package manifest

import (
	"testing"
	"time"
)

func TestPeriods(t *testing.T) {
	at := time.Date(2026, 11, 25, 13, 45, 10, 0, time.FixedZone("CET", 3600)) // a Wednesday, 12:45:10 UTC
	for _, tc := range []struct{ per, start, end string }{
		{"hour", "2026-11-25T12:00:00Z", "2026-11-25T13:00:00Z"},
		{"day", "2026-11-25T00:00:00Z", "2026-11-26T00:00:00Z"},
		{"week", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"},
		{"month", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"},
	} {
		start := PeriodStart(tc.per, at)
		if got, end := start.Format(time.RFC3339), PeriodEnd(tc.per, start).Format(time.RFC3339); got != tc.start || end != tc.end {
			t.Errorf("%s: %s to %s, want %s to %s", tc.per, got, end, tc.start, tc.end)
		}
	}
	// A Sunday belongs to the week that started the Monday before.
	if got := PeriodStart("week", time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)); got.Format(time.DateOnly) != "2026-11-23" {
		t.Errorf("Sunday's week starts %s", got)
	}
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in    string
		count int
		per   time.Duration
		ok    bool
	}{
		{"5/s", 5, time.Second, true},
		{" 10 / m ", 10, time.Minute, true},
		{"1000000/h", 1_000_000, time.Hour, true},
		{"0/s", 0, 0, false},
		{"1000001/s", 0, 0, false},
		{"5/d", 0, 0, false},
		{"5", 0, 0, false},
		{"-1/s", 0, 0, false},
	} {
		count, per, ok := ParseRate(tc.in)
		if count != tc.count || per != tc.per || ok != tc.ok {
			t.Errorf("ParseRate(%q) = %d, %s, %v; want %d, %s, %v", tc.in, count, per, ok, tc.count, tc.per, tc.ok)
		}
	}
}
