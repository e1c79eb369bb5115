package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lush-agents/lush/gateway/localtool"
	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/stub"
	"github.com/lush-agents/lush/vault"
)

// listTools offers the agent's tools that this caller may use: each tool is decided like a call
// (action tools/list), so what a client sees is exactly what it could call.
func (c *call) listTools(ctx context.Context) (any, error) {
	if c.warm(ctx) {
		c.g.invalidate()
	}
	cat := c.g.catalog(c.s, c.agent)
	tools := make([]json.RawMessage, 0, len(cat.tools))
	var refs []string // the servers of the tools listed (caching.go)
	for _, e := range cat.tools {
		v := c.g.enforcer.Decide(ctx, c.input(authz.ActionToolsList, &authz.Tool{Ref: e.Ref, Name: e.Upstream}))
		if v.Allow {
			tools = append(tools, e.Raw)
			refs = append(refs, e.serverRef())
		}
	}
	return c.listHints(map[string]any{"tools": tools}, "tools/list", refs), nil
}

// toolCall is one tools/call on its way through the gateway.
type toolCall struct {
	e    *exposed
	p    map[string]json.RawMessage // the request's params
	args any                        // the arguments, decoded
	sch  *schemas                   // the tool's input and output schemas
	cred *vault.Credential          // the credential the call carries, once decided
	span trace.Span
	// retry is the answer of a retry to the call's in-band approval (inband.go), or nil.
	retry *approvalRetry
}

// approvalCall is what an approval of the call is bound to.
func (c *call) approvalCall(tc *toolCall) approval.Call {
	return approval.Call{Tool: tc.e.Ref, ToolName: tc.e.Upstream, Arguments: tc.p["arguments"], Principal: c.caller.ID, Agent: c.agent}
}

// callTool decides a tools/call, records it, and then denies it, stubs it, or runs it: decide,
// run, finish.
func (c *call) callTool(ctx context.Context) (any, error) {
	p := params(c.req)
	name := stringParam(p, "name")
	if name == "" {
		return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, `tools/call needs params {"name": "<tool>", "arguments": {...}}`)
	}
	e, ok := c.g.catalog(c.s, c.agent).byTool[name]
	if !ok {
		return c.unknownTool(ctx, name), nil
	}
	if err := c.checkParamHeaders(e); err != nil {
		return nil, err
	}
	tc := &toolCall{e: e, p: p}
	if raw, ok := p["arguments"]; ok && string(raw) != "null" {
		if err := c.checkArguments(ctx, e, raw); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &tc.args); err != nil {
			return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, "tools/call arguments are not valid JSON")
		}
		if _, isObj := tc.args.(map[string]any); !isObj {
			return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, "tools/call arguments must be an object")
		}
	}
	var err error
	if tc.retry, err = c.takeApprovalRetry(p, c.approvalCall(tc)); err != nil {
		return nil, err
	}
	if c.g.tracing {
		ctx, tc.span = c.g.tracer.Start(ctx, "tools/call "+name, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("lush.agent", c.agent), attribute.String("lush.tool", e.Ref),
				attribute.String("lush.tool.name", e.Upstream), attribute.String("lush.principal", c.caller.ID)))
	} else { // the no-op tracer: nothing to name or describe (the attributes would only be allocated)
		ctx, tc.span = c.g.tracer.Start(ctx, "tools/call")
	}
	defer tc.span.End()

	v, refusal := c.decideCall(ctx, tc)
	if refusal != nil {
		return refusal, nil
	}
	start := time.Now()
	result, err := c.runCall(c.withTasks(ctx), tc, v)
	if err == nil {
		c.recordTask(tc.e, v.ID, result)
	}
	return c.finishCall(tc, v, result, err, time.Since(start))
}

// maxProbedName bounds what the decision log keeps of a name the agent has no tool by.
const maxProbedName = 128

// unknownTool decides a tools/call of a name the agent's catalog does not have, so that a caller
// probing for tools is in the decision log: the policy denies it (lush.capability.unknown_tool),
// with an answer that is the same whether the name is a tool of another agent, of no agent, or
// one the agent's allowlist leaves out. The policy sees the name (bounded), not the arguments.
func (c *call) unknownTool(ctx context.Context, name string) any {
	v := c.g.enforcer.Decide(ctx, c.input(authz.ActionToolsCall, &authz.Tool{Ref: "", Name: bounded(name, maxProbedName)}))
	if v.Allow { // no policy allows a tool that does not exist; should one, nothing runs
		v.Complete(decisionlog.StatusError, 0, nil, "the agent has no tool by this name")
	}
	return toolError(v.Explain(), v)
}

// decideCall decides the call (waiting for a person's approval when the policy asks for one)
// and records the decision. It returns the verdict of a call that may run, or the result that
// answers a call that does not: denied, stubbed, or refused approval.
func (c *call) decideCall(ctx context.Context, tc *toolCall) (*enforce.Verdict, any) {
	e, span := tc.e, tc.span
	// The arguments are checked against the tool's input schema before the decision, which
	// refuses a call that does not match (lush.schema.invalid_arguments): logged like any denial.
	tc.sch = e.compiled()
	tool := &authz.Tool{Ref: e.Ref, Name: e.Upstream}
	if schemaErrs := tc.sch.checkArguments(tc.p["arguments"]); len(schemaErrs) > 0 {
		// Only a mismatch is sent: a valid call's input is the same at every enforcement point.
		invalid := false
		tool.ArgumentsValid, tool.SchemaErrors = &invalid, schemaErrs
	}
	// A built-in tool that would refuse the arguments says so before the decision, which denies
	// the call (lush.tool.refused) instead of asking a person to approve what cannot run.
	tool.Refusal = c.g.builtinRefusal(e, tc.args)
	in := c.input(authz.ActionToolsCall, tool)
	in.Arguments = tc.args
	in.LiveWrites = c.g.cfg.LiveWrites.Live(e.Ref)
	var opts []enforce.Option
	if e.Local == nil && e.Agent == "" && e.Builtin == "" {
		opts = append(opts, c.needCredential(e.Ref, &tc.cred))
	}
	v := c.g.enforcer.Decide(ctx, in, opts...)
	if span.IsRecording() { // SetAttributes does nothing otherwise
		span.SetAttributes(attribute.String("lush.decision", v.Outcome), attribute.String("lush.decision_id", v.ID),
			attribute.String("lush.access", v.Access), attribute.String("lush.risk", v.Risk),
			attribute.Int64("lush.decision.latency_us", v.Latency.Microseconds()), attribute.String("lush.revision", v.Revision))
	}
	if v.Outcome == authz.OutcomeApproval {
		// The call waits for a person; approved, it runs under a decision of its own.
		span.SetAttributes(attribute.String("lush.status", "approval_required"))
		var refusal any
		if v, refusal = c.awaitApproval(ctx, tc, in, v, opts...); refusal != nil {
			return nil, refusal
		}
	}
	switch v.Outcome {
	case authz.OutcomeAllow:
		return v, nil
	case authz.OutcomeStub:
		v.Complete(decisionlog.StatusStubbed, 0, nil, "")
		span.SetAttributes(attribute.String("lush.status", "stubbed"))
		return nil, stub.Result(stubCall(e, tc.args, v))
	case authz.OutcomeApproval: // approved, and the policy asks again: refused rather than asked in a loop
		v.Complete(decisionlog.StatusError, 0, nil, "the policy asked for approval of an approved call")
		span.SetAttributes(attribute.String("lush.status", "denied"))
		msg := fmt.Sprintf("This call was approved, but the policy still asks for approval (%s), so it is refused (decision %s).",
			joinReasons(v.Approvals), v.ID)
		return nil, toolError(msg, v)
	default: // deny, error
		span.SetAttributes(attribute.String("lush.status", "denied"))
		return nil, toolError(v.Explain(), v)
	}
}

// runCall runs an allowed call: a local tool, an agent (lush://), a built-in tool, or the
// upstream MCP server's tool (with the credential the decision fetched).
func (c *call) runCall(ctx context.Context, tc *toolCall, v *enforce.Verdict) (json.RawMessage, error) {
	e, args := tc.e, tc.p["arguments"]
	switch {
	case e.Local != nil:
		return localtool.Run(ctx, c.g.opts.ProjectDir, e.Local, localtool.Request{Tool: e.Ref, Arguments: args,
			Call: localtool.Call{ID: v.ID, Agent: c.agent, Principal: c.caller.ID}})
	case e.Agent != "":
		return c.callAgent(ctx, e.Agent, tc.p)
	case e.Builtin != "":
		return c.g.runBuiltin(ctx, e, args)
	case e.A2A != "":
		return c.callA2A(ctx, e, tc.args, tc.cred)
	default:
		return c.forwardCall(ctx, e, tc.p, v.ID, tc.cred)
	}
}

// finishCall records how the call ended (its completion, always: the log must say how every
// allowed call ended, even when the client went away) and answers it: the result, with the
// decision in its _meta, unless it fails its output schema.
func (c *call) finishCall(tc *toolCall, v *enforce.Verdict, result json.RawMessage, err error, latency time.Duration) (any, error) {
	e, span := tc.e, tc.span
	recording := span.IsRecording() // SetAttributes does nothing otherwise
	if recording {
		span.SetAttributes(attribute.Int64("lush.upstream.latency_us", latency.Microseconds()))
	}
	status, rpcErr := outcome(err)
	if status == decisionlog.StatusOK && isErrorResult(result) {
		status = decisionlog.StatusError
	}
	if err == nil {
		if problem := tc.sch.checkResult(result); problem != "" {
			// The result goes no further: the model gets an error result, the log the reason.
			why := fmt.Sprintf("the output of %s did not match its declared output schema: %s", e.Name, problem)
			v.Complete(decisionlog.StatusError, latency, result, why)
			msg := fmt.Sprintf("The call ran, but %s; the result is withheld (decision %s).", why, v.ID)
			span.SetAttributes(attribute.String("lush.status", decisionlog.StatusError))
			span.SetStatus(codes.Error, "output schema mismatch")
			return toolError(msg, v), nil
		}
	}
	errText := ""
	if err != nil && tc.cred != nil {
		// An upstream's message could echo what it was sent.
		err = scrubbed{err, tc.cred.Scrub(err.Error())}
	}
	if err != nil {
		errText = err.Error()
	}
	v.Complete(status, latency, result, errText)
	if recording {
		span.SetAttributes(attribute.String("lush.status", status))
	}
	switch {
	case rpcErr != nil:
		if tc.cred != nil {
			rpcErr.Message = tc.cred.Scrub(rpcErr.Message)
		}
		span.SetStatus(codes.Error, rpcErr.Message)
		return nil, rpcErr
	case err != nil:
		span.SetStatus(codes.Error, status)
		return toolError(upstreamProblem(e.Ref, err, v.ID), v), nil
	}
	return withDecision(result, v), nil
}

// withDecision adds the decision to a tool result's _meta ("dev.lush/decision"), so that
// programs (agentd's traces, say) know which decision let the call run. It runs on every allowed
// call: a result without _meta (the usual case) gets the field spliced in, without decoding the
// result; one with _meta is decoded and merged. A result that is not an object is returned as it
// is.
func withDecision(result json.RawMessage, v *enforce.Verdict) json.RawMessage {
	body := bytes.TrimSpace(result)
	if len(body) < 2 || body[0] != '{' {
		return result
	}
	if !bytes.Contains(body, []byte(`"_meta"`)) {
		// {"_meta":{"dev.lush/decision":<meta>}, followed by the result's own members.
		meta := v.MetaJSON()
		rest := bytes.TrimSpace(body[1:])
		out := make([]byte, 0, len(body)+len(meta)+len(`{"_meta":{"dev.lush/decision":},`)+1)
		out = append(append(append(out, `{"_meta":{"dev.lush/decision":`...), meta...), '}')
		if rest[0] != '}' {
			out = append(out, ',')
		}
		return append(out, rest...)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return result
	}
	merged := map[string]json.RawMessage{}
	json.Unmarshal(obj["_meta"], &merged)
	merged["dev.lush/decision"] = v.MetaJSON()
	obj["_meta"], _ = json.Marshal(merged)
	out, err := json.Marshal(obj)
	if err != nil {
		return result
	}
	return out
}

// forwardCall sends the call to its upstream under the upstream's tool name, relaying progress
// (and log messages that belong to it) to the client.
func (c *call) forwardCall(ctx context.Context, e *exposed, p map[string]json.RawMessage, decisionID string, cred *vault.Credential) (json.RawMessage, error) {
	srv, err := c.server(ctx, e.Ref, cred)
	if err != nil {
		return nil, err
	}
	var token string
	var notify upstream.Notify
	var meta json.RawMessage
	downstream := progressToken(p)
	if downstream != nil {
		token = "lush-" + decisionID
		meta = withProgressToken(p["_meta"], token)
	}
	notify = func(method string, params json.RawMessage) {
		switch method {
		case "notifications/progress":
			if downstream == nil {
				return
			}
			var pp map[string]json.RawMessage
			if json.Unmarshal(params, &pp) != nil {
				return
			}
			pp["progressToken"] = downstream
			c.req.Notify(method, pp)
		case "notifications/message":
			c.req.Notify(method, json.RawMessage(params))
		}
	}
	// The requests the upstream sends during the call (sampling, elicitation, roots) are decided
	// as part of this call and reach its client as the client's version allows (serverreq.go).
	sc := &serverCall{c: c, ref: e.Ref, name: e.Upstream, action: authz.ActionToolsCall, id: decisionID}
	return sc.request(ctx, srv, "tools/call", forwardParams(p, e.Upstream, meta), token, notify)
}

// forwardParams is the params object of a forwarded tools/call: the client's params with the
// upstream's tool name and, when meta is not nil, that _meta, the members in sorted order (as
// json.Marshal of the map would put them). The client's values are copied as they came: each
// was decoded from a valid JSON document (params), so it is valid JSON, and the upstream reads
// the same values the policy decided on.
func forwardParams(p map[string]json.RawMessage, name string, meta json.RawMessage) json.RawMessage {
	keys := make([]string, 0, len(p)+2)
	size := 64 + len(name) + len(meta)
	for k, v := range p {
		if k != "name" && (k != "_meta" || meta == nil) {
			keys = append(keys, k)
			size += len(k) + len(v) + 4
		}
	}
	keys = append(keys, "name")
	if meta != nil {
		keys = append(keys, "_meta")
	}
	slices.Sort(keys)
	out := make([]byte, 0, size)
	out = append(out, '{')
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(appendJSONString(out, k), ':')
		switch {
		case k == "name":
			out = appendJSONString(out, name)
		case k == "_meta" && meta != nil:
			out = append(out, meta...)
		default:
			out = append(out, p[k]...)
		}
	}
	return append(out, '}')
}

// appendJSONString appends s as a JSON string, as json.Marshal encodes it.
func appendJSONString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(out, b...)
		}
	}
	return append(append(append(out, '"'), s...), '"')
}

// scrubbed is an error whose text had a credential's values removed; errors.As still sees the
// original.
type scrubbed struct {
	err  error
	text string
}

func (s scrubbed) Error() string { return s.text }
func (s scrubbed) Unwrap() error { return s.err }

func progressToken(p map[string]json.RawMessage) json.RawMessage {
	raw, ok := p["_meta"]
	if !ok { // the usual case: nothing to decode (decoding nothing fails, which also gives nil)
		return nil
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(raw, &meta) != nil {
		return nil
	}
	t, ok := meta["progressToken"]
	if !ok || string(t) == "null" {
		return nil
	}
	return t
}

func withProgressToken(meta json.RawMessage, token string) json.RawMessage {
	m := map[string]json.RawMessage{}
	json.Unmarshal(meta, &m)
	m["progressToken"], _ = json.Marshal(token)
	b, _ := json.Marshal(m)
	return b
}

// outcome classifies an upstream failure; a JSON-RPC error from the server goes back to the
// client as the same JSON-RPC error.
func outcome(err error) (string, *mcphttp.Error) {
	var rpc *upstream.RPCError
	var unavailable *upstream.ErrUnavailable
	var refused *mcphttp.Error // the gateway refuses what the client sent (exchange.go)
	switch {
	case err == nil:
		return decisionlog.StatusOK, nil
	case errors.As(err, &rpc):
		return decisionlog.StatusError, clientError(rpc)
	case errors.As(err, &refused):
		return decisionlog.StatusError, refused
	case errors.As(err, &unavailable):
		return decisionlog.StatusUnavailable, nil
	case errors.Is(err, context.DeadlineExceeded):
		return decisionlog.StatusTimeout, nil
	case errors.Is(err, context.Canceled):
		return decisionlog.StatusCancelled, nil
	}
	return decisionlog.StatusError, nil
}

// clientError is an upstream's JSON-RPC error as its client gets it: the same error. A
// MissingRequiredClientCapability error (-32021, which a 2026-07-28 client gets with HTTP 400)
// also names in its message the capabilities its data lists when the server's message does not,
// so that a client of an earlier version, which has no such code, learns what it lacks.
func clientError(rpc *upstream.RPCError) *mcphttp.Error {
	e := &mcphttp.Error{Code: rpc.Code, Message: rpc.Message, Data: rpc.Data}
	if rpc.Code != mcphttp.CodeMissingClientCapability {
		return e
	}
	var data struct {
		Required map[string]json.RawMessage `json:"requiredCapabilities"`
	}
	json.Unmarshal(rpc.Data, &data)
	var unnamed []string
	for _, name := range slices.Sorted(maps.Keys(data.Required)) {
		if !strings.Contains(e.Message, name) && len(unnamed) < maxNamedCapabilities {
			unnamed = append(unnamed, bounded(name, 64))
		}
	}
	if len(unnamed) > 0 {
		e.Message += " (the client did not declare the capabilities: " + strings.Join(unnamed, ", ") + ")"
	}
	return e
}

// maxNamedCapabilities bounds the capabilities clientError names.
const maxNamedCapabilities = 8

func upstreamProblem(ref string, err error, decisionID string) string {
	var unavailable *upstream.ErrUnavailable
	switch {
	case errors.As(err, &unavailable):
		return fmt.Sprintf("The tool is temporarily unavailable: %v. Try again shortly (decision %s).", err, decisionID)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("The tool did not answer in time: %v (decision %s).", err, decisionID)
	case errors.Is(err, context.Canceled):
		return fmt.Sprintf("The call was cancelled (decision %s).", decisionID)
	}
	return fmt.Sprintf("The call to %s failed: %v (decision %s).", ref, err, decisionID)
}

func isErrorResult(raw json.RawMessage) bool {
	if !mayNameIsError(raw) {
		return false
	}
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(raw, &r) == nil && r.IsError
}

// mayNameIsError reports whether raw could have a member that encoding/json decodes into a field
// named isError: its name matches case-insensitively (with Unicode folding, under which r and o
// have no other forms) or is written with escapes. Without "rror" in any case and without a
// backslash, no name can match, and the result is not an error result whatever else it holds.
func mayNameIsError(raw []byte) bool {
	if bytes.IndexByte(raw, '\\') >= 0 {
		return true
	}
	for i := 0; i+4 <= len(raw); i++ {
		if raw[i]|0x20 == 'r' && raw[i+1]|0x20 == 'r' && raw[i+2]|0x20 == 'o' && raw[i+3]|0x20 == 'r' {
			return true
		}
	}
	return false
}

// toolError is a tool result the model can read and act on. The decision, when there is one, is
// in _meta for programs.
func toolError(msg string, v *enforce.Verdict) map[string]any {
	res := map[string]any{"isError": true, "content": []map[string]string{{"type": "text", "text": msg}}}
	if v != nil {
		res["_meta"] = map[string]any{"dev.lush/decision": v.Meta()}
	}
	return res
}

func joinReasons(rs []authz.Reason) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += "; "
		}
		s += r.Message
	}
	return s
}

// stubCall describes a stubbed write for stub.Result.
func stubCall(e *exposed, args any, v *enforce.Verdict) stub.Call {
	c := stub.Call{Name: e.Name, Ref: e.Ref, Tool: e.Upstream, Arguments: args, DecisionID: v.ID, Decision: v.Meta()}
	if e.HasOut {
		var tool struct {
			OutputSchema map[string]any `json:"outputSchema"`
		}
		json.Unmarshal(e.Raw, &tool)
		c.OutputSchema = tool.OutputSchema
	}
	return c
}
