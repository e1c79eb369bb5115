// Package schedule parses and evaluates loop schedules: standard 5-field cron expressions
// (minute hour day-of-month month day-of-week, with day-of-month and day-of-week combined by OR
// as in Vixie cron), descriptors (@yearly, @monthly, @weekly, @daily, @hourly), @every <duration>,
// and an optional CRON_TZ=<zone> prefix. Parsing is done by github.com/netresearch/go-cron, the
// maintained fork of robfig/cron; this package is the one place Lush calls it.
package schedule

import (
	"fmt"
	"strings"
	"time"

	cron "github.com/netresearch/go-cron"
)

// MaxLen bounds the length of a schedule expression.
const MaxLen = 256

var parser = cron.MustNewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor | cron.DowOrDom)

// Schedule is a parsed schedule.
type Schedule struct {
	expr string
	s    cron.Schedule
}

// String returns the expression the schedule was parsed from.
func (s *Schedule) String() string { return s.expr }

// Next returns the first firing strictly after t.
func (s *Schedule) Next(t time.Time) time.Time { return s.s.Next(t) }

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
