package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
)

// mcpHandler serves each agent as an MCP server with one tool, named after the agent, that
// invokes it. It is the Server seen as an mcphttp.Handler.
type mcpHandler Server

func (h *mcpHandler) Serve(ctx context.Context, req *mcphttp.Request) (any, error) {
	s := (*Server)(h)
	st := s.state.Load()
	if st == nil {
		return nil, mcphttp.Errorf(mcphttp.CodeInternalError, "no build is deployed yet")
	}
	a, ok := st.manifest.Agent(req.Endpoint)
	if !ok {
		return nil, mcphttp.Errorf(mcphttp.CodeInvalidRequest, "agent %q is not in the deployed build", req.Endpoint)
	}
	switch req.Method {
	case "initialize":
		return map[string]any{
			"protocolVersion": req.Protocol,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]any{"name": "lush-agent/" + a.Name, "title": "Agent " + a.Name, "version": s.opts.Version},
			"instructions": fmt.Sprintf("Agent %q as a tool: call %q with a message. The call runs the agent for you, under your identity; "+
				"its tool calls go through the Lush gateway and are checked by policy.", a.Name, a.Name),
		}, nil
	case "ping":
		return struct{}{}, nil
	case "tools/list":
		tools := []json.RawMessage{}
		if s.mayInvoke(ctx, a.Name) {
			tools = append(tools, a.MCPTool())
		}
		return map[string]any{"tools": tools}, nil
	case "tools/call":
		return s.callAgentTool(ctx, req, a.Name)
	}
	return nil, mcphttp.Errorf(mcphttp.CodeMethodNotFound, "method %q is not supported by an agent's MCP server", req.Method)
}

func (h *mcpHandler) Notification(context.Context, *mcphttp.Request) {}

// mayInvoke reports whether the caller may invoke the agent, by the policy (tools/list shows
// only what the caller could call). It is not an invocation, so it is not logged.
func (s *Server) mayInvoke(ctx context.Context, agent string) bool {
	eng := s.enforcer.Engine()
	if eng == nil {
		return false
	}
	c := identity.CallerFrom(ctx)
	chain := chainFor(c, agent)
	d := eng.Decide(ctx, authz.Input{Action: authz.ActionAgentInvoke, Agent: agent, Principal: enforce.PrincipalOf(c),
		Chain: chain, Depth: c.Depth(chain), Environment: s.enforcer.Environment()})
	return d.Outcome == authz.OutcomeAllow
}

// callAgentTool invokes the agent for an MCP tools/call. Denials and failures are tool results
// with isError, which a calling model reads and recovers from.
func (s *Server) callAgentTool(ctx context.Context, req *mcphttp.Request, agent string) (any, error) {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil || p.Name == "" {
		return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, `tools/call needs params {"name": %q, "arguments": {"message": "..."}}`, agent)
	}
	if p.Name != agent {
		return errorResult(fmt.Sprintf("Unknown tool %q: this server has one tool, %q.", p.Name, agent), nil), nil
	}
	var args struct {
		Message *string `json:"message"`
	}
	if len(p.Arguments) > 0 && string(p.Arguments) != "null" {
		if err := s.checkArguments(ctx, agent, p.Arguments); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(p.Arguments, &args); err != nil {
			return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, "arguments: must be an object with a string field \"message\"")
		}
	}
	if args.Message == nil || *args.Message == "" {
		return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, "arguments.message: required: what to ask agent %s", agent)
	}
	inv := Invocation{Agent: agent, Caller: identity.CallerFrom(ctx), Message: *args.Message}
	if tok := p.Meta.ProgressToken; len(tok) > 0 && string(tok) != "null" {
		steps := 0
		inv.OnEvent = func(e Event) {
			if e.Type != "tool_result" || e.Tool == nil {
				return
			}
			steps++
			req.Notify("notifications/progress", map[string]any{"progressToken": tok, "progress": steps,
				"message": fmt.Sprintf("%s called %s: %s", agent, e.Tool.Name, e.Tool.Status)})
		}
	}
	res, err := s.Invoke(ctx, inv)
	var denied *DeniedError
	switch {
	case errors.As(err, &denied):
		return errorResult(denied.Error(), map[string]any{"dev.lush/decision": map[string]any{"id": denied.DecisionID,
			"outcome": denied.Outcome, "reasons": denied.Reasons}}), nil
	case err != nil:
		return errorResult(err.Error(), nil), nil
	}
	structured := map[string]any{"response": res.Response, "status": res.Status, "invocation_id": res.ID}
	text := res.Response
	if res.Status != "ok" {
		text = fmt.Sprintf("Agent %s did not finish (%s): %s", agent, res.Status, res.Error)
		if res.Response != "" {
			text += "\nPartial answer: " + res.Response
		}
	}
	return map[string]any{
		"content":           []map[string]string{{"type": "text", "text": text}},
		"structuredContent": structured,
		"isError":           res.Status != "ok",
		"_meta": map[string]any{"dev.lush/invocation": map[string]any{"id": res.ID, "trace_id": res.TraceID, "usage": res.Usage,
			"turns": res.Turns, "tool_calls": res.Tools}},
	}, nil
}

// checkArguments refuses a tools/call of agent whose raw arguments exceed the argument limits
// (Config.ArgumentLimits) or hold a string that is not text, before anything decodes them: the
// refusal is recorded as a denial of the invocation (enforce.Enforcer.CheckArguments), and the
// client gets an invalid-params error that names the limit, with the decision in its data. It
// returns nil for arguments within the limits.
func (s *Server) checkArguments(ctx context.Context, agent string, raw json.RawMessage) error {
	v, problem := s.enforcer.CheckArguments(ctx, invokeInput(identity.CallerFrom(ctx), agent), raw, s.cfg.ArgumentLimits)
	if problem == nil {
		return nil
	}
	return &mcphttp.Error{Code: mcphttp.CodeInvalidParams, Message: enforce.ExplainArguments(problem, v.ID),
		Data: map[string]any{"dev.lush/decision": v.Meta()}}
}

func errorResult(msg string, meta map[string]any) map[string]any {
	r := map[string]any{"isError": true, "content": []map[string]string{{"type": "text", "text": msg}}}
	if meta != nil {
		r["_meta"] = meta
	}
	return r
}
