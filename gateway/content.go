package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/yosida95/uritemplate/v3"

	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/vault"
)

// CodeResourceNotFound is MCP's error for an unknown resource.
const CodeResourceNotFound = -32002

// Resources and prompts pass through under the same policy as tools, as reads: a server's content
// is offered when the agent allowlists the server without narrowing it to named tools and the
// caller holds a grant on it (docs/policy.md).

// allowedContent returns the agent's content servers this caller may read, deciding each.
func (c *call) allowedContent(ctx context.Context, action string) []*upstream.Server {
	var out []*upstream.Server
	for _, ref := range c.g.catalog(c.s, c.agent).content {
		if srv, ok := c.decideContent(ctx, action, ref); ok {
			out = append(out, srv)
		}
	}
	return out
}

// decideContent decides a read of a server's content (with the credential it needs) and returns
// the connection to read it through.
func (c *call) decideContent(ctx context.Context, action, ref string) (*upstream.Server, bool) {
	var cred *vault.Credential
	v := c.g.enforcer.Decide(ctx, c.input(action, &authz.Tool{Ref: ref}), c.needCredential(ref, &cred))
	if !v.Allow {
		return nil, false
	}
	srv, err := c.server(ctx, ref, cred)
	return srv, err == nil
}

// listContent merges a list method over every server the caller may read.
func (c *call) listContent(ctx context.Context, action, method, field string) (any, error) {
	items := []json.RawMessage{}
	var refs []string
	for _, srv := range c.allowedContent(ctx, action) {
		st := srv.Lists().Capabilities
		if st.Resources == nil {
			continue
		}
		list, err := srv.ListAll(ctx, method, field)
		if err != nil {
			continue // a server that is down offers nothing; the others still answer
		}
		items = append(items, list...)
		refs = append(refs, srv.Ref())
	}
	return c.listHints(map[string]any{field: items}, method, refs), nil
}

// owner finds the server a resource URI belongs to among those the caller may read: the one that
// lists it, else one whose template matches it, else the only server with resources.
func (c *call) owner(ctx context.Context, uri string) (*upstream.Server, bool) {
	return ownerAmong(c.allowedContent(ctx, authz.ActionResourcesRead), uri)
}

// ownerAmong is owner among the servers given.
func ownerAmong(servers []*upstream.Server, uri string) (*upstream.Server, bool) {
	var withResources []*upstream.Server
	for _, srv := range servers {
		l := srv.Lists()
		if l.Capabilities.Resources == nil {
			continue
		}
		withResources = append(withResources, srv)
		for _, r := range l.Resources {
			if objectName(r, "uri") == uri {
				return srv, true
			}
		}
	}
	for _, srv := range withResources {
		for _, t := range srv.Lists().Templates {
			tmpl, err := uritemplate.New(objectName(t, "uriTemplate"))
			if err == nil && tmpl.Match(uri) != nil {
				return srv, true
			}
		}
	}
	if len(withResources) == 1 {
		return withResources[0], true
	}
	return nil, false
}

// templateOwner finds the server of a resource or URI template (a completion's ref) among those
// the caller may read: the one that lists the template, else owner's answer for it as a URI.
func (c *call) templateOwner(ctx context.Context, uri string) (*upstream.Server, bool) {
	servers := c.allowedContent(ctx, authz.ActionResourcesRead)
	for _, srv := range servers {
		for _, t := range srv.Lists().Templates {
			if objectName(t, "uriTemplate") == uri {
				return srv, true
			}
		}
	}
	return ownerAmong(servers, uri)
}

func (c *call) forwardResource(ctx context.Context, method string) (any, error) {
	uri := stringParam(params(c.req), "uri")
	if uri == "" {
		return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, `%s needs params {"uri": "<uri>"}`, method)
	}
	srv, ok := c.owner(ctx, uri)
	if !ok {
		return nil, c.resourceNotFound(uri)
	}
	res, err := forward(ctx, srv, method, c.req.Params)
	if rpc, ok := err.(*mcphttp.Error); ok && rpc.Code == CodeResourceNotFound && c.req.Protocol >= protocolResourceNotFoundInvalidParams {
		rpc.Code = mcphttp.CodeInvalidParams // an older server's code, in this client's version
	}
	if err == nil && method == "resources/read" {
		res = c.readHints(res)
	}
	return res, err
}

// protocolResourceNotFoundInvalidParams is the first protocol version whose unknown resources are
// invalid params (SEP-2164) rather than CodeResourceNotFound.
const protocolResourceNotFoundInvalidParams = "2026-07-28"

// resourceNotFound is the answer for a resource the caller cannot read through this agent, in the
// error code of the request's protocol version, whether the resource exists elsewhere or not.
func (c *call) resourceNotFound(uri string) error {
	code := CodeResourceNotFound
	if c.req.Protocol >= protocolResourceNotFoundInvalidParams {
		code = mcphttp.CodeInvalidParams
	}
	return &mcphttp.Error{Code: code, Message: "resource not found (or not readable by you through agent " + c.agent + ")", Data: map[string]string{"uri": uri}}
}

func (c *call) subscribe(ctx context.Context, on bool) (any, error) {
	method := "resources/unsubscribe"
	if on {
		method = "resources/subscribe"
	}
	if on && c.req.Session != nil && !c.g.subs.room() {
		return nil, errTooManySubscriptions
	}
	res, err := c.forwardResource(ctx, method)
	if err != nil || c.req.Session == nil {
		return res, err
	}
	uri := stringParam(params(c.req), "uri")
	if on {
		if !c.g.subs.add(c.req.Session.ID, c.req.Session.Expires, uri) {
			return nil, errTooManySubscriptions
		}
	} else {
		c.g.subs.remove(c.req.Session.ID, uri)
	}
	return res, nil
}

func (c *call) listPrompts(ctx context.Context) (any, error) {
	cat := c.g.catalog(c.s, c.agent)
	allowed := map[string]bool{}
	for _, srv := range c.allowedContent(ctx, authz.ActionPromptsList) {
		allowed[srv.Ref()] = true
	}
	prompts := []json.RawMessage{}
	var refs []string
	for _, e := range cat.prompts {
		if allowed[e.Ref] {
			prompts = append(prompts, e.Raw)
			refs = append(refs, e.Ref)
		}
	}
	return c.listHints(map[string]any{"prompts": prompts}, "prompts/list", refs), nil
}

func (c *call) getPrompt(ctx context.Context) (any, error) {
	p := params(c.req)
	e, srv, v, err := c.prompt(ctx, stringParam(p, "name"))
	if err != nil {
		return nil, err
	}
	p["name"], _ = json.Marshal(e.Upstream)
	body, _ := json.Marshal(p)
	sc := &serverCall{c: c, ref: e.Ref, name: e.Upstream, action: authz.ActionPromptsGet, id: v.ID}
	res, err := sc.request(ctx, srv, "prompts/get", body, "", nil)
	if err != nil {
		return nil, forwardError(err)
	}
	return res, nil
}

// prompt finds a prompt of the agent by name and decides reading it (prompts/get): the prompt and
// the connection to its server and the decision that allowed it, or the error prompts/get and
// completion/complete answer with.
func (c *call) prompt(ctx context.Context, name string) (*exposed, *upstream.Server, *enforce.Verdict, error) {
	e, ok := c.g.catalog(c.s, c.agent).byName[name]
	if !ok {
		return nil, nil, nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, "unknown prompt %q: call prompts/list", name)
	}
	var cred *vault.Credential
	v := c.g.enforcer.Decide(ctx, c.input(authz.ActionPromptsGet, &authz.Tool{Ref: e.Ref}), c.needCredential(e.Ref, &cred))
	if !v.Allow {
		return nil, nil, nil, mcphttp.Errorf(mcphttp.CodeInvalidRequest, "%s", v.Explain())
	}
	srv, err := c.server(ctx, e.Ref, cred)
	if err != nil {
		return nil, nil, nil, mcphttp.Errorf(mcphttp.CodeInternalError, "the prompt's server is not available: %v", err)
	}
	return e, srv, v, nil
}

// complete routes completion/complete to the server of the prompt or resource it is about. A
// prompt or resource the caller cannot get is answered as prompts/get or resources/read answer
// it, so that completion reveals nothing those do not.
func (c *call) complete(ctx context.Context) (any, error) {
	p := params(c.req)
	var ref struct {
		Type string `json:"type"`
		Name string `json:"name"`
		URI  string `json:"uri"`
	}
	json.Unmarshal(p["ref"], &ref)
	empty := map[string]any{"completion": map[string]any{"values": []string{}}}
	switch ref.Type {
	case "ref/prompt":
		e, srv, _, err := c.prompt(ctx, ref.Name)
		if err != nil {
			return nil, err
		}
		if srv.Lists().Capabilities.Completions == nil {
			return empty, nil
		}
		var r map[string]any
		json.Unmarshal(p["ref"], &r)
		r["name"] = e.Upstream
		p["ref"], _ = json.Marshal(r)
		body, _ := json.Marshal(p)
		return forward(ctx, srv, "completion/complete", body)
	case "ref/resource":
		srv, ok := c.templateOwner(ctx, ref.URI)
		if !ok {
			return nil, c.resourceNotFound(ref.URI)
		}
		if srv.Lists().Capabilities.Completions == nil {
			return empty, nil
		}
		return forward(ctx, srv, "completion/complete", c.req.Params)
	}
	return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, `completion/complete needs a ref of type "ref/prompt" or "ref/resource"`)
}

// forward sends a request to a server and passes its result, or its JSON-RPC error, back.
func forward(ctx context.Context, srv *upstream.Server, method string, body json.RawMessage) (any, error) {
	res, err := srv.Request(ctx, method, body, "", nil)
	if err != nil {
		return nil, forwardError(err)
	}
	if _, ok := needsInput(res); ok {
		// Input requests are decided and forwarded for tools/call and prompts/get only: none
		// reaches the client undecided.
		return nil, mcphttp.Errorf(CodeInputNotForwarded, "the server asks the client for input to answer %s, which the gateway forwards only for tools/call and prompts/get", method)
	}
	return res, nil
}

// CodeInputNotForwarded answers a request whose server asks the client for input the gateway
// does not forward (an input_required result of resources/read).
const CodeInputNotForwarded = -32603

// forwardError is the JSON-RPC error of a forwarded request that failed.
func forwardError(err error) *mcphttp.Error {
	var rpc *upstream.RPCError
	var refused *mcphttp.Error
	switch {
	case errors.As(err, &rpc):
		return clientError(rpc)
	case errors.As(err, &refused):
		return refused
	}
	return mcphttp.Errorf(mcphttp.CodeInternalError, "%v", err)
}

// subscriptions remembers which sessions on this replica subscribed to which resources, until
// the session ends (DELETE on this replica) or expires. It holds at most maxSubscriptions
// (session, URI) pairs: beyond them, resources/subscribe is refused.
type subscriptions struct {
	mu        sync.Mutex
	byID      map[string]*sessionSubs // session -> its subscriptions
	n         int                     // URIs in byID
	minExpiry int64                   // the earliest expiry in byID, or earlier: a full set is swept only once one passed
	max       int                     // maxSubscriptions
	now       func() time.Time
}

type sessionSubs struct {
	expires int64 // unix seconds, the session's
	uris    []string
}

// maxSubscriptions bounds subscriptions: an entry is a URI and its share of a session's entry,
// some 100-200 bytes, so at most about 20 MiB.
const maxSubscriptions = 100_000

var errTooManySubscriptions = mcphttp.Errorf(mcphttp.CodeInternalError,
	"this gateway replica holds the most resource subscriptions it may (%d): unsubscribe from others, or retry later", maxSubscriptions)

func (s *subscriptions) init() {
	s.byID, s.max, s.now = map[string]*sessionSubs{}, maxSubscriptions, time.Now
}

// room reports whether a subscription may be added, sweeping expired sessions when full.
func (s *subscriptions) room() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.roomLocked()
}

func (s *subscriptions) roomLocked() bool {
	if now := s.now().Unix(); s.n >= s.max && now >= s.minExpiry {
		s.minExpiry = 0
		for id, e := range s.byID {
			if e.expires <= now {
				s.n -= len(e.uris)
				delete(s.byID, id)
			} else if s.minExpiry == 0 || e.expires < s.minExpiry {
				s.minExpiry = e.expires
			}
		}
	}
	return s.n < s.max
}

// add subscribes a session, which expires at expires (unix seconds), to uri. It reports whether
// there was room.
func (s *subscriptions) add(session string, expires int64, uri string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byID[session]
	if e != nil && slices.Contains(e.uris, uri) {
		return true
	}
	if !s.roomLocked() {
		return false
	}
	if e == nil {
		e = &sessionSubs{expires: expires}
		s.byID[session] = e
		if len(s.byID) == 1 || expires < s.minExpiry {
			s.minExpiry = expires
		}
	}
	e.uris = append(e.uris, uri)
	s.n++
	return true
}

func (s *subscriptions) remove(session, uri string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byID[session]
	if e == nil {
		return
	}
	before := len(e.uris)
	e.uris = slices.DeleteFunc(e.uris, func(u string) bool { return u == uri })
	s.n -= before - len(e.uris)
	if len(e.uris) == 0 {
		delete(s.byID, session)
	}
}

// drop forgets a session's subscriptions: it ended.
func (s *subscriptions) drop(session string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byID[session]; e != nil {
		s.n -= len(e.uris)
		delete(s.byID, session)
	}
}

// sessions are the live sessions subscribed to uri.
func (s *subscriptions) sessions(uri string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().Unix()
	var out []string
	for id, e := range s.byID {
		if e.expires > now && slices.Contains(e.uris, uri) {
			out = append(out, id)
		}
	}
	return out
}

// resourceUpdated relays an upstream's notifications/resources/updated to the sessions on this
// replica that subscribed to the resource.
func (g *Gateway) resourceUpdated(_, uri string) {
	for _, id := range g.subs.sessions(uri) {
		g.transport.Notify(id, "notifications/resources/updated", map[string]any{"uri": uri})
	}
}
