package extauthz

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/mesh"
	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/stub"
	"github.com/lush-agents/lush/vault"
)

// Check decides one request an Envoy sidecar holds. It never returns an error: every failure is
// an answer that denies, so that Envoy's failure_mode_allow cannot let a request through. A
// Check the admission does not let in (too many in flight: admit.go) is denied at once.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	a := s.admission
	if !a.admit() {
		return s.overloaded(req), nil
	}
	start := time.Now()
	defer func() { a.done(time.Now(), time.Since(start)) }()
	return s.check(ctx, req), nil
}

// check decides one request.
func (s *Server) check(ctx context.Context, req *authv3.CheckRequest) *authv3.CheckResponse {
	attrs := req.GetAttributes()
	h := attrs.GetRequest().GetHttp()
	if h == nil {
		return refuse(nil, &problem{status: http.StatusBadRequest, code: mcphttp.CodeInvalidRequest,
			msg: "the check request has no HTTP request: configure Lush as the authorization service of Envoy's HTTP ext_authz filter"})
	}
	b := s.state.Load()
	if b == nil {
		return refuse(nil, &problem{status: http.StatusServiceUnavailable, code: mcphttp.CodeInternalError,
			msg: "no build is deployed yet, so every request is denied"})
	}
	route, p := b.route(attrs.GetContextExtensions(), h.GetPath())
	if p != nil {
		return refuse(peekID(h), p)
	}
	if route.Kind == mesh.KindGateway || route.Kind == mesh.KindA2A {
		// The Lush gateway, or agentd's A2A endpoint, behind this route authenticates and decides
		// every message itself (the generated route does not even ask).
		return allowed(nil, nil, nil)
	}
	hdr := headers(h)
	var msg message
	if route.Kind == mesh.KindServer || isMCPEndpoint(h.GetPath()) {
		if msg, p = readMessage(h, hdr); p != nil {
			if p.code == codeHeaderMismatch {
				s.opts.Logger.Warn("ext_authz: refused a request whose MCP headers are missing or disagree with its body",
					"route", route.Name, "reason", p.msg)
			}
			return refuse(msg.ID, p)
		}
	}
	// The decision joins the request's trace (Envoy propagates traceparent), so the log event
	// names the trace.
	ctx = telemetry.Propagator.Extract(ctx, propagation.MapCarrier(hdr))
	ctx, span := s.tracer.Start(ctx, "ext_authz "+string(route.Kind), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("lush.agent", route.Agent), attribute.String("lush.tool", route.Tool),
			attribute.String("mcp.method", shorten(msg.Method))))
	defer span.End()
	caller, p := s.caller(ctx, attrs, hdr)
	if p != nil {
		return refuse(msg.ID, p)
	}
	var resp *authv3.CheckResponse
	if route.Kind == mesh.KindAgent {
		resp = s.checkAgent(ctx, route, msg, caller)
	} else if err := caller.CheckAgent(route.Agent); err != nil {
		s.opts.AuthFailures.Report(ctx, remoteAddr(attrs.GetSource()), failureEndpoint, err)
		resp = refuse(msg.ID, &problem{status: http.StatusForbidden, code: codeDenied, msg: err.Error()})
	} else {
		resp = s.checkServer(ctx, b, route, msg, caller)
	}
	md := resp.GetDynamicMetadata().GetFields()
	span.SetAttributes(attribute.String("lush.decision", md["outcome"].GetStringValue()),
		attribute.String("lush.decision_id", md["decision_id"].GetStringValue()), attribute.String("lush.principal", caller.ID))
	return resp
}

// isMCPEndpoint reports whether path is an agent's MCP endpoint (/agents/<name>/mcp), whose
// messages are JSON-RPC; the agent's other endpoints (chat, status) take other bodies.
func isMCPEndpoint(path string) bool {
	path, _, _ = strings.Cut(path, "?")
	return strings.HasSuffix(path, "/mcp")
}

// codeDenied is the JSON-RPC error code of a request the policy denied.
const codeDenied = -32001

// route is the route a request takes: the one the context extensions name (set by the xDS
// server), else the one its path matches.
func (b *build) route(ext map[string]string, path string) (mesh.Route, *problem) {
	notFound := func(format string, args ...any) *problem {
		return &problem{status: http.StatusNotFound, code: mcphttp.CodeInvalidRequest,
			msg: fmt.Sprintf(format, args...) + fmt.Sprintf(" (build %s)", manifest.Short(b.hash))}
	}
	kind := mesh.Kind(ext[mesh.ExtKind])
	switch kind {
	case "":
		r, ok := b.routes.Match(path)
		if !ok {
			return r, notFound("no agent or tool of the build is served at %s: the sidecar's routes are out of date, or the path is wrong", shorten(path))
		}
		return r, nil
	case mesh.KindServer:
		r, ok := b.routes.Server(ext[mesh.ExtAgent], ext[mesh.ExtTool])
		if !ok {
			return r, notFound("agent %q has no remote MCP server %q", shorten(ext[mesh.ExtAgent]), shorten(ext[mesh.ExtTool]))
		}
		return r, nil
	case mesh.KindAgent, mesh.KindGateway, mesh.KindA2A:
		if !b.routes.HasAgent(ext[mesh.ExtAgent]) {
			return mesh.Route{}, notFound("there is no agent %q", shorten(ext[mesh.ExtAgent]))
		}
		return mesh.Route{Kind: kind, Agent: ext[mesh.ExtAgent]}, nil
	}
	return mesh.Route{}, &problem{status: http.StatusInternalServerError, code: mcphttp.CodeInternalError,
		msg: fmt.Sprintf("the route's ext_authz context extension %s is %q, which this Lush does not know", mesh.ExtKind, shorten(string(kind)))}
}

// checkServer decides an MCP message to a remote MCP server.
func (s *Server) checkServer(ctx context.Context, b *build, route mesh.Route, msg message, caller identity.Caller) *authv3.CheckResponse {
	in := input(caller, route.Agent, chainAt(caller, route.Agent))
	in.Tool = &authz.Tool{Ref: route.Tool}
	switch msg.Method {
	case "tools/call":
		in.Action = authz.ActionToolsCall
		var name string
		if json.Unmarshal(msg.Params["name"], &name) != nil || name == "" {
			return refuse(msg.ID, badRequest(mcphttp.CodeInvalidParams, `tools/call needs params {"name": "<tool>", "arguments": {...}}`))
		}
		in.Tool.Name = name
		if msg.Headers {
			// Decided from the headers: only when nothing in the decision reads the arguments.
			if need, why := mesh.ArgumentsNeeded(b.manifest, route.Agent, route.Tool, name); need {
				return refuse(nil, badRequest(mcphttp.CodeInvalidRequest,
					"the sidecar did not send the body of this tools/call, and deciding it needs its arguments: %s. "+
						"Give the route the ext_authz filter's request body (with_request_body; lushctl mesh xds of this build does)", why))
			}
		}
		if raw, ok := msg.Params["arguments"]; ok && string(raw) != "null" {
			if v, problem := s.enforcer.CheckArguments(ctx, in, raw, s.opts.ArgumentLimits); problem != nil {
				return invalidArguments(msg.ID, v, problem)
			}
			var args map[string]any
			if err := json.Unmarshal(raw, &args); err != nil {
				return refuse(msg.ID, badRequest(mcphttp.CodeInvalidParams, "tools/call arguments must be a JSON object"))
			}
			in.Arguments = args
		}
		in.LiveWrites = s.opts.LiveWrites(route.Tool)
	case "tools/list":
		in.Action = authz.ActionToolsList
	case "resources/list", "resources/templates/list":
		in.Action = authz.ActionResourcesList
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		in.Action = authz.ActionResourcesRead
	case "prompts/list":
		in.Action = authz.ActionPromptsList
	case "prompts/get":
		in.Action = authz.ActionPromptsGet
	case "completion/complete":
		var p struct {
			Ref struct {
				Type string `json:"type"`
			} `json:"ref"`
		}
		json.Unmarshal(msg.Params["ref"], &p.Ref)
		in.Action = authz.ActionResourcesRead
		if p.Ref.Type == "ref/prompt" || msg.Headers {
			// Without the body, what is completed is unknown: it must be allowed as both.
			in.Action = authz.ActionPromptsGet
		}
	case "", "initialize", "ping", "logging/setLevel", "server/discover", "subscriptions/listen":
		// The session's own messages (and responses to the server's requests) reach the server
		// only for callers that may list its tools. MCP 2026 has no sessions: server/discover
		// (what the server supports) is read as initialize was, and subscriptions/listen (the
		// server's change notifications) as the event stream of a GET.
		in.Action = authz.ActionToolsList
	default:
		if !strings.HasPrefix(msg.Method, "notifications/") {
			// MCP 2026 answers a method the server does not implement with 404; earlier versions
			// with 400.
			status := http.StatusBadRequest
			if msg.Modern {
				status = http.StatusNotFound
			}
			return refuse(msg.ID, &problem{status: status, code: mcphttp.CodeMethodNotFound,
				msg: fmt.Sprintf("method %q cannot be authorized through the mesh, so it is refused", shorten(msg.Method))})
		}
		in.Action = authz.ActionToolsList
	}
	var cred *vault.Credential
	var opts []enforce.Option
	if s.opts.Broker != nil {
		opts = append(opts, enforce.WithPrecondition(func(ctx context.Context) (err error) {
			r := vault.Request{Project: b.manifest.Project, Tool: route.Tool,
				Principal: caller.ID, Groups: caller.Groups, Declared: b.manifest.Credentials,
				Chain: in.Chain, SubjectToken: caller.Token.Reveal(), Method: string(caller.Method)}
			if t, ok := b.manifest.Tool(route.Tool); ok && t.Remote != nil {
				r.URL = t.Remote.URL
			}
			cred, err = s.opts.Broker.Lookup(ctx, r)
			return err
		}), enforce.WithCredentialUse(func() *decisionlog.CredentialUse {
			if cred == nil {
				return nil
			}
			return &decisionlog.CredentialUse{Type: cred.Type, Obtained: cred.Provenance(), Source: cred.Source, Act: cred.Act}
		}))
	}
	v := s.enforcer.Decide(ctx, in, opts...)
	if msg.Headers && msg.Method == "completion/complete" && v.Outcome == authz.OutcomeAllow {
		in.Action = authz.ActionResourcesRead
		v = s.enforcer.Decide(ctx, in, opts...)
	}
	if msg.Headers && (v.Outcome == authz.OutcomeApproval || v.Outcome == authz.OutcomeStub) {
		// A stub answers with the arguments, and an approval is of the exact call: neither can be
		// given without the body. Refused: the call does not reach the server.
		return refuse(nil, badRequest(mcphttp.CodeInvalidRequest,
			"decision %s is %s, which needs the call's arguments, but the sidecar did not send its body: "+
				"give the route the ext_authz filter's request body (with_request_body)", v.ID, v.Outcome))
	}
	if v.Outcome == authz.OutcomeApproval && in.Action == authz.ActionToolsCall && s.approvals != nil {
		var refusal *authv3.CheckResponse
		if v, refusal = s.approve(ctx, in, v, msg, opts...); refusal != nil {
			return refusal
		}
	}
	switch v.Outcome {
	case authz.OutcomeAllow:
		set := map[string]string{}
		if cred != nil {
			set = cred.Headers()
		}
		return allowed(v, set, s.stripped(set))
	case authz.OutcomeStub:
		v.Complete(decisionlog.StatusStubbed, 0, nil, "")
		return stubbed(msg.ID, v, stub.Call{Name: in.Tool.Name, Ref: route.Tool, Tool: in.Tool.Name, Arguments: in.Arguments,
			DecisionID: v.ID, Decision: v.Meta()})
	}
	return denied(msg.ID, v)
}

// approve handles a tools/call the policy sent for approval (v), without waiting
// (approval.Waiter with no MaxWait): the sidecar cannot hold Envoy's check for minutes. A person
// already approved this exact call (it was refused here before, or waited at the gateway): the
// approval is used up and the call decided again as approved. Otherwise the call asks for an
// approval (or joins the one the same call waits on) and is refused with its id, and the client
// repeats the call once a person approved it.
func (s *Server) approve(ctx context.Context, in authz.Input, v *enforce.Verdict, msg message, opts ...enforce.Option) (*enforce.Verdict, *authv3.CheckResponse) {
	call := approval.Call{Tool: in.Tool.Ref, ToolName: in.Tool.Name, Arguments: msg.Params["arguments"], Principal: in.Principal.ID, Agent: in.Agent}
	w := s.approvals.Wait(ctx, call, v)
	switch w.Ending {
	case approval.Approved:
		return s.enforcer.Decide(ctx, approval.Grant(in, w.Approval), opts...), nil
	case approval.Unavailable:
		s.opts.Logger.Error("ext_authz: approvals store", "decision_id", v.ID, "error", w.Err)
		return nil, approvalUnavailable(msg.ID, v)
	}
	return nil, awaitingApproval(msg.ID, v, w.Approval)
}

// checkAgent decides a call of an agent's endpoints: agent/invoke, as agentd decides it.
func (s *Server) checkAgent(ctx context.Context, route mesh.Route, msg message, caller identity.Caller) *authv3.CheckResponse {
	in := input(caller, route.Agent, callChain(caller, route.Agent))
	in.Action = authz.ActionAgentInvoke
	v := s.enforcer.Decide(ctx, in)
	if v.Outcome == authz.OutcomeAllow {
		return allowed(v, nil, nil)
	}
	return denied(msg.ID, v)
}

// stripped are the request headers an upstream MCP server must not see: the caller's own
// credentials and identity headers (the server gets the credential Lush looked up instead).
func (s *Server) stripped(set map[string]string) []string {
	ph, gh := s.opts.Auth.ProxyHeaders()
	out := make([]string, 0, 4)
	for _, name := range [...]string{"authorization", "x-api-key", strings.ToLower(ph), strings.ToLower(gh)} {
		if !setsHeader(set, name) {
			out = append(out, name)
		}
	}
	return out
}

// setsHeader reports whether set has a header named name, in any case.
func setsHeader(set map[string]string, name string) bool {
	for k := range set {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

func input(c identity.Caller, agent string, chain []string) authz.Input {
	return authz.Input{Principal: enforce.PrincipalOf(c), Agent: agent, Chain: chain, Depth: c.Depth(chain)}
}

// chainAt is the chain of agents of a call made by agent: a delegation token's chain (which ends
// with agent: CheckAgent saw to that), else agent alone.
func chainAt(c identity.Caller, agent string) []string {
	if c.Method == identity.MethodDelegation && len(c.Chain) > 0 {
		return slices.Clone(c.Chain)
	}
	return []string{agent}
}

// callChain is the chain of a call of agent: the caller's chain with agent appended when an agent
// (a delegation token) calls it, else agent alone.
func callChain(c identity.Caller, agent string) []string {
	if c.Method != identity.MethodDelegation || len(c.Chain) == 0 {
		return []string{agent}
	}
	if c.Chain[len(c.Chain)-1] == agent {
		return slices.Clone(c.Chain)
	}
	return append(slices.Clone(c.Chain), agent)
}

// failureEndpoint is what failed authentications at ext_authz are reported for.
const failureEndpoint = "ext_authz"

// caller is who makes the request: the identity Envoy verified (jwt_authn metadata; the peer
// certificate's SPIFFE id) or what the authenticator accepts (bearer token, API key, a trusted
// proxy's header). Presented credentials that are invalid never fall back to another method.
// Each failure is reported (Options.AuthFailures) with the downstream peer's address.
func (s *Server) caller(ctx context.Context, attrs *authv3.AttributeContext, hdr map[string]string) (identity.Caller, *problem) {
	// The errors of Envoy's identities that are not the authenticator's are malformed
	// credentials of method m.
	unauthenticated := func(m identity.Method, err error) *problem {
		var ie *identity.Error
		if !errors.As(err, &ie) {
			ie = &identity.Error{Code: identity.CodeInvalidRequest, Method: m, Message: err.Error()}
		}
		s.opts.AuthFailures.Report(ctx, remoteAddr(attrs.GetSource()), failureEndpoint, ie)
		return &problem{status: http.StatusUnauthorized, code: mcphttp.CodeInvalidRequest, msg: err.Error()}
	}
	idc := s.cfg.Identity
	if j := idc.JWTMetadata; j != nil {
		jj := j.WithDefaults()
		if st := attrs.GetMetadataContext().GetFilterMetadata()[jj.Filter]; st != nil {
			if v, ok := st.GetFields()[jj.Key]; ok {
				payload := v.GetStructValue()
				if payload == nil {
					return identity.Caller{}, unauthenticated(identity.MethodEnvoyJWT, fmt.Errorf("the jwt_authn metadata %s.%s is not an object: set payload_in_metadata in the jwt_authn filter", jj.Filter, jj.Key))
				}
				c, err := jj.FromJWTPayload(payload.AsMap())
				if err != nil {
					return c, unauthenticated(identity.MethodEnvoyJWT, err)
				}
				return c, nil
			}
		}
	}
	presents := hdr["authorization"] != "" || hdr["x-api-key"] != ""
	if !presents && len(idc.SPIFFE) > 0 {
		id, err := spiffeID(attrs.GetSource())
		if err != nil {
			return identity.Caller{}, unauthenticated(identity.MethodSPIFFE, err)
		}
		if id != "" {
			c, ok, err := idc.FromSPIFFE(id)
			if err != nil {
				return c, unauthenticated(identity.MethodSPIFFE, err)
			}
			if ok {
				return c, nil
			}
		}
	}
	// The authenticator reads the credential headers and the trusted proxy's headers only.
	r, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://ext-authz.lush.invalid/", nil)
	ph, gh := s.opts.Auth.ProxyHeaders()
	for _, k := range []string{"authorization", "x-api-key", strings.ToLower(ph), strings.ToLower(gh)} {
		if v, ok := hdr[k]; ok {
			r.Header.Set(k, v)
		}
	}
	r.RemoteAddr = remoteAddr(attrs.GetSource())
	c, err := s.opts.Auth.Authenticate(r)
	if err != nil {
		return c, unauthenticated("", err)
	}
	return c, nil
}

// spiffeID is the SPIFFE id of the downstream peer: the one URI SAN of its certificate (when
// Envoy sends the certificate: include_peer_certificate), which must agree with the principal
// Envoy names; else that principal when it is a SPIFFE id. "" when the peer has none.
func spiffeID(peer *authv3.AttributeContext_Peer) (string, error) {
	named := peer.GetPrincipal()
	if !strings.HasPrefix(named, "spiffe://") {
		named = ""
	}
	if peer.GetCertificate() == "" {
		return named, nil
	}
	text, err := url.PathUnescape(peer.GetCertificate())
	if err != nil {
		return "", fmt.Errorf("the peer certificate Envoy sent is not URL-encoded PEM: %v", err)
	}
	blk, _ := pem.Decode([]byte(text))
	if blk == nil || blk.Type != "CERTIFICATE" {
		return "", fmt.Errorf("the peer certificate Envoy sent is not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", fmt.Errorf("the peer certificate Envoy sent cannot be parsed: %v", err)
	}
	var ids []string
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" {
			ids = append(ids, u.String())
		}
	}
	switch {
	case len(ids) > 1:
		return "", fmt.Errorf("the peer certificate has %d SPIFFE ids; an X.509-SVID has exactly one", len(ids))
	case len(ids) == 0:
		return named, nil
	case named != "" && named != ids[0]:
		return "", fmt.Errorf("the peer certificate's SPIFFE id %s is not the principal Envoy names (%s)", shorten(ids[0]), shorten(named))
	}
	return ids[0], nil
}
