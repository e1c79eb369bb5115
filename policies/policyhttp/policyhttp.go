// Package policyhttp is how Lush's HTTP APIs (the audit, approvals and budgets APIs) let a request
// in: authenticate the caller, then decide the request with the process's shared policy as an
// action with the request's details as the input's arguments, and log that decision like every
// other. A request the policy does not plainly allow is answered here: 401 without valid
// credentials, 403 with the decision id and the policy's reasons, 503 when the policy cannot
// decide or the decision cannot be logged (fail closed). Answers are JSON:
//
//	{"error": {"code": "forbidden", "message": "…", "decision_id": "…", "reasons": [...]}}
package policyhttp

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
)

// HeaderDecisionID carries the id of the decision that let a request through (or refused it), so
// that a caller can find it in the decision log.
const HeaderDecisionID = "X-Lush-Decision-Id"

// Authenticator identifies callers: *identity.Authenticator implements it. Its errors are shown
// to the caller, so they must not hold the credential.
type Authenticator interface {
	Authenticate(r *http.Request) (identity.Caller, error)
}

// Gate authenticates and decides API requests. It is safe for concurrent use.
type Gate struct {
	Decider *enforce.Enforcer // the process's shared policy, with the API as its enforcement point
	Auth    Authenticator
}

// Authorize authenticates r and decides action for it with args as the input's arguments (and
// input.agent and input.chain when an agent calls for a principal). It answers the request
// itself and returns nil unless the policy plainly allows it; otherwise it returns the recorded
// verdict, which the handler completes. what names the request in refusals ("reading the
// decision log").
func (g *Gate) Authorize(w http.ResponseWriter, r *http.Request, action, what string, args map[string]any) (*enforce.Verdict, identity.Caller) {
	caller, err := g.Auth.Authenticate(r)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lush"`)
		msg := "authentication failed"
		var ie *identity.Error
		if errors.As(err, &ie) {
			msg = ie.Message
		}
		WriteError(w, http.StatusUnauthorized, "unauthenticated", msg)
		return nil, caller
	}
	groups := caller.Groups
	if groups == nil {
		groups = []string{}
	}
	in := authz.Input{Action: action, Principal: authz.Principal{ID: caller.ID, Groups: groups}, Arguments: args}
	if caller.Method == identity.MethodDelegation {
		// An agent acting for the principal: the log says so, and project policies can refuse it.
		in.Agent, in.Chain = caller.Agent, caller.Chain
	}
	v := g.Decider.Decide(r.Context(), in)
	w.Header().Set(HeaderDecisionID, v.ID)
	// Only a plain allow lets the request in: one that a project policy sends for approval is
	// refused (an API request does not wait for approvals).
	if !v.Allow || v.Outcome != authz.OutcomeAllow || !v.Recorded {
		Refuse(w, v, what)
		return nil, caller
	}
	return v, caller
}

// Refuse answers a decision that did not allow: 403 with its id and reasons, or 503 when the
// policy could not decide or the decision could not be logged.
func Refuse(w http.ResponseWriter, v *enforce.Verdict, what string) {
	code, kind := http.StatusForbidden, "forbidden"
	reasons, prefix := v.Reasons, ""
	switch {
	case v.Outcome == authz.OutcomeError || !v.Recorded:
		code, kind = http.StatusServiceUnavailable, "policy_error"
	case v.Outcome == authz.OutcomeApproval:
		kind, reasons = "approval_required", v.Approvals
		prefix = what + " needs an approval, and this API does not wait for approvals: "
	}
	if reasons == nil {
		reasons = []authz.Reason{}
	}
	msgs := make([]string, 0, len(reasons))
	for _, r := range reasons {
		msgs = append(msgs, r.Message)
	}
	msg := prefix + strings.Join(msgs, "; ")
	if len(msgs) == 0 {
		msg = prefix + "the policy does not allow " + what
	}
	WriteJSON(w, code, map[string]any{"error": map[string]any{"code": kind, "message": msg, "decision_id": v.ID, "reasons": reasons}})
}

// WriteError answers an error: {"error": {"code": kind, "message": msg}}.
func WriteError(w http.ResponseWriter, code int, kind, msg string) {
	WriteJSON(w, code, map[string]any{"error": map[string]any{"code": kind, "message": msg}})
}

// WriteJSON answers v as indented JSON that is not cached or sniffed.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
