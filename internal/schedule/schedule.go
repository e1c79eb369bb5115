// Package schedule parses and evaluates loop schedules: standard 5-field cron expressions
// (minute hour day-of-month month day-of-week, with day-of-month and day-of-week combined by OR
// as in Vixie cron), descriptors (@yearly, @monthly, @weekly, @daily, @hourly), @every <duration>,
// and an optional CRON_TZ=<zone> prefix. Parsing is done by github.com/netresearch/go-cron, the
// maintained fork of robfig/cron; this package is the one place Lush calls it.
//
// @every is anchored, not relative: the firings of "@every d" with phase p (see WithPhase) are
// exactly the instants Unix epoch + p + k·d for integer k, whenever and wherever Next is asked.
// Scheduler replicas and restarts therefore agree on every firing instant, which makes the
// instant usable as a key to deduplicate firings. Intervals and phases are whole seconds, so
// every @every firing falls on a whole second. A CRON_TZ prefix does not move @every firings.
package schedule

import (
	"fmt"
	"strings"
	"time"

	cron "github.com/netresearch/go-cron"
)

// MaxLen bounds the length of a schedule expression.
const MaxLen = 256

// MinEvery is the shortest @every interval.
const MinEvery = time.Second

var parser = cron.MustNewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor | cron.DowOrDom)

// Schedule is a parsed schedule. It is immutable; WithPhase returns a new one.
type Schedule struct {
	expr  string
	s     cron.Schedule // cron expressions and descriptors; nil for @every
	every time.Duration // the interval of @every, a whole number of seconds; 0 otherwise
	phase time.Duration // the offset of @every firings from the epoch grid, in [0, every)
}

// String returns the expression the schedule was parsed from.
func (s *Schedule) String() string { return s.expr }

// Every returns the interval of an @every schedule (whatever its CRON_TZ prefix), and false for
// any other schedule.
func (s *Schedule) Every() (time.Duration, bool) { return s.every, s.every > 0 }

// WithPhase returns a copy of an @every schedule whose firings are offset by p from the epoch
// grid: the firings of "@every d" with phase p are the instants Unix epoch + p + k·d. p must be a
// whole number of seconds with 0 <= p < d; other schedules take no phase.
func (s *Schedule) WithPhase(p time.Duration) (*Schedule, error) {
	if s.every == 0 {
		return nil, fmt.Errorf("a phase applies only to @every schedules, not to %q: remove the phase, or write an interval such as \"@every 15m\"", s.expr)
	}
	if p < 0 || p >= s.every {
		return nil, fmt.Errorf("phase %s is outside the interval of %q: write a phase from 0s up to (not including) %s", FormatDuration(p), s.expr, FormatDuration(s.every))
	}
	if p%time.Second != 0 {
		return nil, fmt.Errorf("phase %s is not a whole number of seconds: write e.g. %s", p, FormatDuration(p.Truncate(time.Second)))
	}
	c := *s
	c.phase = p
	return &c, nil
}

// Next returns the first firing strictly after t, in t's location. For @every it is the first
// anchored instant (see the package documentation) after t. For a cron expression that never
// fires (such as "0 0 30 2 *") it returns the zero time.
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every == 0 {
		return s.s.Next(t)
	}
	// Whole seconds throughout: t.Unix() is floor(t), and an anchored instant after floor(t)
	// is also after t, because instants are whole seconds.
	d, p := int64(s.every/time.Second), int64(s.phase/time.Second)
	k := floorDiv(t.Unix()-p, d)
	return time.Unix((k+1)*d+p, 0).In(t.Location())
}

// floorDiv is a/b rounded towards negative infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Parse parses a schedule expression. A malformed expression is an error, never a panic.
func Parse(expr string) (sched *Schedule, err error) {
	if len(expr) > MaxLen {
		return nil, fmt.Errorf("schedule is longer than %d characters", MaxLen)
	}
	body := expr
	if strings.HasPrefix(body, "CRON_TZ=") || strings.HasPrefix(body, "TZ=") {
		zone, rest, ok := strings.Cut(body, " ")
		if !ok || strings.TrimSpace(rest) == "" {
			return nil, fmt.Errorf("%s must be followed by a space and a schedule", zone)
		}
		_, name, _ := strings.Cut(zone, "=")
		if _, err := time.LoadLocation(name); err != nil || name == "" {
			return nil, fmt.Errorf("unknown time zone %q (use an IANA name such as Europe/Berlin)", name)
		}
		body = strings.TrimSpace(rest)
	}
	if rest, ok := strings.CutPrefix(body, "@every "); ok {
		every, err := parseEvery(body, strings.TrimSpace(rest))
		if err != nil {
			return nil, err
		}
		return &Schedule{expr: expr, every: every}, nil
	}
	if !strings.HasPrefix(body, "@") {
		if n := len(strings.Fields(body)); n != 5 {
			if n == 6 {
				return nil, fmt.Errorf("6 fields: remove the seconds field; schedules have 5 (minute hour day-of-month month day-of-week)")
			}
			return nil, fmt.Errorf("%d fields: a schedule has 5 (minute hour day-of-month month day-of-week)", n)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("cannot parse schedule: %v", r)
		}
	}()
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, err
	}
	return &Schedule{expr: expr, s: s}, nil
}

// parseEvery parses the duration of "@every <d>" (body is the whole descriptor, for messages).
func parseEvery(body, d string) (time.Duration, error) {
	every, err := time.ParseDuration(d)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s: %q is not a duration: write one such as 90s, 15m or 1h30m", body, d)
	case every < MinEvery:
		return 0, fmt.Errorf("%s: the shortest interval is %s", body, MinEvery)
	case every%time.Second != 0:
		return 0, fmt.Errorf("%s: the interval must be a whole number of seconds, such as %s", body, FormatDuration(every.Truncate(time.Second)))
	}
	return every, nil
}

// FormatDuration formats a duration the way people write one: 3m rather than 3m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
