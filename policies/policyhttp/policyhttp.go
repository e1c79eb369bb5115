// Package policyhttp is the one gate every Lush HTTP API lets requests in through: it
// authenticates the caller, and decides the request with the process's shared policy as an
// action, logging that decision like every other. The audit, approvals, budgets and loops APIs,
// agentd's chat API and the gateway's MCP endpoints all authenticate here; the APIs whose requests
// are actions of their own (reading the decision log, deciding an approval, triggering a loop)
// also decide here.
//
// A request the gate does not let in is answered by it: 401 without valid credentials (counted
// and logged, rate-limited, by Gate.Failures; 403 for an OAuth token without the scopes
// required, 503 for one whose authorization server cannot be reached; with auth.oauth, the
// WWW-Authenticate challenge names the resource's metadata), 403 with the decision id and the
// policy's reasons, 404 when the policy says the thing asked for does not exist
// (Gate.NotFound), 503 when the policy cannot decide or the decision cannot be logged (fail
// closed). Answers are JSON:
//
//	{"error": {"code": "forbidden", "message": "…", "decision_id": "…", "reasons": [...]}}
//
// A decision that could not be logged is answered with "recorded": false, and its message says
// so: its id is not in the decision log (the server's log names it, with the cause).
package policyhttp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/propagation"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
)

// HeaderDecisionID carries the id of the decision that let a request through (or refused it), so
// that a caller can find it in the decision log (or, for a decision that could not be recorded,
// in the server's log).
const HeaderDecisionID = "X-Lush-Decision-Id"

// Authenticator identifies callers: *identity.Authenticator implements it. Its errors are shown
// to the caller, so they must not hold the credential.
type Authenticator interface {
	Authenticate(r *http.Request) (identity.Caller, error)
}

// ProtectedResource is an Authenticator that makes the server an OAuth protected resource
// (*identity.Authenticator implements it): its refusals carry an RFC 6750 / RFC 9728 challenge,
// and it describes each resource (RFC 9728 metadata).
type ProtectedResource interface {
	// Challenge is the WWW-Authenticate value of a refusal of r with err; false when the
	// server accepts no OAuth access tokens.
	Challenge(r *http.Request, err error) (string, bool)
	// Metadata is the metadata of the resource at path (identity.ResourcePath); false when the
	// server accepts no OAuth access tokens.
	Metadata(path string) (identity.ResourceMetadata, bool)
}

// Gate authenticates and decides API requests. It is safe for concurrent use.
type Gate struct {
	Auth Authenticator
	// Failures counts and logs the requests refused for their credentials: 401, and 403 for a
	// delegation token at another agent's route. One per process (identity.NewFailures), shared
	// by its gates; nil: not reported.
	Failures *identity.Failures
	// Decider decides the requests with the process's shared policy, as the API's enforcement
	// point. Nil for a gate that only authenticates (Authenticated).
	Decider *enforce.Enforcer
	// NotFound lists the rules whose denial means that what the request names does not exist
	// (such as lush.loop.unknown): such a denial is answered 404.
	NotFound []string
	// WriteRefusal answers the requests the gate does not let in. Default: the APIs' JSON
	// answer, {"error": {"code": …, "message": …, "decision_id": …, "reasons": […]}}.
	WriteRefusal func(w http.ResponseWriter, r Refusal)
}

// A Refusal is a request the gate does not let in.
type Refusal struct {
	Status  int    // the HTTP status
	Code    string // unauthenticated, forbidden, not_found, approval_required, policy_error, or an identity code (insufficient_scope, auth_server_unavailable)
	Message string // what is wrong, for the caller
	// Err is the authentication error of a request refused before any decision (401, or 403
	// for a delegation token of another agent): an *identity.Error, whose text is safe to show.
	Err error
	// Verdict is the recorded decision of a request the policy did not allow.
	Verdict *enforce.Verdict
	Reasons []authz.Reason // the reasons the caller is told (the decision's, or its approvals')
}

// Authenticated lets only authenticated callers through to next, with the caller in the
// request's context (identity.CallerFrom) and the incoming W3C trace context carried. When the
// route has an {agent} path value, a delegation token must be for that agent: an agent acts
// only as itself.
func (g *Gate) Authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := telemetry.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		caller, ok := g.authenticate(w, r)
		if !ok {
			return
		}
		if agent := r.PathValue("agent"); agent != "" {
			if err := caller.CheckAgent(agent); err != nil {
				g.Failures.Report(ctx, r.RemoteAddr, endpoint(r), err)
				g.refuse(w, Refusal{Status: http.StatusForbidden, Code: "forbidden", Message: message(err), Err: err})
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(identity.WithCaller(ctx, caller)))
	})
}

// authenticate identifies the caller of r, and answers 401 itself (and reports it) when it
// cannot.
func (g *Gate) authenticate(w http.ResponseWriter, r *http.Request) (identity.Caller, bool) {
	if g.Auth == nil {
		err := errors.New("this API has no authenticator, so it lets no one in")
		g.Failures.Report(r.Context(), r.RemoteAddr, endpoint(r), err)
		g.refuse(w, Refusal{Status: http.StatusUnauthorized, Code: "unauthenticated", Message: err.Error(), Err: err})
		return identity.Caller{}, false
	}
	caller, err := g.Auth.Authenticate(r)
	if err != nil {
		g.Failures.Report(r.Context(), r.RemoteAddr, endpoint(r), err)
		challenge := `Bearer realm="lush"`
		if pr, ok := g.Auth.(ProtectedResource); ok {
			if c, ok := pr.Challenge(r, err); ok {
				challenge = c
			}
		}
		w.Header().Set("WWW-Authenticate", challenge)
		status, code := http.StatusUnauthorized, "unauthenticated"
		var ie *identity.Error
		if errors.As(err, &ie) && ie.Status() != http.StatusUnauthorized {
			// 403: a valid token without the scopes required (the client may ask for them); 503:
			// the token's authorization server cannot be reached to check it.
			status, code = ie.Status(), ie.Code
		}
		g.refuse(w, Refusal{Status: status, Code: code, Message: message(err), Err: err})
		return caller, false
	}
	return caller, true
}

// ResourceMetadata serves RFC 9728 protected resource metadata at
// /.well-known/oauth-protected-resource (the server itself) and
// /.well-known/oauth-protected-resource/<resource path> (an agent's MCP endpoint), to anyone:
// clients read it before they have a token. exists says whether this process serves the
// resource at a path (identity.ResourcePath: an agent of the deployed build); any other path,
// or a server that accepts no OAuth access tokens, is 404.
func (g *Gate) ResourceMetadata(exists func(path string) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pr, ok := g.Auth.(ProtectedResource)
		path, found := strings.CutPrefix(r.URL.Path, identity.MetadataPath)
		if !ok || !found || (path != "" && identity.ResourcePath(path) != path) || !exists(path) {
			WriteError(w, http.StatusNotFound, "not_found", "no protected resource here")
			return
		}
		md, ok := pr.Metadata(path)
		if !ok {
			WriteError(w, http.StatusNotFound, "not_found", "this server accepts no OAuth access tokens (configure auth.oauth)")
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "max-age=300")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Access-Control-Allow-Origin", "*") // browser-based MCP clients read it across origins
		w.WriteHeader(http.StatusOK)
		json.NewEncoder(w).Encode(md)
	})
}

// maxEndpoint bounds the path a failure report names when the request matched no route pattern.
const maxEndpoint = 100

// endpoint is what r asked for, for failure reports: the route pattern it matched (a fixed
// vocabulary), else its path, cut.
func endpoint(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	p := r.URL.Path
	if len(p) > maxEndpoint {
		p = p[:maxEndpoint] + "…"
	}
	return r.Method + " " + p
}

// message is what a caller is told of an authentication error: an identity.Error's actionable
// message, never anything else's text (which could hold internals).
func message(err error) string {
	var ie *identity.Error
	if errors.As(err, &ie) {
		return ie.Message
	}
	return "authentication failed"
}

// Decide decides in for caller and logs the decision: the caller is the input's principal and,
// when an agent acts for the principal (a delegation token), the agent and its chain are the
// input's too, so that the log says so and project policies can refuse it.
func (g *Gate) Decide(ctx context.Context, caller identity.Caller, in authz.Input, opts ...enforce.Option) *enforce.Verdict {
	in.Principal = enforce.PrincipalOf(caller)
	if caller.Method == identity.MethodDelegation && in.Agent == "" {
		in.Agent, in.Chain = caller.Agent, caller.Chain
	}
	return g.Decider.Decide(ctx, in, opts...)
}

// Allow decides in for the caller of an authenticated request (Authenticated) and answers the
// request itself unless the policy plainly allows it; it returns the recorded verdict, which the
// handler completes, or nil. what names the request in refusals ("triggering a loop").
func (g *Gate) Allow(w http.ResponseWriter, r *http.Request, in authz.Input, what string, opts ...enforce.Option) *enforce.Verdict {
	v := g.Decide(r.Context(), identity.CallerFrom(r.Context()), in, opts...)
	w.Header().Set(HeaderDecisionID, v.ID)
	// Only a plain allow lets the request in: one that a project policy sends for approval is
	// refused (an API request does not wait for approvals).
	if !v.Allow || v.Outcome != authz.OutcomeAllow || !v.Recorded {
		g.Refuse(w, v, what)
		return nil
	}
	return v
}

// Authorize authenticates r and decides in for its caller (Authenticated, then Allow): it
// answers the request itself and returns a nil verdict unless the policy plainly allows it.
func (g *Gate) Authorize(w http.ResponseWriter, r *http.Request, in authz.Input, what string, opts ...enforce.Option) (*enforce.Verdict, identity.Caller) {
	caller, ok := g.authenticate(w, r)
	if !ok {
		return nil, caller
	}
	return g.Allow(w, r.WithContext(identity.WithCaller(r.Context(), caller)), in, what, opts...), caller
}

// Refuse answers a decision that did not allow: 403 with its id and reasons, 404 when a reason's
// rule is one of NotFound, or 503 when the policy could not decide or the decision could not be
// logged.
func (g *Gate) Refuse(w http.ResponseWriter, v *enforce.Verdict, what string) {
	code, kind := http.StatusForbidden, "forbidden"
	reasons, prefix := v.Reasons, ""
	switch {
	case v.Outcome == authz.OutcomeError || !v.Recorded:
		code, kind = http.StatusServiceUnavailable, "policy_error"
	case v.Outcome == authz.OutcomeApproval:
		kind, reasons = "approval_required", v.Approvals
		prefix = what + " needs an approval, and this API does not wait for approvals: "
	case slices.ContainsFunc(v.Reasons, func(r authz.Reason) bool { return slices.Contains(g.NotFound, r.Rule) }):
		code, kind = http.StatusNotFound, "not_found"
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
	if !v.Recorded {
		msg += " (" + enforce.DecisionRef(v.ID, false) + ")"
	}
	g.refuse(w, Refusal{Status: code, Code: kind, Message: msg, Verdict: v, Reasons: reasons})
}

func (g *Gate) refuse(w http.ResponseWriter, r Refusal) {
	if g.WriteRefusal != nil {
		g.WriteRefusal(w, r)
		return
	}
	body := map[string]any{"code": r.Code, "message": r.Message}
	if r.Verdict != nil {
		body["decision_id"], body["reasons"] = r.Verdict.ID, r.Reasons
		if !r.Verdict.Recorded {
			body["recorded"] = false
		}
	}
	WriteJSON(w, r.Status, map[string]any{"error": body})
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
