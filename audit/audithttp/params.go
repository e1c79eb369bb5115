package audithttp

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// Limits of a query.
const (
	DefaultLimit = 100  // decisions per page when limit is absent
	MaxLimit     = 1000 // the largest limit a request may ask for
	maxQueryLen  = 8 << 10
	maxParamLen  = 1 << 10
)

// LiveWrite is the outcome parameter that selects allowed writes that ran for real (not
// stubbed): outcome allow, access write.
const LiveWrite = decisionlog.OutcomeLiveWrite

// Params are the query parameters GET /audit/decisions accepts.
var Params = []string{"principal", "group", "agent", "tool", "tool_name", "access", "outcome", "decision_id", "revision",
	"action", "text", "since", "until", "before", "limit"}

// timeHint says how to write since and until.
const timeHint = "use RFC 3339, e.g. 2026-01-02T15:04:05Z, or a duration like 24h"

// ParamError is a query parameter that cannot be used: which one, and what is wrong with it
// (the message ends with how to fix it).
type ParamError struct {
	Param   string // "" when the problem is with the query as a whole
	Message string
}

func (e *ParamError) Error() string {
	if e.Param == "" {
		return e.Message
	}
	return "param " + e.Param + ": " + e.Message
}

func bad(param, format string, args ...any) *ParamError {
	return &ParamError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// ParseQuery turns the query parameters of GET /audit/decisions into a decision-log filter,
// newest first. now anchors durations (since=24h is now minus 24 hours). Unknown or repeated
// parameters are errors, so that a misspelt filter is not silently ignored. The error is a
// *ParamError.
func ParseQuery(q url.Values, now time.Time) (decisionlog.Filter, error) {
	f := decisionlog.Filter{Limit: DefaultLimit}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		vs := q[name]
		if name == "" {
			return f, bad("", "the query has a parameter without a name (remove the =… that follows no name)")
		}
		if !slices.Contains(Params, name) {
			hint := diag.DidYouMean(name, Params)
			if hint == "" {
				hint = "the parameters are " + strings.Join(Params, ", ")
			}
			return f, bad(name, "unknown parameter (%s)", hint)
		}
		if len(vs) != 1 {
			return f, bad(name, "given %d times (give it once)", len(vs))
		}
		v := vs[0]
		if len(v) > maxParamLen {
			return f, bad(name, "longer than %d bytes (shorten it)", maxParamLen)
		}
		if v == "" {
			continue // an empty form field: no filter
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return f, bad(name, "contains a control character (remove it)")
		}
		switch name {
		case "principal":
			f.Principal = v
		case "group":
			if !strings.Contains(v, ":") {
				return f, bad(name, "%q is not a group or principal (write group:%s)", v, v)
			}
			f.Group = v
		case "agent":
			f.Agent = v
		case "tool":
			f.Tool = v
		case "tool_name":
			f.ToolName = v
		case "access":
			if v != "read" && v != "write" {
				return f, bad(name, "%q is not an access level (use read or write)", v)
			}
			f.Access = v
		case "outcome":
			f.Outcome = v
		case "decision_id":
			f.DecisionID = v
		case "revision":
			f.Revision = v
		case "action":
			f.Action = v
		case "text":
			f.Text = v
		case "since", "until":
			t, err := parseTime(name, v, now)
			if err != nil {
				return f, err
			}
			if name == "since" {
				f.Since = t
			} else {
				f.Until = t
			}
		case "before":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return f, bad(name, "%q is not a sequence number (use the next_before of the previous page, a whole number from 1)", v)
			}
			f.BeforeSeq = n
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxLimit {
				return f, bad(name, "%q is out of range (use a whole number from 1 to %d)", v, MaxLimit)
			}
			f.Limit = n
		}
	}
	switch outcome := f.Outcome; f.SetOutcome(outcome) {
	case nil:
	case decisionlog.ErrLiveWriteIsWrite:
		return f, bad("outcome", "%s is a write: it cannot be combined with access=read (remove one of them)", LiveWrite)
	default:
		return f, bad("outcome", "%q is not an outcome (use one of %s or %s)", outcome, strings.Join(authz.Outcomes, ", "), LiveWrite)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, bad("since", "%s is not before until %s (swap them, or widen the range)",
			f.Since.UTC().Format(time.RFC3339Nano), f.Until.UTC().Format(time.RFC3339Nano))
	}
	return f, nil
}

// parseTime reads since or until (decisionlog.ParseTime), naming the parameter and the fix.
func parseTime(param, v string, now time.Time) (time.Time, error) {
	t, err := decisionlog.ParseTime(v, now)
	switch {
	case err == decisionlog.ErrTimeOutOfRange:
		return t, bad(param, "%q is out of range (%s, between the years 1678 and 2262)", v, timeHint)
	case err == decisionlog.ErrNotPositive:
		return t, bad(param, "%q is not a positive duration (%s)", v, timeHint)
	case err != nil:
		return t, bad(param, "%q is neither a time nor a duration (%s)", v, timeHint)
	}
	return t, nil
}
