package scheduler

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// maxTriggerBody bounds a trigger request.
const maxTriggerBody = 64 << 10

// Handler serves the scheduler's HTTP API:
//
//	GET  /loops                        the loops the caller may read, with their next and last firing
//	GET  /loops/{name}/history         the loop's firings, newest first (?limit=50&before=<RFC 3339>)
//	POST /loops/{name}/trigger         fire the loop now: {"instruction": "...", "wait": true}
//
// A trigger that waits answers 102 Processing (an interim response) as soon as the firing is
// recorded, so that a client can tell an accepted trigger that runs from one still being decided.
//
// Every route authenticates the caller through the process's one gate, then decides with the
// shared policy (Options.Policy): loop/read (read or execute in the loop's acl) to list and read
// history, loop/trigger (execute) to trigger. Each decision is in the decision log; a denial
// answers 403 with its decision id and reasons (404 for a loop the build does not have).
func (s *Scheduler) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /loops", s.gate.Authenticated(http.HandlerFunc(s.list)))
	mux.Handle("GET /loops/{loop}/history", s.gate.Authenticated(http.HandlerFunc(s.history)))
	mux.Handle("POST /loops/{loop}/trigger", s.gate.Authenticated(http.HandlerFunc(s.trigger)))
	return mux
}

// ruleUnknownLoop is the policy's denial of a loop the build does not have.
const ruleUnknownLoop = "lush.loop.unknown"

// newGate is the scheduler API's gate: the process's policy decides, at enforcement point Point.
// Without a policy, every request is refused (503): nothing decides it.
func newGate(opts Options) *policyhttp.Gate {
	var decider *enforce.Enforcer
	if opts.Policy != nil {
		decider = opts.Policy.Enforcer(Point)
	} else {
		decider = enforce.NewPolicy(enforce.Config{}).Enforcer(Point) // no engine, no log: refuses
	}
	return &policyhttp.Gate{Auth: opts.Auth, Failures: opts.AuthFailures, Decider: decider, NotFound: []string{ruleUnknownLoop}}
}

func (s *Scheduler) list(w http.ResponseWriter, r *http.Request) {
	caller := identity.CallerFrom(r.Context())
	loops, err := s.Loops(r.Context())
	if err != nil {
		policyhttp.WriteError(w, http.StatusInternalServerError, "store_error", err.Error())
		return
	}
	visible := []LoopInfo{}
	for _, l := range loops {
		if v := s.gate.Decide(r.Context(), caller, authz.Input{Action: authz.ActionLoopRead, Loop: l.Name}); v.Allow && v.Outcome == authz.OutcomeAllow {
			visible = append(visible, l)
		}
	}
	policyhttp.WriteJSON(w, http.StatusOK, map[string]any{"loops": visible})
}

func (s *Scheduler) history(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("loop")
	q := r.URL.Query()
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit=%q: give a number from 1 to 1000", v))
			return
		}
		limit = n
	}
	var before time.Time
	if v := q.Get("before"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("before=%q: give an RFC 3339 time such as 2026-11-23T09:00:00Z", v))
			return
		}
		before = t
	}
	v := s.gate.Allow(w, r, authz.Input{Action: authz.ActionLoopRead, Loop: name}, "reading loop "+name)
	if v == nil {
		return
	}
	firings, err := s.History(r.Context(), name, before, limit)
	if err != nil {
		policyhttp.WriteError(w, http.StatusInternalServerError, "store_error", err.Error())
		return
	}
	if firings == nil {
		firings = []Firing{}
	}
	policyhttp.WriteJSON(w, http.StatusOK, map[string]any{"loop": name, "decision_id": v.ID, "firings": firings})
}

// TriggerRequest is the body of POST /loops/{name}/trigger (all fields optional).
type TriggerRequest struct {
	Instruction string `json:"instruction,omitempty"` // instead of the loop's
	Wait        bool   `json:"wait,omitempty"`        // answer when the firing is final
}

func (s *Scheduler) trigger(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("loop")
	var req TriggerRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxTriggerBody))
	if err != nil {
		policyhttp.WriteError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the request body is larger than %d bytes", maxTriggerBody))
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", `the body must be JSON {"instruction": "...", "wait": true}: `+err.Error())
			return
		}
	}
	caller := identity.CallerFrom(r.Context())
	v := s.gate.Allow(w, r, authz.Input{Action: authz.ActionLoopTrigger, Loop: name}, "triggering loop "+name)
	if v == nil {
		return
	}
	f, err := s.Trigger(r.Context(), name, req.Instruction, caller.ID)
	switch {
	case errors.Is(err, ErrUnknownLoop):
		policyhttp.WriteError(w, http.StatusNotFound, "not_found", err.Error())
		return
	case errors.Is(err, ErrNoBuild):
		policyhttp.WriteError(w, http.StatusServiceUnavailable, "no_build", err.Error())
		return
	case err != nil:
		policyhttp.WriteError(w, http.StatusInternalServerError, "store_error", err.Error())
		return
	}
	code := http.StatusAccepted
	if req.Wait {
		w.WriteHeader(http.StatusProcessing) // accepted and recorded; the answer comes when the firing ends
		if f, err = s.Wait(r.Context(), f.Loop, f.ScheduledAt); err != nil {
			policyhttp.WriteError(w, http.StatusGatewayTimeout, "not_finished", fmt.Sprintf("the firing at %s did not finish: %v", f.ScheduledAt.Format(time.RFC3339Nano), err))
			return
		}
		code = http.StatusOK
	}
	policyhttp.WriteJSON(w, code, map[string]any{"decision_id": v.ID, "firing": f})
}
