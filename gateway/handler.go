package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
)

// handler answers the MCP messages of agent endpoints. It is the Gateway seen as an
// mcphttp.Handler.
type handler Gateway

// serverVersion is reported in initialize.
var serverVersion = "dev"

func (h *handler) Serve(ctx context.Context, req *mcphttp.Request) (any, error) {
	g := (*Gateway)(h)
	s := g.state.Load()
	if s == nil {
		return nil, mcphttp.Errorf(mcphttp.CodeInternalError, "no build is deployed yet")
	}
	if req.Stateless() {
		req.Params = withoutHopMeta(req.Params)
	}
	call := &call{g: g, s: s, agent: req.Endpoint, req: req, caller: identity.CallerFrom(ctx)}
	// What the gateway sends upstream for this request declares this client's capabilities (to a
	// 2026-07-28 server), so that a server needing one the client lacks refuses the request with
	// MissingRequiredClientCapability instead of asking for what the gateway would not forward.
	ctx = upstream.WithClientCapabilities(ctx, req.Capabilities())
	switch req.Method {
	case "initialize":
		return g.initialize(req), nil
	case "server/discover":
		return g.discover(req), nil
	case "ping":
		return struct{}{}, nil
	case "logging/setLevel":
		var p struct {
			Level string `json:"level"`
		}
		if err := json.Unmarshal(req.Params, &p); err != nil || p.Level == "" {
			return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, `logging/setLevel needs params {"level": "<level>"}`)
		}
		// Accepted and not kept: the gateway sends no log messages of its own (a level kept per
		// session would be memory no session ends).
		return struct{}{}, nil
	case "tools/list":
		return call.listTools(ctx)
	case "tools/call":
		return call.callTool(ctx)
	case "resources/list":
		return call.listContent(ctx, authz.ActionResourcesList, "resources/list", "resources")
	case "resources/templates/list":
		return call.listContent(ctx, authz.ActionResourcesList, "resources/templates/list", "resourceTemplates")
	case "resources/read":
		return call.forwardResource(ctx, "resources/read")
	case "resources/subscribe", "resources/unsubscribe":
		return call.subscribe(ctx, req.Method == "resources/subscribe")
	case "prompts/list":
		return call.listPrompts(ctx)
	case "prompts/get":
		return call.getPrompt(ctx)
	case "completion/complete":
		return call.complete(ctx)
	case "tasks/get", "tasks/result", "tasks/update", "tasks/cancel", "tasks/list":
		return call.task(ctx)
	case "skills/list", "skills/get", "resources/directory/read":
		if g.skillsCapability(req.Endpoint) == nil {
			break // no server of the agent serves skills: the methods do not exist here
		}
		if req.Method == "skills/list" {
			return call.listSkills(ctx)
		}
		return call.readSkill(ctx, req.Method)
	}
	return nil, mcphttp.Errorf(mcphttp.CodeMethodNotFound, "method %q is not supported", req.Method)
}

func (h *handler) Notification(_ context.Context, req *mcphttp.Request) {
	// notifications/initialized, roots/list_changed: nothing to do. Cancellations are handled by
	// the transport, which cancels the request's context; the upstream call follows.
	_ = req
}

func (g *Gateway) initialize(req *mcphttp.Request) any {
	res := map[string]any{
		"protocolVersion": req.Protocol,
		"capabilities":    capabilities(false),
		"serverInfo":      serverInfo(req.Endpoint),
		"instructions":    instructions(req.Endpoint),
	}
	g.addTasksCapability(res["capabilities"].(map[string]any), req)
	g.addSkillsCapability(res["capabilities"].(map[string]any), req.Endpoint)
	return res
}

// discover answers server/discover (MCP 2026-07-28): what initialize answers, with the versions
// the endpoint speaks instead of one negotiated, and the server's name in the result's _meta.
// It is the same for every caller of the endpoint, hence public.
func (g *Gateway) discover(req *mcphttp.Request) any {
	caps := capabilities(true)
	if key, tasks := g.tasksCapability(req.Endpoint, protocolTasksExtension); tasks != nil {
		caps[key] = tasks
	}
	g.addSkillsCapability(caps, req.Endpoint)
	return map[string]any{
		"supportedVersions": g.transport.SupportedVersions(),
		"capabilities":      caps,
		"instructions":      instructions(req.Endpoint),
		"ttlMs":             discoverTTL.Milliseconds(),
		"cacheScope":        "public",
		"_meta":             map[string]any{mcphttp.MetaServerInfo: serverInfo(req.Endpoint)},
	}
}

// discoverTTL is how long a client may reuse a server/discover result.
const discoverTTL = time.Minute

// capabilities are what an agent endpoint offers. Stateless (2026-07-28) clients get list
// changes on subscriptions/listen streams, and no resource subscriptions (the transport's listen
// streams do not establish them).
func capabilities(stateless bool) map[string]any {
	if stateless {
		return map[string]any{"tools": map[string]any{"listChanged": true}, "resources": map[string]any{"listChanged": true},
			"prompts": map[string]any{"listChanged": true}, "logging": map[string]any{}, "completions": map[string]any{}}
	}
	return map[string]any{
		"tools":       map[string]any{"listChanged": true},
		"resources":   map[string]any{"subscribe": true, "listChanged": true},
		"prompts":     map[string]any{"listChanged": true},
		"logging":     map[string]any{},
		"completions": map[string]any{},
	}
}

func serverInfo(agent string) map[string]any {
	return map[string]any{"name": "lush/" + agent, "title": "Lush gateway: agent " + agent, "version": serverVersion}
}

func instructions(agent string) string {
	return fmt.Sprintf("Tools of agent %q, through the Lush gateway. Every call is checked by policy; "+
		"write tools may answer with a stub (nothing executed) unless live writes are on.", agent)
}

// checkParamHeaders checks the Mcp-Param-* headers of a stateless tools/call against the input
// schema of the tool it calls (the properties marked x-mcp-header).
func (c *call) checkParamHeaders(e *exposed) error {
	if !c.req.Stateless() || !bytes.Contains(e.Raw, []byte("x-mcp-header")) {
		return nil
	}
	var t struct {
		InputSchema json.RawMessage `json:"inputSchema"`
	}
	json.Unmarshal(e.Raw, &t)
	return c.req.CheckParamHeaders(t.InputSchema)
}

// call is the context of one request at an agent endpoint.
type call struct {
	g      *Gateway
	s      *snapshot
	agent  string
	req    *mcphttp.Request
	caller identity.Caller
}

// input is the policy input for this caller at this agent.
func (c *call) input(action string, tool *authz.Tool) authz.Input {
	chain := c.chain()
	return authz.Input{Action: action, Principal: enforce.PrincipalOf(c.caller), Agent: c.agent,
		Chain: chain, Depth: c.caller.Depth(chain), Tool: tool}
}

// chain is the agents acting in the call, the caller's first: the delegation's chain, else the
// route's agent alone.
func (c *call) chain() []string {
	if len(c.caller.Chain) == 0 {
		return []string{c.agent}
	}
	return c.caller.Chain
}

// params are the request's params by name: what json.Unmarshal into the map gives, and an empty
// map for params that are absent, null or not a JSON object.
func params(req *mcphttp.Request) map[string]json.RawMessage {
	if p, ok := splitObject(req.Params); ok {
		return p
	}
	var p map[string]json.RawMessage
	json.Unmarshal(req.Params, &p)
	if p == nil {
		p = map[string]json.RawMessage{}
	}
	return p
}

// splitObject is params' own decoder, for the params clients send (an object whose keys are
// printable ASCII without escapes): it splits the object into its members without reflection or
// copies, each value a slice of data whose capacity ends with it. It reports false for anything
// else, which json.Unmarshal decodes (TestSplitObjectIsUnmarshal compares the two).
func splitObject(data []byte) (map[string]json.RawMessage, bool) {
	if !json.Valid(data) {
		return nil, false
	}
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '{' {
		return nil, false
	}
	p := make(map[string]json.RawMessage, 4)
	i = skipSpace(data, i+1)
	if data[i] == '}' {
		return p, true
	}
	for {
		// data is valid JSON: here is a key, a colon and a value.
		start := i + 1
		end := start
		for ; data[end] != '"'; end++ {
			if c := data[end]; c == '\\' || c < 0x20 || c >= 0x80 {
				return nil, false
			}
		}
		key := string(data[start:end])
		i = skipSpace(data, end+1) + 1 // past the colon
		i = skipSpace(data, i)
		vend := skipValue(data, i)
		p[key] = json.RawMessage(data[i:vend:vend])
		i = skipSpace(data, vend)
		if data[i] == '}' {
			return p, true
		}
		i = skipSpace(data, i+1) // past the comma
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns where the JSON value at data[i:] ends; data is valid JSON.
func skipValue(data []byte, i int) int {
	depth := 0
	for ; i < len(data); i++ {
		switch data[i] {
		case '"':
			for i++; data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a number or a literal
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i // the end of a number or a literal
			}
		}
	}
	return i
}

func stringParam(p map[string]json.RawMessage, name string) string {
	var s string
	json.Unmarshal(p[name], &s)
	return s
}

// hopMeta are the _meta keys of a stateless request that describe its hop (client to gateway):
// the transport has read them into the Request, and they are not the upstream's to see (the
// gateway's request to an upstream carries its own).
var hopMeta = []string{mcphttp.MetaProtocolVersion, mcphttp.MetaClientInfo, mcphttp.MetaClientCapabilities, mcphttp.MetaLogLevel}

// withoutHopMeta returns params without the hop's _meta keys (and without _meta when nothing
// else is in it).
func withoutHopMeta(params json.RawMessage) json.RawMessage {
	var p, meta map[string]json.RawMessage
	if json.Unmarshal(params, &p) != nil || json.Unmarshal(p["_meta"], &meta) != nil || meta == nil {
		return params
	}
	for _, k := range hopMeta {
		delete(meta, k)
	}
	if len(meta) == 0 {
		delete(p, "_meta")
	} else {
		p["_meta"], _ = json.Marshal(meta)
	}
	out, err := json.Marshal(p)
	if err != nil {
		return params
	}
	return out
}
