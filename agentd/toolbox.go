package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/mcpmeta"
	"github.com/lush-agents/lush/internal/telemetry"
)

// tokenTTL is how long a delegation token lives; a new one is signed when less than
// tokenRefresh of it is left, so a long invocation keeps a valid token.
const (
	tokenTTL     = identity.DefaultDelegationMaxTTL
	tokenRefresh = time.Minute
)

// toolbox is an agent's MCP session with the gateway for one invocation: the tools the gateway
// lists for this agent and caller, and calls of them.
type toolbox struct {
	s      *Server
	agent  string
	cl     *client.Client
	info   mcp.Implementation // agentd as the gateway's client
	tools  []model.Tool       // offered to the model, in the gateway's order
	byName map[string]string  // name offered to the model -> the gateway's tool name
	nextID atomic.Int64
}

// openToolbox connects to the gateway as the caller acting through agent, and lists the tools,
// offered under names that names accepts (the rule of the provider the agent's model runs on).
func (s *Server) openToolbox(ctx context.Context, agent string, caller identity.Caller, chain []string, names model.NameRule) (*toolbox, error) {
	tokens := &tokenSource{signer: s.opts.Signer, d: identity.Delegation{Principal: caller.ID, Groups: caller.Groups,
		Agent: agent, Chain: chain, Hops: caller.Hops, TTL: tokenTTL, Subject: caller.Token}}
	if _, err := tokens.token(); err != nil {
		return nil, err
	}
	url := strings.TrimSuffix(s.cfg.GatewayURL, "/") + "/gateway/agents/" + agent + "/mcp"
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPBasicClient(s.http),
		transport.WithHTTPHeaderFunc(func(ctx context.Context) map[string]string {
			h := map[string]string{}
			if tok, err := tokens.token(); err == nil {
				h["Authorization"] = "Bearer " + tok
			}
			telemetry.Propagator.Inject(ctx, propagation.MapCarrier(h))
			return h
		}))
	if err != nil {
		return nil, fmt.Errorf("connect to the gateway: %w", err)
	}
	cl := newGatewayClient(tr)
	ok := false
	defer func() {
		if !ok {
			cl.Close()
		}
	}()
	if err := cl.Start(ctx); err != nil {
		return nil, fmt.Errorf("connect to the gateway at %s: %w", url, err)
	}
	info := mcp.Implementation{Name: "lush-agentd/" + agent, Version: s.opts.Version}
	if _, err := cl.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: mcp.LATEST_PROTOCOL_VERSION,
		ClientInfo: info, Capabilities: agentCapabilities()}}); err != nil {
		return nil, fmt.Errorf("connect to the gateway at %s: %w", url, err)
	}
	b := &toolbox{s: s, agent: agent, cl: cl, info: info}
	req := mcp.ListToolsRequest{}
	var listed []mcp.Tool
	for range 100 {
		page, err := cl.ListTools(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("list the tools of agent %s at the gateway: %w", agent, err)
		}
		listed = append(listed, page.Tools...)
		if page.NextCursor == "" {
			break
		}
		req.Params.Cursor = page.NextCursor
	}
	b.offer(names, listed)
	ok = true
	return b, nil
}

// Close ends the session.
func (b *toolbox) Close() { b.cl.Close() }

// offer offers the gateway's tools to the model under names rule accepts (offerNames), and
// keeps the map back to the gateway's names.
func (b *toolbox) offer(rule model.NameRule, listed []mcp.Tool) {
	names := make([]string, len(listed))
	for i, t := range listed {
		names[i] = t.Name
	}
	b.tools, b.byName = make([]model.Tool, 0, len(listed)), make(map[string]string, len(listed))
	for i, name := range offerNames(rule, names) {
		if name == "" {
			continue // listed twice
		}
		t := listed[i]
		b.byName[name] = t.Name
		schema, _ := json.Marshal(t.InputSchema)
		if len(t.RawInputSchema) > 0 {
			schema = t.RawInputSchema
		}
		b.tools = append(b.tools, model.Tool{Name: name, Description: t.Description, InputSchema: schema})
	}
}

// call runs one tool call through the gateway. Whatever happens (a denial, a stub, an unknown
// tool, a failure) becomes a result the model can read.
func (b *toolbox) call(ctx context.Context, call *model.ToolCall) (ToolCall, *model.ToolResult) {
	tc := ToolCall{Name: call.Name, Arguments: call.Args}
	out := &model.ToolResult{ID: call.ID, Name: call.Name}
	real, ok := b.byName[call.Name]
	if !ok {
		names := make([]string, 0, len(b.tools))
		for _, t := range b.tools {
			names = append(names, t.Name)
		}
		tc.Status = "unknown_tool"
		tc.Error = fmt.Sprintf("there is no tool named %q; the tools are: %s", call.Name, strings.Join(names, ", "))
		out.IsError, out.Output = true, errorOutput("unknown_tool", tc.Error, nil)
		return tc, out
	}
	if real != call.Name {
		tc.MCPName = real
	}
	ctx, span := b.s.tracer.Start(ctx, "tool "+call.Name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("lush.agent", b.agent), attribute.String("lush.tool.name", real)))
	defer span.End()
	args := call.Args
	if args == nil {
		args = map[string]any{}
	}
	start := time.Now()
	resp, err := callTool(ctx, b.cl, b.info, &b.nextID, real, args)
	tc.LatencyMS = float64(time.Since(start).Microseconds()) / 1000
	var unanswered *unansweredError
	switch {
	case errors.As(err, &unanswered):
		tc.Status, tc.Error = "error", err.Error()
		out.IsError, out.Output = true, errorOutput("tool_error", tc.Error, nil)
	case err != nil:
		tc.Status, tc.Error = "error", "the gateway could not be reached: "+err.Error()
		out.IsError, out.Output = true, errorOutput("unavailable", tc.Error, nil)
	case resp.Error != nil:
		tc.Status, tc.Error = "error", resp.Error.Message
		out.IsError, out.Output = true, errorOutput("invalid_call", resp.Error.Message, nil)
	default:
		b.readResult(resp.Result, &tc, out)
	}
	span.SetAttributes(attribute.String("lush.tool", tc.Tool), attribute.String("lush.access", tc.Access),
		attribute.Float64("lush.latency_ms", tc.LatencyMS), attribute.String("lush.status", tc.Status),
		attribute.String("lush.decision_id", tc.DecisionID), attribute.String("lush.decision", tc.Outcome))
	if out.IsError {
		span.SetStatus(codes.Error, tc.Status)
	}
	return tc, out
}

// newGatewayClient is agentd's MCP client of the gateway: it speaks 2026-07-28 when the gateway
// does (server/discover), an older version otherwise, and answers what servers ask of it during
// a call the way an agent loop can, with no person at hand: an elicitation is declined; sampling,
// which would spend the agent's model on a server's prompt outside the agent's budget and policy,
// is not offered, and a request for it gets an error. roots are not offered either.
func newGatewayClient(tr transport.Interface) *client.Client {
	return client.NewClient(tr, client.WithElicitationHandler(declineElicitation{}))
}

// agentCapabilities are the client capabilities agentd declares: elicitation in form mode (always
// declined).
func agentCapabilities() mcp.ClientCapabilities {
	return mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapability{Form: &struct{}{}}}
}

type declineElicitation struct{}

func (declineElicitation) Elicit(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}, nil
}

// maxInputRounds bounds how many times one tool call is sent again with answers to what its
// server asked (2026-07-28's input_required results).
const maxInputRounds = 5

// callTool sends a tools/call through cl, with the request metadata its protocol version wants.
// An input_required result (2026-07-28) is answered as newGatewayClient answers server requests,
// elicitations declined, and the call sent again with the answers; a request agentd does not
// answer (sampling, roots) ends the call with an error.
func callTool(ctx context.Context, cl *client.Client, info mcp.Implementation, ids *atomic.Int64, name string, args map[string]any) (*transport.JSONRPCResponse, error) {
	params := map[string]any{"name": name, "arguments": args}
	for round := 0; ; round++ {
		raw, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("encode the call of %s: %w", name, err)
		}
		stamped, header, err := mcpmeta.Stamp(cl.ProtocolVersion(), info, agentCapabilities(), "tools/call", raw, nil)
		if err != nil {
			return nil, err
		}
		resp, err := cl.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION,
			ID: mcp.NewRequestId(ids.Add(1)), Method: "tools/call", Params: stamped, Header: header})
		if err != nil || resp.Error != nil {
			return resp, err
		}
		var ask struct {
			ResultType    string `json:"resultType"`
			InputRequests map[string]struct {
				Method string `json:"method"`
			} `json:"inputRequests"`
			RequestState string `json:"requestState"`
		}
		if json.Unmarshal(resp.Result, &ask) != nil || ask.ResultType != "input_required" {
			return resp, nil
		}
		if round == maxInputRounds {
			return nil, &unansweredError{fmt.Sprintf("the tool %s asked for input more than %d times", name, maxInputRounds)}
		}
		answers := map[string]any{}
		for id, req := range ask.InputRequests {
			if req.Method != string(mcp.MethodElicitationCreate) {
				return nil, &unansweredError{fmt.Sprintf("the tool %s asked for %s, which an agent does not answer", name, req.Method)}
			}
			answers[id] = map[string]any{"action": mcp.ElicitationResponseActionDecline}
		}
		params["inputResponses"], params["requestState"] = answers, ask.RequestState
	}
}

// unansweredError ends a call whose tool asked for something agentd does not answer.
type unansweredError struct{ msg string }

func (e *unansweredError) Error() string { return e.msg }

// toolResult is the part of an MCP tools/call result agentd reads.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Structured any  `json:"structuredContent"`
	IsError    bool `json:"isError"`
	Meta       struct {
		Decision *struct {
			ID       string `json:"id"`
			Tool     string `json:"tool"`
			Outcome  string `json:"outcome"`
			Access   string `json:"access"`
			Risk     string `json:"risk"`
			Revision string `json:"revision"`
		} `json:"dev.lush/decision"`
		Invocation *struct {
			ID    string     `json:"id"`
			Calls []ToolCall `json:"tool_calls"`
		} `json:"dev.lush/invocation"`
	} `json:"_meta"`
}

// readResult turns the gateway's answer into the call's record and the model's result.
func (b *toolbox) readResult(raw json.RawMessage, tc *ToolCall, out *model.ToolResult) {
	var r toolResult
	if err := json.Unmarshal(raw, &r); err != nil {
		tc.Status, tc.Error = "error", "the gateway's answer is not a tool result"
		out.IsError, out.Output = true, errorOutput("bad_result", tc.Error, nil)
		return
	}
	var texts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			texts = append(texts, c.Text)
		} else {
			texts = append(texts, "["+c.Type+" content omitted]")
		}
	}
	text := strings.Join(texts, "\n")
	if d := r.Meta.Decision; d != nil {
		tc.DecisionID, tc.Tool, tc.Outcome, tc.Access = d.ID, d.Tool, d.Outcome, d.Access
	}
	if inv := r.Meta.Invocation; inv != nil {
		tc.Invocation, tc.Calls = inv.ID, inv.Calls
	}
	switch {
	case r.IsError && tc.Outcome != "" && tc.Outcome != "allow":
		tc.Status, tc.Error = "denied", text
		out.IsError, out.Output = true, errorOutput("denied", text, tc)
	case r.IsError:
		tc.Status, tc.Error = "error", text
		out.IsError, out.Output = true, errorOutput("tool_error", text, tc)
	case tc.Outcome == "stub":
		tc.Status = "stubbed"
		out.Output = map[string]any{"result": resultValue(text, r.Structured), "stubbed": true,
			"note": "live writes are off: this write was not executed"}
	default:
		tc.Status = "ok"
		out.Output = map[string]any{"result": resultValue(text, r.Structured)}
	}
}

// resultValue is what the model reads of a result: its text, which MCP servers keep readable, or
// the structured content when there is no text.
func resultValue(text string, structured any) any {
	if text == "" && structured != nil {
		return structured
	}
	return text
}

// errorOutput is what the model reads for a failed call: short, with what to do next.
func errorOutput(code, msg string, tc *ToolCall) map[string]any {
	e := map[string]any{"code": code, "message": msg}
	if tc != nil && tc.DecisionID != "" {
		e["decision_id"] = tc.DecisionID
	}
	switch code {
	case "denied":
		e["hint"] = "this call is not allowed for you; do not retry it, use another tool or answer with what you have"
	case "unknown_tool":
		e["hint"] = "call one of the listed tools"
	}
	return map[string]any{"error": e}
}

// tokenSource signs delegation tokens and renews them before they expire.
type tokenSource struct {
	signer *identity.Signer
	d      identity.Delegation
	mu     sync.Mutex
	tok    string
	exp    time.Time
}

func (t *tokenSource) token() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tok != "" && time.Until(t.exp) > tokenRefresh {
		return t.tok, nil
	}
	tok, err := t.signer.Sign(t.d)
	if err != nil {
		return "", fmt.Errorf("sign the delegation token: %w", err)
	}
	t.tok, t.exp = tok, time.Now().Add(t.d.TTL)
	return tok, nil
}
