package agentd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// Invocation asks an agent something.
type Invocation struct {
	Agent   string
	Caller  identity.Caller // authenticated; a delegation caller brings its chain
	Message string
	History []model.Message // earlier turns of the conversation, if any
	// OnEvent, when set, receives the invocation's progress as it happens (streaming).
	OnEvent func(Event)
	// OnStart, when set, is called once the invocation is allowed, before it runs, with its id
	// (the agent/invoke decision's): a denied invocation never calls it.
	OnStart func(id string)
}

// Event is a step of an invocation, for streaming clients.
type Event struct {
	Type string    `json:"type"` // "text" (a piece of the answer), "tool_call", "tool_result"
	Text string    `json:"text,omitempty"`
	Tool *ToolCall `json:"tool,omitempty"`
}

// Result is how an invocation ended.
type Result struct {
	ID       string          `json:"invocation_id"` // the agent/invoke decision id
	Agent    string          `json:"agent"`
	Model    string          `json:"model"`
	Status   string          `json:"status"` // ok, error, timeout, cancelled, max_turns
	Response string          `json:"response"`
	Error    string          `json:"error,omitempty"`
	Turns    int             `json:"turns"`
	Usage    model.Usage     `json:"usage"`
	Tools    []ToolCall      `json:"tool_calls"`
	TraceID  string          `json:"trace_id,omitempty"`
	Revision string          `json:"revision"`
	Chain    []string        `json:"chain"`
	History  []model.Message `json:"history,omitempty"` // the whole conversation, for the next turn
}

// ToolCall is one tool call the model made and how it ended.
type ToolCall struct {
	Name       string         `json:"name"`               // the tool's name as the model saw it
	MCPName    string         `json:"mcp_name,omitempty"` // the gateway's name of the tool, when the model saw another (one its provider accepts)
	Tool       string         `json:"tool,omitempty"`     // the tool reference, from the gateway's decision
	Arguments  map[string]any `json:"arguments,omitempty"`
	Access     string         `json:"access,omitempty"`
	Outcome    string         `json:"outcome,omitempty"` // the gateway's decision: allow, stub, deny, ...
	DecisionID string         `json:"decision_id,omitempty"`
	Status     string         `json:"status"` // ok, error, denied, stubbed, unknown_tool
	LatencyMS  float64        `json:"latency_ms"`
	Error      string         `json:"error,omitempty"`
	// For a call of another agent (lush://): that invocation's id and its own tool calls.
	Invocation string     `json:"invocation_id,omitempty"`
	Calls      []ToolCall `json:"calls,omitempty"`
}

// DeniedError is an invocation the policy refused: nothing ran.
type DeniedError struct {
	DecisionID string
	Reasons    []authz.Reason
	Outcome    string
	// RetryAfter is set when the invocation was denied only by a rate limit: when a retry can
	// succeed (answered as 429 with Retry-After).
	RetryAfter time.Duration
}

func (e *DeniedError) Error() string { return enforce.Explain("invocation", e.Reasons, e.DecisionID) }

// NotFoundError names an agent the deployed build does not have.
type NotFoundError struct {
	Agent  string
	Agents []string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no agent %q in the deployed build; agents: %s", e.Agent, strings.Join(e.Agents, ", "))
}

// ErrNoBuild is returned before the first deploy.
var ErrNoBuild = errors.New("no build is deployed yet")

// Invoke runs an invocation to its end. It returns an error, and no result, when nothing ran:
// no build, an unknown agent, or a denial (*DeniedError). Otherwise the result says how the
// loop ended (Status), including a model failure, the turn limit, the timeout and cancellation.
func (s *Server) Invoke(ctx context.Context, inv Invocation) (*Result, error) {
	st := s.state.Load()
	if st == nil {
		return nil, ErrNoBuild
	}
	a, ok := st.manifest.Agent(inv.Agent)
	if !ok {
		e := &NotFoundError{Agent: inv.Agent}
		for _, x := range st.manifest.Agents {
			e.Agents = append(e.Agents, x.Name)
		}
		return nil, e
	}
	if strings.TrimSpace(inv.Message) == "" {
		return nil, errors.New("the message is empty: say what the agent should do")
	}
	chain := chainFor(inv.Caller, a.Name)
	start := time.Now()
	ctx, span := s.tracer.Start(ctx, "invoke_agent "+a.Name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("lush.agent", a.Name), attribute.String("lush.principal", inv.Caller.ID),
			attribute.String("lush.model", a.Model), attribute.Int("lush.depth", inv.Caller.Depth(chain)),
			attribute.StringSlice("lush.chain", chain)))
	defer span.End()

	v := s.enforcer.Decide(ctx, invokeInput(inv.Caller, a.Name))
	span.SetAttributes(attribute.String("lush.invocation_id", v.ID), attribute.String("lush.decision", v.Outcome),
		attribute.String("lush.revision", v.Revision))
	if v.Outcome != authz.OutcomeAllow {
		span.SetAttributes(attribute.String("lush.status", "denied"))
		span.SetStatus(codes.Error, "denied")
		if m := s.opts.Metrics; m != nil {
			m.Invocations.WithLabelValues(a.Name, "denied").Inc()
		}
		return nil, &DeniedError{DecisionID: v.ID, Reasons: v.Reasons, Outcome: v.Outcome, RetryAfter: v.RetryAfter}
	}

	if inv.OnStart != nil {
		inv.OnStart(v.ID)
	}
	res := &Result{ID: v.ID, Agent: a.Name, Model: a.Model, Revision: st.hash, Chain: chain, Tools: []ToolCall{}}
	if sc := span.SpanContext(); sc.IsValid() {
		res.TraceID = sc.TraceID().String()
	}
	loopCtx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	err := s.run(loopCtx, model.Request{Model: a.Model, Agent: a.Name, System: a.Prompt, Project: st.manifest.Project, Target: a.ModelTarget}, chain, inv, res)
	res.Status, res.Error = statusOf(ctx, loopCtx, err, s.cfg)
	latency := time.Since(start)

	span.SetAttributes(attribute.Int("lush.tokens.input", res.Usage.Input), attribute.Int("lush.tokens.output", res.Usage.Output),
		attribute.Int("lush.turns", res.Turns), attribute.String("lush.status", res.Status))
	if res.Status != decisionlog.StatusOK {
		span.SetStatus(codes.Error, res.Error)
	}
	v.CompleteInvocation(res.Status, latency, int64(res.Usage.Input), int64(res.Usage.Output), res.Error)
	s.record(a.Name, v.ID, res.Status)
	if m := s.opts.Metrics; m != nil {
		m.Invocations.WithLabelValues(a.Name, res.Status).Inc()
		m.InvocationLatency.WithLabelValues(a.Name).Observe(latency.Seconds())
		m.Tokens.WithLabelValues(a.Name, a.Model, "input").Add(float64(res.Usage.Input))
		m.Tokens.WithLabelValues(a.Name, a.Model, "output").Add(float64(res.Usage.Output))
	}
	s.log.Info("agent invocation", "agent", a.Name, "invocation_id", v.ID, "principal", inv.Caller.ID, "status", res.Status,
		"turns", res.Turns, "tool_calls", len(res.Tools), "tokens_input", res.Usage.Input, "tokens_output", res.Usage.Output,
		"duration", latency.Round(time.Millisecond))
	return res, nil
}

// invokeInput is the policy input of an invocation of agent by caller.
func invokeInput(caller identity.Caller, agent string) authz.Input {
	chain := chainFor(caller, agent)
	return authz.Input{Action: authz.ActionAgentInvoke, Agent: agent, Principal: enforce.PrincipalOf(caller), Chain: chain, Depth: caller.Depth(chain)}
}

// chainFor is the call chain of an invocation of agent: a delegation caller's chain (which ends
// with the agent: the gateway extended it, and identity checked it names this agent), or the
// agent alone.
func chainFor(c identity.Caller, agent string) []string {
	if c.Method == identity.MethodDelegation && len(c.Chain) > 0 && c.Chain[len(c.Chain)-1] == agent {
		return slices.Clone(c.Chain)
	}
	return []string{agent}
}

// errMaxTurns ends a loop whose model still calls tools after the last turn.
var errMaxTurns = errors.New("turn limit reached")

// run is the tool loop: ask the model, run the tools it calls through the gateway, send the
// results back, until it answers without calling a tool. base is the agent's request: its model,
// where the model runs, and the system instruction.
func (s *Server) run(ctx context.Context, base model.Request, chain []string, inv Invocation, res *Result) error {
	agent := base.Agent
	box, err := s.openToolbox(ctx, agent, inv.Caller, chain, model.ToolNamesOf(ctx, s.opts.Model, base))
	if err != nil {
		return err
	}
	defer box.Close()
	msgs := append(slices.Clone(inv.History), model.Message{Role: model.RoleUser, Parts: []model.Part{{Text: inv.Message}}})
	var onText func(string)
	if inv.OnEvent != nil {
		onText = func(t string) { inv.OnEvent(Event{Type: "text", Text: t}) }
	}
	defer func() { res.History = msgs }()
	for res.Turns < s.cfg.MaxTurns {
		res.Turns++
		req := base
		req.Messages, req.Tools = msgs, box.tools
		resp, err := s.generate(ctx, res.Turns, req, onText)
		if err != nil {
			return fmt.Errorf("model %s: %w", base.Model, err)
		}
		res.Usage = res.Usage.Add(resp.Usage)
		msgs = append(msgs, model.Message{Role: model.RoleModel, Parts: resp.Parts})
		calls := resp.Calls()
		if len(calls) == 0 {
			res.Response = strings.TrimSpace(resp.Text())
			return nil
		}
		results := make([]model.Part, 0, len(calls))
		for _, call := range calls {
			tc, out := box.call(ctx, call)
			if inv.OnEvent != nil {
				inv.OnEvent(Event{Type: "tool_result", Tool: &tc})
			}
			res.Tools = append(res.Tools, tc)
			results = append(results, model.Part{Result: out})
			if m := s.opts.Metrics; m != nil {
				m.AgentToolCalls.WithLabelValues(agent, tc.Status).Inc()
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		msgs = append(msgs, model.Message{Role: model.RoleUser, Parts: results})
	}
	return errMaxTurns
}

// generate asks the model for one turn inside a span of its own ("chat <model>", a child of the
// invocation's), which records the turn's number, its tokens and how many tools it called: the
// model turns of the invocation's trace.
func (s *Server) generate(ctx context.Context, turn int, req model.Request, onText func(string)) (*model.Response, error) {
	ctx, span := s.tracer.Start(ctx, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("lush.agent", req.Agent), attribute.String("lush.model", req.Model), attribute.Int("lush.turn", turn)))
	defer span.End()
	resp, err := s.opts.Model.Generate(ctx, req, onText)
	if err != nil {
		span.SetStatus(codes.Error, "the model failed")
		return nil, err
	}
	span.SetAttributes(attribute.Int("lush.tokens.input", resp.Usage.Input), attribute.Int("lush.tokens.output", resp.Usage.Output),
		attribute.Int("lush.tool_calls", len(resp.Calls())))
	return resp, nil
}

// statusOf classifies how the loop ended. A timeout is the invocation's own limit; a
// cancellation came from the caller.
func statusOf(parent, loop context.Context, err error, cfg Config) (status, msg string) {
	switch {
	case err == nil:
		return decisionlog.StatusOK, ""
	case errors.Is(err, errMaxTurns):
		return decisionlog.StatusMaxTurns, fmt.Sprintf("the agent was still calling tools after %d model turns, the limit; ask for less, or raise the turn limit", cfg.MaxTurns)
	case parent.Err() != nil:
		return decisionlog.StatusCancelled, "the caller cancelled the invocation"
	case errors.Is(loop.Err(), context.DeadlineExceeded):
		return decisionlog.StatusTimeout, fmt.Sprintf("the invocation did not finish within %s", cfg.Timeout)
	}
	return decisionlog.StatusError, err.Error()
}

// DecideTask decides an operation on a task an invocation of agent created (action
// authz.ActionTasksRead or authz.ActionTasksCancel), for caller, as the gateway decides those
// on an upstream's task: task names the task as recorded when it was created (Principal ""
// for an unknown task, which is decided too, and denied, so that probing is logged).
func (s *Server) DecideTask(ctx context.Context, caller identity.Caller, agent, action string, task authz.Task) *enforce.Verdict {
	in := invokeInput(caller, agent)
	in.Action = action
	in.Task = &task
	return s.enforcer.Decide(ctx, in)
}
