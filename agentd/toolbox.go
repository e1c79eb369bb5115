package agentd

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
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
	tools  []model.Tool
	byName map[string]string // name offered to the model -> the gateway's tool name
	nextID atomic.Int64
}

// openToolbox connects to the gateway as the caller acting through agent, and lists the tools.
func (s *Server) openToolbox(ctx context.Context, agent string, caller identity.Caller, chain []string) (*toolbox, error) {
	tokens := &tokenSource{signer: s.opts.Signer, d: identity.Delegation{Principal: caller.ID, Groups: caller.Groups,
		Agent: agent, Chain: chain, TTL: tokenTTL, Subject: caller.Token}}
	if _, err := tokens.token(); err != nil {
		return nil, err
	}
	url := strings.TrimSuffix(s.cfg.GatewayURL, "/") + "/gateway/agents/" + agent + "/mcp"
	cl, err := client.NewStreamableHttpClient(url, transport.WithHTTPBasicClient(s.http),
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
	ok := false
	defer func() {
		if !ok {
			cl.Close()
		}
	}()
	if err := cl.Start(ctx); err != nil {
		return nil, fmt.Errorf("connect to the gateway at %s: %w", url, err)
	}
	// A session: the tool calls below are raw requests, which would not carry the per-request
	// _meta a 2026-07-28 (stateless) request needs.
	if _, err := cl.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: mcp.LATEST_LEGACY_PROTOCOL_VERSION,
		ClientInfo: mcp.Implementation{Name: "lush-agentd/" + agent, Version: s.opts.Version}}}); err != nil {
		return nil, fmt.Errorf("connect to the gateway at %s: %w", url, err)
	}
	b := &toolbox{s: s, agent: agent, cl: cl, byName: map[string]string{}}
	req := mcp.ListToolsRequest{}
	for range 100 {
		page, err := cl.ListTools(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("list the tools of agent %s at the gateway: %w", agent, err)
		}
		for _, t := range page.Tools {
			b.add(t)
		}
		if page.NextCursor == "" {
			break
		}
		req.Params.Cursor = page.NextCursor
	}
	ok = true
	return b, nil
}

// Close ends the session.
func (b *toolbox) Close() { b.cl.Close() }

// invalidName matches what function-calling models refuse in a tool name.
var invalidName = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// add offers a gateway tool to the model, under a name models accept (letters, digits, _ . -,
// at most 64 characters, unique).
func (b *toolbox) add(t mcp.Tool) {
	name := invalidName.ReplaceAllString(t.Name, "_")
	if name == "" || !(name[0] == '_' || name[0] >= 'A' && name[0] <= 'Z' || name[0] >= 'a' && name[0] <= 'z') {
		name = "t_" + name
	}
	if len(name) > 64 {
		name = name[:64]
	}
	for i := 2; ; i++ {
		if _, taken := b.byName[name]; !taken {
			break
		}
		suffix := fmt.Sprintf("_%d", i)
		name = name[:min(len(name), 64-len(suffix))] + suffix
	}
	b.byName[name] = t.Name
	schema, _ := json.Marshal(t.InputSchema)
	if len(t.RawInputSchema) > 0 {
		schema = t.RawInputSchema
	}
	b.tools = append(b.tools, model.Tool{Name: name, Description: t.Description, InputSchema: schema})
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
	ctx, span := b.s.tracer.Start(ctx, "tool "+call.Name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("lush.agent", b.agent), attribute.String("lush.tool.name", real)))
	defer span.End()
	args := call.Args
	if args == nil {
		args = map[string]any{}
	}
	start := time.Now()
	resp, err := b.cl.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION,
		ID: mcp.NewRequestId(b.nextID.Add(1)), Method: "tools/call", Params: map[string]any{"name": real, "arguments": args}})
	tc.LatencyMS = float64(time.Since(start).Microseconds()) / 1000
	switch {
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
