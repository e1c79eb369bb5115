// Package approvalhttp serves the approvals of calls that wait for a person: the people who hold
// the approve role list them and approve or deny them here (lushctl approvals uses it).
//
// Routes (see Server.Handler):
//
//	GET  /approvals?status=pending&limit=100   approvals, newest first (status: pending, approved,
//	                                           denied, expired, consumed or all)
//	GET  /approvals/{id}                       one approval, with the call's logged arguments
//	POST /approvals/{id}                       {"decision": "approve" | "deny", "reason": "…"}
//	GET  /approvals/{id}/page                  the approval as an HTML page, with Approve and Deny
//	POST /approvals/{id}/page                  the page's form (decision, reason), same origin only
//
// Every request is authenticated and decided with the shared policy (policyhttp): reading needs
// the approve or audit role (action approval/read), deciding the approve role and not being the
// principal whose call waits (approval/decide). Each of those decisions is in the decision log,
// with the approval, the decision and the reason in its arguments, so the log says who approved
// or denied what, and why. The page is where an in-band approval request (an elicitation in URL
// mode, or an input_required result) sends the caller: what the call is and why it needs a
// person, for anyone who may read approvals, and the decision for those who may decide it. The
// waiting call (at any gateway replica sharing the store) sees the decision on its next read of
// the store.
package approvalhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// Point is the API's name as an enforcement point in decision-log events.
const Point = "approvals-api"

// Limits of what a request may send.
const (
	maxReasonLen = 2000
	maxBodyBytes = 16 << 10
	maxIDLen     = 128
)

// Querier reads decisions: *decisionlog.Log and *decisionlog.Reader implement it. The API uses it
// to show the (masked) arguments of the call an approval is for.
type Querier interface {
	Query(ctx context.Context, f decisionlog.Filter) ([]decisionlog.Record, error)
}

// Config is what a Server needs.
type Config struct {
	Store   *decisionlog.Approvals   // the approvals the gateways wait on
	Log     Querier                  // the decision log, for the calls' arguments
	Decider *enforce.Enforcer        // the process's shared policy (point approvals-api)
	Auth    policyhttp.Authenticator // who is asking
	Logger  *slog.Logger             // optional: store failures
	// AuthFailures counts and logs failed authentications (optional; one per process).
	AuthFailures *identity.Failures
}

// Server serves the API. It is safe for concurrent use.
type Server struct {
	cfg      Config
	gate     *policyhttp.Gate
	pageGate *policyhttp.Gate // the same gate, answering refusals as a page
}

// New checks cfg and returns a server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Log == nil || cfg.Decider == nil || cfg.Auth == nil {
		return nil, errors.New("approvalhttp: a store, a decision log, a decider and an authenticator are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, gate: &policyhttp.Gate{Decider: cfg.Decider, Auth: cfg.Auth, Failures: cfg.AuthFailures},
		pageGate: &policyhttp.Gate{Decider: cfg.Decider, Auth: cfg.Auth, Failures: cfg.AuthFailures, WriteRefusal: writePageRefusal}}, nil
}

// Handler serves the API under /approvals.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /approvals", s.list)
	mux.HandleFunc("GET /approvals/{id}", s.get)
	mux.HandleFunc("POST /approvals/{id}", s.decide)
	mux.HandleFunc("GET /approvals/{id}/page", s.page)
	mux.HandleFunc("POST /approvals/{id}/page", s.decidePage)
	mux.HandleFunc("/approvals", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET, HEAD")
		policyhttp.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET /approvals lists approvals; POST /approvals/{id} decides one")
	})
	mux.HandleFunc("/approvals/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET, HEAD, POST")
		policyhttp.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET /approvals/{id} reads an approval; POST decides it")
	})
	return mux
}

// Item is an approval as the API shows it: the stored approval and the call's arguments as the
// decision log holds them (masked by the policy).
type Item struct {
	decisionlog.Approval
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Page is the answer of GET /approvals.
type Page struct {
	Approvals []Item `json:"approvals"`
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	status := q.Get("status")
	args := map[string]any{"route": "GET /approvals", "status": status}
	f := decisionlog.ApprovalFilter{Status: status}
	switch status {
	case "":
		f.Status = decisionlog.ApprovalPending
	case "all":
		f.Status = ""
	default:
		if !slices.Contains(decisionlog.ApprovalStates, status) {
			policyhttp.WriteError(w, http.StatusBadRequest, "bad_request",
				fmt.Sprintf("status=%.40q: use one of %s, or all", status, strings.Join(decisionlog.ApprovalStates, ", ")))
			return
		}
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", "limit: a whole number from 1 to 1000")
			return
		}
		f.Limit = n
	}
	v, _ := s.gate.Authorize(w, r, authz.Input{Action: authz.ActionApprovalRead, Arguments: args}, "reading approvals")
	if v == nil {
		return
	}
	start := time.Now()
	list, err := s.cfg.Store.List(r.Context(), f)
	if err != nil {
		s.failed(w, v, start, err)
		return
	}
	page := Page{Approvals: make([]Item, 0, len(list))}
	for _, ap := range list {
		page.Approvals = append(page.Approvals, Item{Approval: ap, Arguments: s.arguments(r.Context(), ap.ID)})
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	policyhttp.WriteJSON(w, http.StatusOK, page)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if len(id) > maxIDLen {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", "the approval id is too long: use the id lushctl approvals list shows")
		return
	}
	v, _ := s.gate.Authorize(w, r, authz.Input{Action: authz.ActionApprovalRead, Arguments: map[string]any{"route": "GET /approvals/{id}", "approval": id}}, "reading approvals")
	if v == nil {
		return
	}
	start := time.Now()
	ap, err := s.cfg.Store.Get(r.Context(), id)
	switch {
	case errors.Is(err, decisionlog.ErrNoApproval):
		v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
		policyhttp.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no approval %q (GET /approvals lists the pending ones)", id))
		return
	case err != nil:
		s.failed(w, v, start, err)
		return
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	policyhttp.WriteJSON(w, http.StatusOK, Item{Approval: ap, Arguments: s.arguments(r.Context(), ap.ID)})
}

// Decision is the body of POST /approvals/{id}.
type Decision struct {
	Decision string `json:"decision"` // approve or deny
	Reason   string `json:"reason"`
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if len(id) > maxIDLen {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", "the approval id is too long: use the id lushctl approvals list shows")
		return
	}
	var body Decision
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request",
			fmt.Sprintf(`the body must be JSON {"decision": "approve" or "deny", "reason": "..."}: %v`, err))
		return
	}
	if msg := body.problem(); msg != "" {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", msg)
		return
	}
	res, ok := s.decideOne(w, r, s.gate, id, body, "POST /approvals/{id}")
	if !ok {
		return
	}
	switch res.status {
	case http.StatusOK:
		policyhttp.WriteJSON(w, http.StatusOK, Item{Approval: res.approval, Arguments: s.arguments(r.Context(), res.approval.ID)})
	case http.StatusConflict:
		policyhttp.WriteJSON(w, http.StatusConflict, map[string]any{"error": map[string]any{"code": res.code, "message": res.message,
			"decision_id": res.decisionID}, "approval": res.approval})
	default:
		policyhttp.WriteError(w, res.status, res.code, res.message)
	}
}

// problem says what is wrong with a decision's body, or "" when nothing is.
func (d Decision) problem() string {
	if d.Decision != "approve" && d.Decision != "deny" {
		return `decision: "approve" or "deny"`
	}
	if len(d.Reason) > maxReasonLen {
		return fmt.Sprintf("reason: at most %d bytes", maxReasonLen)
	}
	return ""
}

// decided is how deciding an approval ended, for the route that asked to answer in its own
// format: 200 (approval as decided), 404, 409 (approval as it is: no longer pending) or 503.
type decided struct {
	status        int
	code, message string
	decisionID    string
	approval      decisionlog.Approval
}

// decideOne decides approval id as body says, for the caller of r, behind an approval/decide
// decision logged with route, let in by gate. It reports false when the request was refused and answered (401,
// 403, 503 from the gate).
func (s *Server) decideOne(w http.ResponseWriter, r *http.Request, gate *policyhttp.Gate, id string, body Decision, route string) (decided, bool) {
	// The policy needs whose call it is (nobody decides their own), so the approval is read
	// before the decision; an unknown id is answered only to those allowed to decide.
	ap, err := s.cfg.Store.Get(r.Context(), id)
	found := err == nil
	if err != nil && !errors.Is(err, decisionlog.ErrNoApproval) {
		s.cfg.Logger.Error("approvals API: the store cannot be read", "approval", id, "error", err)
		return decided{status: http.StatusServiceUnavailable, code: "store_unavailable", message: "the approvals store cannot be read; try again"}, true
	}
	args := map[string]any{"route": route, "approval": id, "decision": body.Decision, "reason": body.Reason}
	if found {
		args["requester"], args["agent"], args["tool"], args["tool_name"] = ap.Principal, ap.Agent, ap.Tool, ap.ToolName
	}
	v, caller := gate.Authorize(w, r, authz.Input{Action: authz.ActionApprovalDecide, Arguments: args}, "deciding approvals")
	if v == nil {
		return decided{}, false
	}
	start := time.Now()
	if !found {
		v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
		return decided{status: http.StatusNotFound, code: "not_found", message: fmt.Sprintf("no approval %q (GET /approvals lists the pending ones)", id)}, true
	}
	ap, err = s.cfg.Store.Decide(r.Context(), id, body.Decision == "approve", caller.ID, body.Reason, v.ID)
	var np *decisionlog.NotPendingError
	switch {
	case errors.As(err, &np):
		v.Complete(decisionlog.StatusError, time.Since(start), nil, np.Error())
		return decided{status: http.StatusConflict, code: "not_pending", message: np.Error(), decisionID: v.ID, approval: np.Approval}, true
	case err != nil:
		s.cfg.Logger.Error("approvals API: the store failed", "decision_id", v.ID, "error", err)
		v.Complete(decisionlog.StatusError, time.Since(start), nil, err.Error())
		return decided{status: http.StatusServiceUnavailable, code: "store_unavailable",
			message: fmt.Sprintf("the approvals store cannot be used (decision %s; the server's log has the cause); try again", v.ID)}, true
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	return decided{status: http.StatusOK, decisionID: v.ID, approval: ap}, true
}

// arguments returns the call's arguments as its approval_required decision was logged (masked),
// or nothing when the log cannot say.
func (s *Server) arguments(ctx context.Context, id string) json.RawMessage {
	recs, err := s.cfg.Log.Query(ctx, decisionlog.Filter{DecisionID: id, Limit: 2})
	if err != nil {
		s.cfg.Logger.Warn("approvals API: the decision log cannot be read", "approval", id, "error", err)
		return nil
	}
	for _, rec := range recs {
		if rec.Event.DecisionID != id {
			continue
		}
		var in struct {
			Arguments json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal(rec.Event.Input, &in) == nil {
			return in.Arguments
		}
	}
	return nil
}

// failed answers a store that cannot be read or written; the cause goes to the server's log and
// the decision's completion, not to the client.
func (s *Server) failed(w http.ResponseWriter, v *enforce.Verdict, start time.Time, err error) {
	s.cfg.Logger.Error("approvals API: the store failed", "decision_id", v.ID, "error", err)
	v.Complete(decisionlog.StatusError, time.Since(start), nil, err.Error())
	policyhttp.WriteError(w, http.StatusServiceUnavailable, "store_unavailable",
		fmt.Sprintf("the approvals store cannot be used (decision %s; the server's log has the cause); try again", v.ID))
}
