package scheduler

import (
	"context"
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
)

// maxTriggerBody bounds a trigger request.
const maxTriggerBody = 64 << 10

// Handler serves the scheduler's HTTP API:
//
//	GET  /loops                        the loops the caller may read, with their next and last firing
//	GET  /loops/{name}/history         the loop's firings, newest first (?limit=50&before=<RFC 3339>)
//	POST /loops/{name}/trigger         fire the loop now: {"instruction": "...", "wait": true}
//
// Every route authenticates the caller, then decides with the shared policy: loop/read (read or
// execute in the loop's acl) to list and read history, loop/trigger (execute) to trigger. Each
// decision is in the decision log; a denial answers 403 with its decision id and reasons.
func (s *Scheduler) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /loops", s.authenticated(s.list))
	mux.HandleFunc("GET /loops/{loop}/history", s.authenticated(s.history))
	mux.HandleFunc("POST /loops/{loop}/trigger", s.authenticated(s.trigger))
	return mux
}

func (s *Scheduler) authenticated(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Auth == nil {
			writeError(w, http.StatusUnauthorized, "unauthenticated", "the scheduler API has no authenticator")
			return
		}
		caller, err := s.opts.Auth.Authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lush"`)
			writeError(w, http.StatusUnauthorized, "unauthenticated", err.Error())
			return
		}
		next(w, r.WithContext(identity.WithCaller(r.Context(), caller)))
	}
}

// Decide decides action (loop/read or loop/trigger) on loop for the caller, and logs it.
func (s *Scheduler) Decide(ctx context.Context, caller identity.Caller, action, loop string) *enforce.Verdict {
	groups := caller.Groups
	if groups == nil {
		groups = []string{}
	}
	return s.enforcer.Decide(ctx, authz.Input{Action: action, Loop: loop, Principal: authz.Principal{ID: caller.ID, Groups: groups}})
}

// refuse answers a decision that did not allow.
func refuse(w http.ResponseWriter, v *enforce.Verdict) {
	code, kind := http.StatusForbidden, "forbidden"
	if v.Outcome == authz.OutcomeError {
		code, kind = http.StatusServiceUnavailable, "policy_error"
	}
	msgs := make([]string, 0, len(v.Reasons))
	for _, r := range v.Reasons {
		if r.Rule == "lush.loop.unknown" {
			code, kind = http.StatusNotFound, "not_found"
		}
		msgs = append(msgs, r.Message)
	}
	msg := strings.Join(msgs, "; ")
	if msg == "" {
		msg = firstNonEmpty(v.Error, "denied by policy")
	}
	writeJSON(w, code, map[string]any{"error": map[string]any{"code": kind, "message": msg, "decision_id": v.ID, "reasons": v.Reasons}})
}

func (s *Scheduler) list(w http.ResponseWriter, r *http.Request) {
	caller := identity.CallerFrom(r.Context())
	loops, err := s.Loops(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, "store_error", err.Error())
		return
	}
	visible := []LoopInfo{}
	for _, l := range loops {
		if v := s.Decide(r.Context(), caller, authz.ActionLoopRead, l.Name); v.Allow {
			visible = append(visible, l)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"loops": visible})
}

func (s *Scheduler) history(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("loop")
	q := r.URL.Query()
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit=%q: give a number from 1 to 1000", v))
			return
		}
		limit = n
	}
	var before time.Time
	if v := q.Get("before"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("before=%q: give an RFC 3339 time such as 2026-11-23T09:00:00Z", v))
			return
		}
		before = t
	}
	v := s.Decide(r.Context(), identity.CallerFrom(r.Context()), authz.ActionLoopRead, name)
	if !v.Allow {
		refuse(w, v)
		return
	}
	firings, err := s.History(r.Context(), name, before, limit)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "store_error", err.Error())
		return
	}
	if firings == nil {
		firings = []Firing{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"loop": name, "decision_id": v.ID, "firings": firings})
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
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the request body is larger than %d bytes", maxTriggerBody))
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", `the body must be JSON {"instruction": "...", "wait": true}: `+err.Error())
			return
		}
	}
	caller := identity.CallerFrom(r.Context())
	v := s.Decide(r.Context(), caller, authz.ActionLoopTrigger, name)
	if !v.Allow {
		refuse(w, v)
		return
	}
	f, err := s.Trigger(r.Context(), name, req.Instruction, caller.ID)
	switch {
	case errors.Is(err, ErrUnknownLoop):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
		return
	case errors.Is(err, ErrNoBuild):
		writeError(w, http.StatusServiceUnavailable, "no_build", err.Error())
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, "store_error", err.Error())
		return
	}
	code := http.StatusAccepted
	if req.Wait {
		if f, err = s.Wait(r.Context(), f.Loop, f.ScheduledAt); err != nil {
			writeError(w, http.StatusGatewayTimeout, "not_finished", fmt.Sprintf("the firing at %s did not finish: %v", f.ScheduledAt.Format(time.RFC3339Nano), err))
			return
		}
		code = http.StatusOK
	}
	writeJSON(w, code, map[string]any{"decision_id": v.ID, "firing": f})
}

func writeError(w http.ResponseWriter, code int, kind, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"code": kind, "message": msg}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
