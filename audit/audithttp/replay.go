package audithttp

import (
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/lush-agents/lush/audit/replay"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// Replay's bounds.
const (
	// DefaultReplayWindow is the window a replay reads when since is not given.
	DefaultReplayWindow = 24 * time.Hour
	// MaxReplayWindow is the widest window (since to until) a replay may read.
	MaxReplayWindow = 90 * 24 * time.Hour
)

// ReplayPage is the answer of GET /audit/replay: what the candidate build would change in a
// window of the log.
type ReplayPage struct {
	replay.Summary
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Truncated is true when the window holds more decisions than were replayed (limit): the
	// newest were replayed; narrow the window or the filters to see the rest.
	Truncated bool `json:"truncated"`
}

// replay serves GET /audit/replay?build=HASH&since=…&until=…&<filters of /audit/decisions>:
// the logged decisions of the window (newest first, at most limit, default and most MaxLimit)
// decided again with the build's policy.
func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.RawQuery) > maxQueryLen {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", "the query string is too long: narrow the filters")
		return
	}
	q := r.URL.Query()
	v := s.authorize(w, r, map[string]any{"route": "GET /audit/replay", "query": queryArgs(q)})
	if v == nil {
		return
	}
	start := time.Now()
	page, err := s.replayWindow(r, q, v.ID)
	if err != nil {
		s.answer(w, v, start, err)
		return
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	policyhttp.WriteJSON(w, http.StatusOK, page)
}

func (s *Server) replayWindow(r *http.Request, q url.Values, self string) (*ReplayPage, error) {
	if len(q["build"]) != 1 || q.Get("build") == "" {
		return nil, badParam("build", "required once: the candidate build to decide with (a hash or prefix GET /audit/builds lists)")
	}
	filters := url.Values{}
	for k, vs := range q {
		if k != "build" {
			filters[k] = vs
		}
	}
	now := s.cfg.Now()
	f, err := ParseQuery(filters, now)
	if err != nil {
		pe := err.(*ParamError)
		return nil, &requestError{http.StatusBadRequest, "bad_request", pe.Error()}
	}
	if filters.Get("limit") == "" {
		f.Limit = MaxLimit
	}
	if f.Until.IsZero() {
		f.Until = now
	}
	if f.Since.IsZero() {
		f.Since = f.Until.Add(-DefaultReplayWindow)
	}
	if f.Until.Sub(f.Since) > MaxReplayWindow {
		return nil, badParam("since", "the window from since to until is longer than %s (narrow it)", MaxReplayWindow)
	}
	hash, err := s.resolve("build", q.Get("build"))
	if err != nil {
		return nil, err
	}
	a, err := s.analysis(r.Context(), hash)
	if err != nil {
		return nil, err
	}
	limit := f.Limit
	f.Limit += 2 // this request's own decision, and one to know whether there are more
	recs, err := s.cfg.Log.Query(r.Context(), f)
	if err != nil {
		return nil, err
	}
	recs = slices.DeleteFunc(recs, func(rec decisionlog.Record) bool { return rec.Event.DecisionID == self })
	page := &ReplayPage{Since: f.Since.UTC(), Until: f.Until.UTC()}
	if len(recs) > limit {
		recs, page.Truncated = recs[:limit], true
	}
	page.Summary = replay.Run(r.Context(), a.eng, recs)
	return page, nil
}
