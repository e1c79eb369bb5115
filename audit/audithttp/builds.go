package audithttp

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lush-agents/lush/audit/graph"
	"github.com/lush-agents/lush/audit/review"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// The builds the console reads (console-b): the kept builds, a build's derived graph and its
// access review (with the diff against another build, as JSON or CSV). Each request is an
// audit/read decision like every other of the API, with the build and parameters in its
// arguments.

// Limits of the build analyses.
const (
	// MaxAnalyses is how many builds' loaded policies (and computed reviews) a server keeps;
	// the least recently used goes first.
	MaxAnalyses = 4
	// DefaultAnalysisTimeout bounds one decision of an analysis (a review, a replay, an
	// evaluation) unless Config.AnalysisTimeout says otherwise.
	DefaultAnalysisTimeout = 10 * time.Second
)

// BuildInfo is a kept build as GET /audit/builds lists it.
type BuildInfo struct {
	buildstore.Entry
	Deployed bool `json:"deployed"` // the build the store names as deployed (lushctl deploy)
	Serving  bool `json:"serving"`  // the build this process decides with
}

// Builds is the answer of GET /audit/builds.
type Builds struct {
	Builds   []BuildInfo `json:"builds"` // most recently built first
	Deployed string      `json:"deployed,omitempty"`
	Serving  string      `json:"serving,omitempty"`
}

// ReviewRow is a row of an access review; with ?diff, marked with how it differs from the other
// build's.
type ReviewRow struct {
	review.Row
	Change string      `json:"change,omitempty"` // added, removed or changed (with ?diff)
	Was    *review.Row `json:"was,omitempty"`    // the other build's row, for a changed one
}

// ReviewPage is the answer of GET /audit/builds/{hash}/review.
type ReviewPage struct {
	Revision string      `json:"revision"`
	Diff     string      `json:"diff,omitempty"` // the build compared with (?diff)
	Rows     []ReviewRow `json:"rows"`
}

// The changes a diff marks.
const (
	ChangeAdded   = "added"
	ChangeRemoved = "removed"
	ChangeChanged = "changed"
)

// analysis is what the server keeps of one build: its manifest, its policy and, once asked for,
// its access review.
type analysis struct {
	hash string
	m    *manifest.Manifest
	eng  *authz.Engine

	mu     sync.Mutex // guards review; held while it is computed
	review *review.Review
}

// analyses are the builds' analyses, at most MaxAnalyses, least recently used first.
type analyses struct {
	mu    sync.Mutex
	items []*analysis
}

func (a *analyses) get(hash string) *analysis {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, it := range a.items {
		if it.hash == hash {
			a.items = append(append(a.items[:i:i], a.items[i+1:]...), it)
			return it
		}
	}
	return nil
}

func (a *analyses) put(it *analysis) *analysis {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, old := range a.items {
		if old.hash == it.hash {
			return old // loaded meanwhile by another request
		}
	}
	if len(a.items) >= MaxAnalyses {
		a.items = a.items[1:]
	}
	a.items = append(a.items, it)
	return it
}

// requestError is a request that cannot be answered: the status, the error code and the message
// (which names the parameter and the fix).
type requestError struct {
	status int
	code   string
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badParam(param, format string, args ...any) *requestError {
	return &requestError{http.StatusBadRequest, "bad_request", "param " + param + ": " + fmt.Sprintf(format, args...)}
}

// answer completes v with err and writes it: a requestError as it says, anything else as a
// failure of the server (the cause goes to the server's log, not the client).
func (s *Server) answer(w http.ResponseWriter, v *enforce.Verdict, start time.Time, err error) {
	var re *requestError
	if errors.As(err, &re) {
		v.Complete(decisionlog.StatusError, time.Since(start), nil, re.msg)
		policyhttp.WriteError(w, re.status, re.code, re.msg)
		return
	}
	s.cfg.Logger.Error("audit API: the log or a build cannot be read", "decision_id", v.ID, "error", err)
	v.Complete(decisionlog.StatusError, time.Since(start), nil, err.Error())
	policyhttp.WriteError(w, http.StatusInternalServerError, "unavailable",
		fmt.Sprintf("the decision log or the build cannot be read (decision %s; the server's log has the cause)", v.ID))
}

// checkParams refuses parameters other than allowed, repeated ones, and values longer than
// maxParamLen or holding control characters.
func checkParams(q url.Values, allowed ...string) error {
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range q {
			if !yield(k) {
				return
			}
		}
	}) {
		if !slices.Contains(allowed, name) {
			if len(allowed) == 0 {
				return badParam(name, "unknown parameter (this route takes none)")
			}
			return badParam(name, "unknown parameter (the parameters are %s)", strings.Join(allowed, ", "))
		}
		if len(q[name]) != 1 {
			return badParam(name, "given %d times (give it once)", len(q[name]))
		}
		v := q[name][0]
		if len(v) > maxParamLen {
			return badParam(name, "longer than %d bytes (shorten it)", maxParamLen)
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return badParam(name, "contains a control character (remove it)")
		}
	}
	return nil
}

// resolve expands a build hash or prefix (param names it in errors).
func (s *Server) resolve(param, prefix string) (string, error) {
	if s.cfg.Builds == nil {
		return "", &requestError{http.StatusNotFound, "no_builds", "this server keeps no builds (it was started without a build store)"}
	}
	if len(prefix) < 4 || len(prefix) > 64 || strings.Trim(prefix, "0123456789abcdef") != "" {
		return "", badParam(param, "%q is not a build hash (give at least 4 hex digits of a hash GET /audit/builds lists)", prefix)
	}
	hash, err := s.cfg.Builds.Resolve(prefix)
	if err != nil {
		return "", &requestError{http.StatusNotFound, "not_found", fmt.Sprintf("param %s: no single kept build %s (GET /audit/builds lists them)", param, prefix)}
	}
	return hash, nil
}

// analysis returns the build hash (resolved) loaded: its manifest and policy.
func (s *Server) analysis(ctx context.Context, hash string) (*analysis, error) {
	if a := s.analyses.get(hash); a != nil {
		return a, nil
	}
	m, bundle, err := s.cfg.Builds.Load(hash)
	if err != nil {
		return nil, err
	}
	eng, err := authz.FromBytes(ctx, bundle, authz.Timeout(s.cfg.AnalysisTimeout))
	if err != nil {
		return nil, fmt.Errorf("load the policy of build %s: %w", manifest.Short(hash), err)
	}
	return s.analyses.put(&analysis{hash: hash, m: m, eng: eng}), nil
}

// reviewOf computes (once) the access review of a.
func (a *analysis) reviewOf(ctx context.Context) (*review.Review, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.review != nil {
		return a.review, nil
	}
	rv, err := review.Compute(ctx, a.m, a.eng)
	if err != nil {
		return nil, fmt.Errorf("review build %s: %w", manifest.Short(a.hash), err)
	}
	a.review = rv
	return rv, nil
}

// serving is the revision of the build this process decides with ("" before a deploy).
func (s *Server) serving() string {
	if eng := s.cfg.Decider.Policy().Engine(); eng != nil {
		return eng.Revision()
	}
	return ""
}

func (s *Server) builds(w http.ResponseWriter, r *http.Request) {
	v := s.authorize(w, r, map[string]any{"route": "GET /audit/builds"})
	if v == nil {
		return
	}
	start := time.Now()
	out, err := s.listBuilds(r.URL.Query())
	if err != nil {
		s.answer(w, v, start, err)
		return
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	policyhttp.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) listBuilds(q url.Values) (*Builds, error) {
	if err := checkParams(q); err != nil {
		return nil, err
	}
	out := &Builds{Builds: []BuildInfo{}, Serving: s.serving()}
	if s.cfg.Builds == nil {
		return out, nil
	}
	list, err := s.cfg.Builds.List()
	if err != nil {
		return nil, err
	}
	if out.Deployed, err = s.cfg.Builds.Current(); err != nil {
		return nil, err
	}
	for _, e := range list {
		out.Builds = append(out.Builds, BuildInfo{Entry: e, Deployed: e.Hash == out.Deployed, Serving: e.Hash == out.Serving})
	}
	return out, nil
}

func (s *Server) graph(w http.ResponseWriter, r *http.Request) {
	prefix := r.PathValue("hash")
	v := s.authorize(w, r, map[string]any{"route": "GET /audit/builds/{hash}/graph", "build": clip(prefix)})
	if v == nil {
		return
	}
	start := time.Now()
	g, err := func() (*graph.Graph, error) {
		if err := checkParams(r.URL.Query()); err != nil {
			return nil, err
		}
		hash, err := s.resolve("hash", prefix)
		if err != nil {
			return nil, err
		}
		a, err := s.analysis(r.Context(), hash)
		if err != nil {
			return nil, err
		}
		return graph.Derive(a.m, hash), nil
	}()
	if err != nil {
		s.answer(w, v, start, err)
		return
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	policyhttp.WriteJSON(w, http.StatusOK, g)
}

func (s *Server) review(w http.ResponseWriter, r *http.Request) {
	prefix := r.PathValue("hash")
	q := r.URL.Query()
	v := s.authorize(w, r, map[string]any{"route": "GET /audit/builds/{hash}/review", "build": clip(prefix), "query": queryArgs(q)})
	if v == nil {
		return
	}
	start := time.Now()
	page, asCSV, err := s.reviewPage(r, prefix, q)
	if err != nil {
		s.answer(w, v, start, err)
		return
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	if !asCSV {
		policyhttp.WriteJSON(w, http.StatusOK, page)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="access-review-%s.csv"`, manifest.Short(page.Revision)))
	w.WriteHeader(http.StatusOK)
	if err := WriteReviewCSV(w, page); err != nil {
		s.cfg.Logger.Warn("audit API: the CSV could not be written", "decision_id", v.ID, "error", err)
	}
}

func (s *Server) reviewPage(r *http.Request, prefix string, q url.Values) (*ReviewPage, bool, error) {
	if err := checkParams(q, "diff", "format"); err != nil {
		return nil, false, err
	}
	asCSV := strings.Contains(r.Header.Get("Accept"), "text/csv")
	switch f := q.Get("format"); f {
	case "":
	case "csv":
		asCSV = true
	case "json":
		asCSV = false
	default:
		return nil, false, badParam("format", "%q is not a format (use json or csv)", f)
	}
	hash, err := s.resolve("hash", prefix)
	if err != nil {
		return nil, false, err
	}
	rv, err := s.reviewBuild(r.Context(), hash)
	if err != nil {
		return nil, false, err
	}
	page := &ReviewPage{Revision: hash, Rows: make([]ReviewRow, 0, len(rv.Rows))}
	other := q.Get("diff")
	if other == "" {
		for _, row := range rv.Rows {
			page.Rows = append(page.Rows, ReviewRow{Row: row})
		}
		return page, asCSV, nil
	}
	if page.Diff, err = s.resolve("diff", other); err != nil {
		return nil, false, err
	}
	old, err := s.reviewBuild(r.Context(), page.Diff)
	if err != nil {
		return nil, false, err
	}
	page.Rows = diffRows(old, rv)
	return page, asCSV, nil
}

func (s *Server) reviewBuild(ctx context.Context, hash string) (*review.Review, error) {
	a, err := s.analysis(ctx, hash)
	if err != nil {
		return nil, err
	}
	return a.reviewOf(ctx)
}

// diffRows are the rows of next, and the rows of old that next no longer has, marked with what
// changed (review.Diff decides), in the order of subject, action, agent, tool and name.
func diffRows(old, next *review.Review) []ReviewRow {
	marks := map[string]review.Change{}
	var removed []ReviewRow
	for _, c := range review.Diff(old, next) {
		switch c.Change {
		case "revoked":
			removed = append(removed, ReviewRow{Row: *c.Old, Change: ChangeRemoved})
		default:
			marks[rowKey(*c.New)] = c
		}
	}
	rows := make([]ReviewRow, 0, len(next.Rows)+len(removed))
	for _, row := range next.Rows {
		rr := ReviewRow{Row: row}
		if c, ok := marks[rowKey(row)]; ok {
			rr.Change, rr.Was = ChangeAdded, nil
			if c.Change == "changed" {
				rr.Change, rr.Was = ChangeChanged, c.Old
			}
		}
		rows = append(rows, rr)
	}
	rows = append(rows, removed...)
	slices.SortStableFunc(rows, func(a, b ReviewRow) int { return strings.Compare(rowKey(a.Row), rowKey(b.Row)) })
	return rows
}

func rowKey(r review.Row) string {
	return strings.Join([]string{r.Subject, r.Action, r.Agent, r.Tool, r.Name}, "\x00")
}

// CSVHeader is the header of an access review's CSV; a diff's CSV has the columns change,
// was_access and was_outcome too.
var CSVHeader = []string{"subject", "action", "agent", "tool", "name", "access", "outcome", "risk", "granted_by", "conditions"}

// WriteReviewCSV writes the review as CSV (RFC 4180 quoting), every cell guarded against formula
// injection: a cell that a spreadsheet would read as a formula (starting with =, +, -, @, a tab
// or a carriage return) is written with a leading apostrophe.
func WriteReviewCSV(w interface{ Write([]byte) (int, error) }, page *ReviewPage) error {
	cw := csv.NewWriter(w)
	header := CSVHeader
	if page.Diff != "" {
		header = append([]string{"change"}, append(slices.Clone(CSVHeader), "was_access", "was_outcome")...)
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, r := range page.Rows {
		rec := []string{r.Subject, r.Action, r.Agent, r.Tool, r.Name, r.Access, r.Outcome, r.Risk,
			strings.Join(r.GrantedBy, "; "), strings.Join(r.Conditions, "; ")}
		if page.Diff != "" {
			var wasAccess, wasOutcome string
			if r.Was != nil {
				wasAccess, wasOutcome = r.Was.Access, r.Was.Outcome
			}
			rec = append([]string{cmp.Or(r.Change, "same")}, append(rec, wasAccess, wasOutcome)...)
		}
		for i := range rec {
			rec[i] = CSVCell(rec[i])
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// CSVCell guards a cell against formula injection (see WriteReviewCSV).
func CSVCell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// clip bounds a path value kept in a decision's arguments.
func clip(s string) string {
	if len(s) > maxParamLen {
		return s[:maxParamLen]
	}
	return s
}
