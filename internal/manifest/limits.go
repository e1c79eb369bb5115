package manifest

import (
	"regexp"
	"strconv"
	"time"
)

// The vocabulary of budgets and rate limits, shared by the compiler that checks lush.yaml and the
// enforcement points that apply a build's limits.

// Budget units and periods.
var (
	BudgetUnits   = []string{"tokens", "tool_calls", "credits"}
	BudgetPeriods = []string{"hour", "day", "week", "month"}
)

// Limits of budgets.
const (
	MaxBudgetLimit = 1_000_000_000_000
	MaxBudgetCost  = 1_000_000
)

// AnyPrincipal is the principal pattern of a budget that applies to every caller, each with its
// own usage.
const AnyPrincipal = "*"

// Limits of rate limits.
const (
	MaxRateCount = 1_000_000
	MaxBurst     = 1_000_000
)

// PeriodStart is the start of the budget period per ("hour", "day", "week" or "month") that t
// falls in, in UTC; weeks start on Monday.
func PeriodStart(per string, t time.Time) time.Time {
	t = t.UTC()
	switch per {
	case "hour":
		return t.Truncate(time.Hour)
	case "week":
		day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	case "month":
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	default: // day
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	}
}

// PeriodEnd is the end of the budget period that starts at start: the next period's start.
func PeriodEnd(per string, start time.Time) time.Time {
	switch per {
	case "hour":
		return start.Add(time.Hour)
	case "week":
		return start.AddDate(0, 0, 7)
	case "month":
		return start.AddDate(0, 1, 0)
	default:
		return start.AddDate(0, 0, 1)
	}
}

// rateRE is a rate of rate_limits: a whole number of requests per second, minute or hour.
var rateRE = regexp.MustCompile(`^\s*([0-9]+)\s*/\s*(s|m|h)\s*$`)

// ParseRate parses a rate of rate_limits, N/s, N/m or N/h, into N (from 1 to MaxRateCount) and
// its unit.
func ParseRate(s string) (count int, per time.Duration, ok bool) {
	m := rateRE.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, false
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 || n > MaxRateCount {
		return 0, 0, false
	}
	per = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[m[2]]
	return n, per, true
}
