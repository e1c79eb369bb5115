// Package audithttp serves the decision log to auditors: the JSON query API and the read-only web
// UI.
//
// Routes (see Server.Handler):
//
//	GET /audit/decisions?principal=…&since=24h&…   decisions, newest first, a page at a time
//	GET /audit/decisions/{id}                       one decision with its completion
//	GET /audit/decisions/{id}/context               its rules described (file:line) and its chain position
//	GET /audit/stats?since=24h&bucket=1h&top=10     the overview: counts by outcome over time, tops, health
//	GET /audit/traces/{id}                          an agent invocation's trace, span by span
//	GET /audit/builds                               the kept builds (deployed, serving)
//	GET /audit/builds/{hash}/graph                  a build's derived graph of who may call whom
//	GET /audit/builds/{hash}/review?diff=…&format=…  its access review, a diff, CSV
//	GET /audit/replay?build=…&since=…&…             a window of the log decided again by a build
//	POST /audit/eval                                one input evaluated and explained (the playground)
//	GET /ui/                                        the web UI (static files; /ui redirects here)
//
// Every API request is authenticated, then decided with the shared policy as action audit/read:
// some principal of the caller's match set must hold the audit role (lush.yaml roles:). The
// decision is logged like every other, so a read of the log is itself in the log, with what was
// asked for in its input's arguments. A denial answers 403 with its decision id and reasons. The
// UI's static files hold no data and need no credentials; the page sends the auditor's bearer
// token with each API request.
//
// The package reads the log through Querier, so any store with the decision log's query can be
// served.
package audithttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/tracestore"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// ActionRead is the policy action of every API request: reading the decision log.
const ActionRead = authz.ActionAuditRead

// Point is the API's name as an enforcement point in decision-log events.
const Point = "audit-api"

// HeaderDecisionID carries the id of the audit/read decision that let a request through (or
// refused it), so that an auditor can find their own read in the log.
const HeaderDecisionID = policyhttp.HeaderDecisionID

// Querier reads decisions: *decisionlog.Log and *decisionlog.Reader implement it.
type Querier interface {
	Query(ctx context.Context, f decisionlog.Filter) ([]decisionlog.Record, error)
}

// Authenticator identifies callers: *identity.Authenticator implements it.
type Authenticator = policyhttp.Authenticator

// Config is what a Server needs.
type Config struct {
	Log     Querier           // the decision log to serve
	Decider *enforce.Enforcer // decides audit/read and logs the decision (the process's shared policy)
	Auth    Authenticator     // who is asking
	Logger  *slog.Logger      // optional: failures to read the log
	Now     func() time.Time
	// AuthFailures counts and logs failed authentications (optional; one per process).
	AuthFailures *identity.Failures
	// Builds is the store of kept builds (optional): a decision's page describes the rules of
	// the build that decided when it is not the serving one, and the console's build pages read
	// it (without it, the build routes answer 404 and the playground evaluates with the serving
	// build).
	Builds *buildstore.Store
	// Traces is the trace store the process keeps (optional): GET /audit/traces/{id}.
	Traces tracestore.Store
	// AnalysisTimeout bounds one decision of a review, replay or evaluation (default
	// DefaultAnalysisTimeout).
	AnalysisTimeout time.Duration
}

// Server serves the API and the UI. It is safe for concurrent use.
type Server struct {
	cfg      Config
	gate     *policyhttp.Gate
	catalogs ruleCatalogs // the rule catalogs of builds that decided (decision.go)
	analyses analyses     // the builds' loaded policies and reviews
}

// New checks cfg and returns a server.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Log == nil:
		return nil, errors.New("audithttp: a decision log to read is required")
	case cfg.Decider == nil:
		return nil, errors.New("audithttp: a decider (the shared enforcer) is required")
	case cfg.Auth == nil:
		return nil, errors.New("audithttp: an authenticator is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AnalysisTimeout <= 0 {
		cfg.AnalysisTimeout = DefaultAnalysisTimeout
	}
	return &Server{cfg: cfg, gate: &policyhttp.Gate{Decider: cfg.Decider, Auth: cfg.Auth, Failures: cfg.AuthFailures}}, nil
}

// Handler serves the API under /audit/ and the UI under /ui and /ui/.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	wrongMethod := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET, HEAD")
		policyhttp.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the audit API is read-only: use GET")
	}
	mux.HandleFunc("GET /audit/decisions", s.list)
	mux.HandleFunc("GET /audit/decisions/{id}", s.get)
	// console-a routes: the console's overview, a decision's context, a trace.
	mux.HandleFunc("GET /audit/stats", s.stats)
	mux.HandleFunc("GET /audit/decisions/{id}/context", s.decisionContext)
	mux.HandleFunc("GET /audit/traces/{id}", s.trace)
	mux.HandleFunc("/audit/stats", wrongMethod)
	mux.HandleFunc("/audit/decisions/{id}/context", wrongMethod)
	mux.HandleFunc("/audit/traces/{id}", wrongMethod)
	mux.HandleFunc("/audit/decisions", wrongMethod)
	mux.HandleFunc("/audit/decisions/{id}", wrongMethod)
	// console-b routes: the builds (their graph and access review), replay, the policy playground.
	mux.HandleFunc("GET /audit/builds", s.builds)
	mux.HandleFunc("GET /audit/builds/{hash}/graph", s.graph)
	mux.HandleFunc("GET /audit/builds/{hash}/review", s.review)
	mux.HandleFunc("GET /audit/replay", s.replay)
	mux.HandleFunc("POST /audit/eval", s.eval)
	for _, route := range []string{"/audit/builds", "/audit/builds/{hash}/graph", "/audit/builds/{hash}/review", "/audit/replay"} {
		mux.HandleFunc(route, wrongMethod)
	}
	mux.HandleFunc("/audit/eval", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "POST")
		policyhttp.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", "an evaluation is asked for with POST and a JSON body")
	})

	mux.HandleFunc("/audit/", func(w http.ResponseWriter, r *http.Request) {
		policyhttp.WriteError(w, http.StatusNotFound, "not_found", "no such route: the audit API serves GET /audit/decisions[/{id}[/context]], "+
			"GET /audit/stats, GET /audit/traces/{id}, GET /audit/builds, GET /audit/builds/{hash}/graph and /review, GET /audit/replay and POST /audit/eval (docs/audit-api.md)")
	})
	ui := UI()
	mux.Handle("/ui", ui)
	mux.Handle("/ui/", ui)
	return mux
}

// authorize authenticates the request and decides audit/read for it with args as the input's
// arguments. It answers the request itself and returns nil unless the read is allowed.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, args map[string]any) *enforce.Verdict {
	v, _ := s.gate.Authorize(w, r, authz.Input{Action: ActionRead, Arguments: args}, "reading the decision log")
	return v
}

// Page is the answer of GET /audit/decisions.
type Page struct {
	Decisions []decisionlog.Record `json:"decisions"`
	// NextBefore is the seq of the last decision on the page, to ask for the next (older) page
	// with before=; zero (omitted) when there are no more.
	NextBefore int64 `json:"next_before,omitempty"`
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.RawQuery) > maxQueryLen {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("the query string is longer than %d bytes: narrow the filters", maxQueryLen))
		return
	}
	q := r.URL.Query()
	args := map[string]any{"route": "GET /audit/decisions", "query": queryArgs(q)}
	v := s.authorize(w, r, args)
	if v == nil {
		return
	}
	start := time.Now()
	f, err := ParseQuery(q, s.cfg.Now())
	if err != nil {
		v.Complete(decisionlog.StatusError, time.Since(start), nil, err.Error())
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	// The answer is the log as it was before this read: the read's own decision, logged just
	// now (and, as the newest, first if it matches), is left out. Two more than a page are asked
	// for: one for that decision, one to know whether there is a next page.
	limit := f.Limit
	f.Limit += 2
	recs, err := s.cfg.Log.Query(r.Context(), f)
	if err != nil {
		s.failed(w, v, start, err)
		return
	}
	recs = slices.DeleteFunc(recs, func(rec decisionlog.Record) bool { return rec.Event.DecisionID == v.ID })
	page := Page{Decisions: recs}
	if len(recs) > limit {
		page.Decisions = recs[:limit]
		page.NextBefore = recs[limit-1].Seq
	}
	if page.Decisions == nil {
		page.Decisions = []decisionlog.Record{}
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	policyhttp.WriteJSON(w, http.StatusOK, page)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	args := map[string]any{"route": "GET /audit/decisions/{id}", "decision_id": id}
	if len(id) > maxParamLen {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("the decision id is longer than %d bytes: use the id as the log shows it", maxParamLen))
		return
	}
	v := s.authorize(w, r, args)
	if v == nil {
		return
	}
	start := time.Now()
	rec, err := s.find(r.Context(), id)
	if err != nil {
		s.failed(w, v, start, err)
		return
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	if rec == nil {
		policyhttp.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no decision %q in the log (GET /audit/decisions?decision_id=<prefix> finds one by a prefix of its id)", id))
		return
	}
	policyhttp.WriteJSON(w, http.StatusOK, rec)
}

// find returns the decision whose id is exactly id, or nil. The log's filter matches prefixes,
// so it pages through the (few) decisions whose id starts with id.
func (s *Server) find(ctx context.Context, id string) (*decisionlog.Record, error) {
	f := decisionlog.Filter{DecisionID: id, Limit: DefaultLimit}
	for {
		recs, err := s.cfg.Log.Query(ctx, f)
		if err != nil {
			return nil, err
		}
		for i := range recs {
			if recs[i].Event.DecisionID == id {
				return &recs[i], nil
			}
		}
		if len(recs) < f.Limit {
			return nil, nil
		}
		f.BeforeSeq = recs[len(recs)-1].Seq
	}
}

// failed answers a log that cannot be read. The error, which may name files, goes to the log of
// the server and to the completion of the decision, not to the client.
func (s *Server) failed(w http.ResponseWriter, v *enforce.Verdict, start time.Time, err error) {
	s.cfg.Logger.Error("audit API: the decision log cannot be read", "decision_id", v.ID, "error", err)
	v.Complete(decisionlog.StatusError, time.Since(start), nil, err.Error())
	policyhttp.WriteError(w, http.StatusInternalServerError, "log_unavailable",
		fmt.Sprintf("the decision log cannot be read (decision %s; the server's log has the cause)", v.ID))
}

// queryArgs is the query as the input's arguments: each parameter's value, or its values when
// given more than once.
func queryArgs(q map[string][]string) map[string]any {
	out := make(map[string]any, len(q))
	for k, vs := range q {
		if len(vs) == 1 {
			out[k] = vs[0]
		} else {
			out[k] = vs
		}
	}
	return out
}
