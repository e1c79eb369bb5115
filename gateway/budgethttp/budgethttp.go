// Package budgethttp serves the project's budgets: their usage in the current period, and
// top-ups (lushctl budget uses it).
//
// Routes (see Server.Handler):
//
//	GET  /budgets?budget=…&subject=…     usage of the current period: every budget (or one), by
//	                                     every subject that used it (or one)
//	POST /budgets/{name}/top-up          {"subject": "…", "amount": N, "reason": "…"}: adds N units
//	                                     to the subject's current period of the budget
//
// Every request is authenticated and decided with the shared policy (policyhttp): reading needs
// the budget or audit role (action budget/read), a top-up the budget role (budget/top-up). Each
// of those decisions is in the decision log with what was asked in its arguments, and a top-up's
// grant is applied in the same transaction as its allowing decision: the log says who added how
// much to which budget, and why, and no grant exists without its decision.
package budgethttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/budget"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// Point is the API's name as an enforcement point in decision-log events.
const Point = "budgets-api"

// Limits of what a request may send.
const (
	maxReasonLen  = 2000
	maxSubjectLen = 256
	maxBodyBytes  = 16 << 10
)

// Config is what a Server needs.
type Config struct {
	Store   budget.Store             // where usage is read: the decision log
	Decider *enforce.Enforcer        // the process's shared policy (point budgets-api); its engine gives the budgets
	Auth    policyhttp.Authenticator // who is asking
	Logger  *slog.Logger             // optional: store failures
	// AuthFailures counts and logs failed authentications (optional; one per process).
	AuthFailures *identity.Failures
}

// Server serves the API. It is safe for concurrent use.
type Server struct {
	cfg  Config
	gate *policyhttp.Gate
}

// New checks cfg and returns a server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Decider == nil || cfg.Auth == nil {
		return nil, errors.New("budgethttp: a store, a decider and an authenticator are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, gate: &policyhttp.Gate{Decider: cfg.Decider, Auth: cfg.Auth, Failures: cfg.AuthFailures}}, nil
}

// Handler serves the API under /budgets.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /budgets", s.list)
	mux.HandleFunc("POST /budgets/{name}/top-up", s.topUp)
	mux.HandleFunc("/budgets", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET, HEAD")
		policyhttp.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET /budgets reads usage; top up with POST /budgets/{name}/top-up")
	})
	mux.HandleFunc("/budgets/{name}/top-up", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "POST")
		policyhttp.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", "a top-up is a POST")
	})
	mux.HandleFunc("/budgets/", func(w http.ResponseWriter, r *http.Request) {
		policyhttp.WriteError(w, http.StatusNotFound, "not_found", "no such route: the budgets API serves GET /budgets and POST /budgets/{name}/top-up")
	})
	return mux
}

// List is the answer of GET /budgets.
type List struct {
	Budgets []budget.Status `json:"budgets"`
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name, subject := q.Get("budget"), q.Get("subject")
	args := map[string]any{"route": "GET /budgets"}
	if name != "" {
		args["budget"] = name
	}
	if subject != "" {
		args["subject"] = subject
	}
	v, _ := s.gate.Authorize(w, r, authz.Input{Action: authz.ActionBudgetRead, Arguments: args}, "reading budget usage")
	if v == nil {
		return
	}
	start := time.Now()
	budgets := budget.FromEngine(s.cfg.Decider.Engine())
	if name != "" && find(budgets, name) == nil {
		msg := unknownBudget(name, budgets)
		v.Complete(decisionlog.StatusError, time.Since(start), nil, msg)
		policyhttp.WriteError(w, http.StatusNotFound, "not_found", msg)
		return
	}
	out, err := budget.Report(r.Context(), s.cfg.Store, budgets, s.now(), name, subject)
	if err != nil {
		s.unavailable(w, v, start, err)
		return
	}
	if out == nil {
		out = []budget.Status{}
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	policyhttp.WriteJSON(w, http.StatusOK, List{Budgets: out})
}

// TopUp is the body of POST /budgets/{name}/top-up.
type TopUp struct {
	Subject string `json:"subject"` // whose usage; the agent (or the one principal) by default
	Amount  int64  `json:"amount"`  // units to add to the current period
	Reason  string `json:"reason"`  // why: required, kept in the decision log
}

// TopUpResult is the answer of a top-up: the decision that granted it and the budget after it.
type TopUpResult struct {
	DecisionID string        `json:"decision_id"`
	Amount     int64         `json:"amount"`
	Status     budget.Status `json:"status"`
}

func (s *Server) topUp(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var body TopUp
	bodyErr := decodeBody(w, r, &body)
	budgets := budget.FromEngine(s.cfg.Decider.Engine())
	b := find(budgets, name)
	if b != nil && body.Subject == "" {
		body.Subject = b.OwnSubject()
	}
	// What was asked goes into the decision's arguments, valid or not.
	args := map[string]any{"route": "POST /budgets/{name}/top-up", "budget": name, "subject": body.Subject, "amount": body.Amount, "reason": body.Reason}
	problem, code := "", http.StatusBadRequest
	switch {
	case bodyErr != nil:
		problem = bodyErr.Error()
		args["body_error"] = problem
	case b == nil:
		problem, code = unknownBudget(name, budgets), http.StatusNotFound
	case body.Amount < 1 || body.Amount > manifest.MaxBudgetLimit:
		problem = fmt.Sprintf("amount must be a whole number from 1 to %d", int64(manifest.MaxBudgetLimit))
	case strings.TrimSpace(body.Reason) == "":
		problem = "reason is required: say why the budget is topped up (it is kept in the decision log)"
	case len(body.Reason) > maxReasonLen:
		problem = fmt.Sprintf("reason is longer than %d bytes", maxReasonLen)
	case body.Subject == "":
		problem = fmt.Sprintf("subject is required: budget %s counts each caller, so name the principal to top up, such as user:alice", name)
	case len(body.Subject) > maxSubjectLen:
		problem = fmt.Sprintf("subject is longer than %d bytes", maxSubjectLen)
	default:
		if err := b.CheckSubject(body.Subject); err != nil {
			problem = "subject: " + err.Error()
		}
	}
	ctx := r.Context()
	var charge []enforce.Option // the grant is charged with the decision that allows it
	now := s.now()
	if problem == "" {
		start, _ := b.Period(now)
		charge = append(charge, enforce.WithCharges([]decisionlog.Charge{{Budget: b.Name, Subject: body.Subject, Period: start, Granted: body.Amount}}))
	}
	v, _ := s.gate.Authorize(w, r, authz.Input{Action: authz.ActionBudgetTopUp, Arguments: args}, "topping up a budget", charge...)
	if v == nil {
		return
	}
	started := time.Now()
	if problem != "" {
		v.Complete(decisionlog.StatusError, time.Since(started), nil, problem)
		kind := "bad_request"
		if code == http.StatusNotFound {
			kind = "not_found"
		}
		policyhttp.WriteJSON(w, code, map[string]any{"error": map[string]any{"code": kind, "message": problem, "decision_id": v.ID}})
		return
	}
	res := TopUpResult{DecisionID: v.ID, Amount: body.Amount}
	st, err := budget.Report(ctx, s.cfg.Store, []budget.Budget{*b}, now, b.Name, body.Subject)
	if err != nil || len(st) == 0 {
		// The grant is committed with the decision; only the answer's status is missing.
		s.cfg.Logger.Error("budgets API: read usage after a top-up", "budget", b.Name, "error", err)
		start, end := b.Period(now)
		st = []budget.Status{{Budget: b.Name, Agent: b.Agent, Principal: b.Principal, Subject: body.Subject, Unit: b.Unit, Per: b.Per,
			Limit: b.Limit, Granted: body.Amount, Remaining: b.Limit + body.Amount, Period: start, Resets: end}}
	}
	res.Status = st[0]
	v.Complete(decisionlog.StatusOK, time.Since(started), mustJSON(res), "")
	policyhttp.WriteJSON(w, http.StatusOK, res)
}

// decodeBody reads a JSON body of at most maxBodyBytes into v; its error names the problem.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return fmt.Errorf("the body is larger than %d bytes", maxBodyBytes)
		case errors.Is(err, io.EOF):
			return errors.New(`the body is empty: send {"subject": "…", "amount": N, "reason": "…"}`)
		}
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field == "amount" {
			return errors.New("amount must be a whole number")
		}
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return fmt.Errorf("%s must be a string", typeErr.Field)
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fmt.Errorf("unknown field %s: the fields are subject, amount and reason", f)
		}
		return errors.New(`the body is not valid JSON: send {"subject": "…", "amount": N, "reason": "…"}`)
	}
	return nil
}

func (s *Server) unavailable(w http.ResponseWriter, v *enforce.Verdict, start time.Time, err error) {
	s.cfg.Logger.Error("budgets API: read usage", "error", err)
	v.Complete(decisionlog.StatusUnavailable, time.Since(start), nil, err.Error())
	policyhttp.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]any{"code": "unavailable",
		"message": "budget usage cannot be read from the decision log right now", "decision_id": v.ID}})
}

func (s *Server) now() time.Time {
	if l := s.cfg.Decider.Budgets(); l != nil {
		return l.Now()
	}
	return time.Now().UTC()
}

func find(budgets []budget.Budget, name string) *budget.Budget {
	for i := range budgets {
		if budgets[i].Name == name {
			return &budgets[i]
		}
	}
	return nil
}

func unknownBudget(name string, budgets []budget.Budget) string {
	if len(budgets) == 0 {
		return fmt.Sprintf("there is no budget %q: the deployed build has no budgets (lush.yaml budgets:)", name)
	}
	names := make([]string, 0, len(budgets))
	for _, b := range budgets {
		names = append(names, b.Name)
	}
	return fmt.Sprintf("there is no budget %q; the budgets are: %s", name, strings.Join(names, ", "))
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
