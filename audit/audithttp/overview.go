package audithttp

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// Summarizer is what GET /audit/stats reads: counts of a window and the chain's health, by the
// store. *decisionlog.Log and *decisionlog.Reader implement it.
type Summarizer interface {
	Summarize(ctx context.Context, f decisionlog.SummaryFilter) (*decisionlog.Summary, error)
	Health(ctx context.Context) ([]decisionlog.ChainHealth, error)
}

// writeCounter is the log's write counters since this process opened it (*decisionlog.Log).
type writeCounter interface{ Stats() decisionlog.Stats }

// StatsParams are the query parameters GET /audit/stats accepts.
var StatsParams = []string{"since", "until", "bucket", "top"}

// DefaultStatsWindow is the window of GET /audit/stats without since.
const DefaultStatsWindow = 24 * time.Hour

// bucketSteps are the bucket sizes an unspecified bucket is chosen from: the smallest that cuts
// the window into at most autoBuckets.
var bucketSteps = []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute,
	10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour}

const autoBuckets = 48

// Overview is the answer of GET /audit/stats: the window's counts (decisionlog.Summary) and the
// log's health.
type Overview struct {
	*decisionlog.Summary
	Health Health `json:"health"`
}

// Health is the decision log's health: each chain partition's head, last checkpoint and
// unprotected tail, and this process's write counters (absent when the server reads a log
// another process writes).
type Health struct {
	Partitions []decisionlog.ChainHealth `json:"partitions"`
	Writes     *decisionlog.Stats        `json:"writes,omitempty"`
}

// ParseStatsQuery reads the query of GET /audit/stats into a summary filter. now is the end of
// a window without until and anchors durations. The error is a *ParamError.
func ParseStatsQuery(q url.Values, now time.Time) (decisionlog.SummaryFilter, error) {
	f := decisionlog.SummaryFilter{Until: now}
	bucket := ""
	for _, name := range slices.Sorted(maps.Keys(q)) {
		vs := q[name]
		if !slices.Contains(StatsParams, name) {
			hint := diag.DidYouMean(name, StatsParams)
			if hint == "" {
				hint = "the parameters are " + strings.Join(StatsParams, ", ")
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
			continue
		}
		switch name {
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
		case "bucket":
			bucket = v
		case "top":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > decisionlog.MaxSummaryTop {
				return f, bad(name, "%q is out of range (use a whole number from 1 to %d)", v, decisionlog.MaxSummaryTop)
			}
			f.Top = n
		}
	}
	if f.Since.IsZero() {
		f.Since = f.Until.Add(-DefaultStatsWindow)
	}
	if !f.Since.Before(f.Until) {
		return f, bad("since", "%s is not before until %s (swap them, or widen the window)",
			f.Since.UTC().Format(time.RFC3339Nano), f.Until.UTC().Format(time.RFC3339Nano))
	}
	window := f.Until.Sub(f.Since)
	if bucket == "" {
		f.Bucket = bucketSteps[len(bucketSteps)-1]
		for _, step := range bucketSteps {
			if window <= step*autoBuckets {
				f.Bucket = step
				break
			}
		}
	} else {
		d, err := time.ParseDuration(bucket)
		if err != nil || d < time.Second {
			return f, bad("bucket", "%q is not a duration of a second or more (write e.g. 1m, 15m or 1h)", bucket)
		}
		f.Bucket = d
	}
	if n := (window + f.Bucket - 1) / f.Bucket; n > decisionlog.MaxSummaryBuckets {
		return f, bad("bucket", "%s cuts the window of %s into %d buckets, more than %d (use a larger bucket, or a shorter window)",
			f.Bucket, window, n, decisionlog.MaxSummaryBuckets)
	}
	return f, nil
}

// stats answers GET /audit/stats.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.RawQuery) > maxQueryLen {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("the query string is longer than %d bytes: shorten it", maxQueryLen))
		return
	}
	// The window ends before this request's own decision, which is logged next.
	now := s.cfg.Now()
	q := r.URL.Query()
	v := s.authorize(w, r, map[string]any{"route": "GET /audit/stats", "query": queryArgs(q)})
	if v == nil {
		return
	}
	start := time.Now()
	f, err := ParseStatsQuery(q, now)
	if err != nil {
		v.Complete(decisionlog.StatusError, time.Since(start), nil, err.Error())
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	sum, ok := s.cfg.Log.(Summarizer)
	if !ok {
		s.failed(w, v, start, fmt.Errorf("the decision log %T cannot summarize", s.cfg.Log))
		return
	}
	out := Overview{}
	if out.Summary, err = sum.Summarize(r.Context(), f); err != nil {
		s.failed(w, v, start, err)
		return
	}
	if out.Health.Partitions, err = sum.Health(r.Context()); err != nil {
		s.failed(w, v, start, err)
		return
	}
	if wc, ok := s.cfg.Log.(writeCounter); ok {
		st := wc.Stats()
		out.Health.Writes = &st
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	policyhttp.WriteJSON(w, http.StatusOK, out)
}
