package a2a

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/taskstore"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// Agents is what the A2A server needs of agentd (*agentd.Server): the deployed build, the one
// runner of invocations (which decides agent/invoke and logs it), and the decisions on tasks.
type Agents interface {
	Builds
	Invoke(ctx context.Context, inv agentd.Invocation) (*agentd.Result, error)
	DecideTask(ctx context.Context, caller identity.Caller, agent, action string, task authz.Task) *enforce.Verdict
}

// Server serves the deployed build's agents over A2A.
type Server struct {
	agents Agents
	gate   *policyhttp.Gate
	card   CardOptions
	tasks  *taskstore.Store[record]
}

// New returns the A2A server of agents. gate authenticates every request (the gate of agentd's
// API: the same authentication as the agents' MCP endpoints); card says where the API is
// served and which issuers the gate trusts (its Revision is the deployed build's).
func New(agents Agents, gate *policyhttp.Gate, card CardOptions) (*Server, error) {
	if agents == nil || gate == nil {
		return nil, errors.New("a2a: agents and a gate are required")
	}
	if err := card.check(); err != nil {
		return nil, fmt.Errorf("a2a: %w", err)
	}
	return &Server{agents: agents, gate: gate, card: card, tasks: newTaskStore()}, nil
}

// Handler serves, for every agent of the deployed build, behind the gate (but the card, whose
// public part anyone may read):
//
//	GET  /agents/{agent}/.well-known/agent-card.json      the agent's Agent Card (also under
//	     /agents/{agent}/a2a/: clients resolve the well-known path against a URL differently)
//	POST /agents/{agent}/a2a                              A2A JSON-RPC: message/send,
//	     message/stream (SSE), tasks/get, tasks/cancel
func (s *Server) Handler() http.Handler {
	rpc := a2asrv.NewJSONRPCHandler((*handler)(s))
	mux := http.NewServeMux()
	card := s.cardHandler() // the public card to anonymous callers (http.go)
	mux.Handle("GET /agents/{agent}/.well-known/agent-card.json", card)
	mux.Handle("GET /agents/{agent}/a2a/.well-known/agent-card.json", card)
	mux.Handle("POST /agents/{agent}/a2a", s.gate.Authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		ctx := context.WithValue(r.Context(), agentKey{}, r.PathValue("agent"))
		rpc.ServeHTTP(w, r.WithContext(ctx))
	})))
	return mux
}

type agentKey struct{}

// handler answers the A2A methods; the request's context carries the agent and the caller.
type handler Server

var _ a2asrv.RequestHandler = (*handler)(nil)

func agentOf(ctx context.Context) string { s, _ := ctx.Value(agentKey{}).(string); return s }

// textOf is the text of an incoming message: its text parts, one after another.
func textOf(p *a2a.MessageSendParams) (string, error) {
	if p == nil || p.Message == nil {
		return "", fmt.Errorf("%w: message: required", a2a.ErrInvalidParams)
	}
	m := p.Message
	if m.Role != a2a.MessageRoleUser {
		return "", fmt.Errorf("%w: message.role: %q is not \"user\"", a2a.ErrInvalidParams, m.Role)
	}
	if m.TaskID != "" {
		return "", fmt.Errorf("%w: message.taskId: continuing a task is not supported: send a new message", a2a.ErrUnsupportedOperation)
	}
	if p.Config != nil && p.Config.PushConfig != nil {
		return "", fmt.Errorf("%w: configuration.pushNotificationConfig", a2a.ErrPushNotificationNotSupported)
	}
	var b strings.Builder
	for i, part := range m.Parts {
		t, ok := part.(a2a.TextPart)
		if !ok {
			return "", fmt.Errorf("%w: message.parts[%d]: only text parts are supported", a2a.ErrUnsupportedContentType, i)
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(t.Text)
		if b.Len() > maxText {
			return "", fmt.Errorf("%w: message.parts: more than %d bytes of text", a2a.ErrInvalidParams, maxText)
		}
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", fmt.Errorf("%w: message.parts: no text: say what the agent should do", a2a.ErrInvalidParams)
	}
	return b.String(), nil
}

// DelegationMetadata is the key of the message metadata in which a Lush gateway tells the
// remote A2A agent it calls for whom and through which agents it acts:
// {"principal": "user:alice", "chain": ["orchestrator"], "depth": 1}.
const DelegationMetadata = "dev.lush/delegation"

// callerOf is the caller of an A2A message: the authenticated caller, with the agent calls it
// says came before it (the depth in its dev.lush/delegation metadata, else the length of the
// chain there) counted as hops, so that a chain of agents through other Lush deployments stays
// bounded by max_depth. The metadata can only add depth, never remove it; its principal and
// chain are not trusted for anything (the gate authenticated the caller). Metadata that is not
// what a Lush gateway sends is refused, naming the field.
func callerOf(ctx context.Context, m *a2a.Message) (identity.Caller, error) {
	caller := identity.CallerFrom(ctx)
	raw, ok := m.Metadata[DelegationMetadata]
	if !ok {
		return caller, nil
	}
	field := "message.metadata." + DelegationMetadata
	d, ok := raw.(map[string]any)
	if !ok {
		return caller, fmt.Errorf("%w: %s: not an object (Lush sends {principal, chain, depth})", a2a.ErrInvalidParams, field)
	}
	hops := 0
	if c, ok := d["chain"]; ok {
		chain, ok := c.([]any)
		if !ok {
			return caller, fmt.Errorf("%w: %s.chain: not an array of agent names", a2a.ErrInvalidParams, field)
		}
		hops = len(chain)
	}
	if v, ok := d["depth"]; ok {
		f, ok := v.(float64)
		if !ok || f < 0 || f != math.Trunc(f) {
			return caller, fmt.Errorf("%w: %s.depth: not a whole number of agent calls", a2a.ErrInvalidParams, field)
		}
		hops = max(hops, int(min(f, maxHops+1)))
	}
	if hops > maxHops {
		return caller, fmt.Errorf("%w: %s: more than %d agent calls deep", a2a.ErrInvalidParams, field, maxHops)
	}
	caller.Hops = max(caller.Hops, hops)
	return caller, nil
}

// maxHops bounds the depth an A2A message may bring (identity's bound on delegation chains).
const maxHops = 64

// invokeError is the A2A error of an invocation that did not run.
func invokeError(err error) error {
	var denied *agentd.DeniedError
	var notFound *agentd.NotFoundError
	switch {
	case errors.As(err, &denied):
		return fmt.Errorf("%w: %s", a2a.ErrInvalidRequest, err)
	case errors.As(err, &notFound), errors.Is(err, agentd.ErrNoBuild):
		return fmt.Errorf("%w: %s", a2a.ErrInvalidRequest, err)
	default:
		return fmt.Errorf("%w: %s", a2a.ErrInternalError, err)
	}
}

// newTask is the task of an incoming message, working.
func newTask(p *a2a.MessageSendParams) *a2a.Task {
	task := a2a.NewSubmittedTask(p.Message, p.Message)
	task.History[0].TaskID, task.History[0].ContextID = task.ID, task.ContextID
	task.Status = a2a.TaskStatus{State: a2a.TaskStateWorking, Timestamp: now()}
	return task
}

// record records the caller's task at the agent once its invocation is allowed (decision id),
// with the cancel of the context the invocation runs in (for tasks/cancel).
func (h *handler) record(ctx context.Context, task *a2a.Task, decisionID string, cancel context.CancelCauseFunc) {
	h.tasks.Add(taskstore.Key{Agent: agentOf(ctx), ID: string(task.ID)}, taskTTL,
		record{principal: identity.CallerFrom(ctx).ID, agent: agentOf(ctx), decisionID: decisionID, task: cloneTask(task), cancel: cancel})
}

// finish records how the task's invocation ended and returns the task as answered.
func (h *handler) finish(ctx context.Context, task *a2a.Task, res *agentd.Result) *a2a.Task {
	task.Status = a2a.TaskStatus{State: stateOf(res.Status), Timestamp: now()}
	if res.Status != "ok" && res.Error != "" {
		task.Status.Message = a2a.NewMessageForTask(a2a.MessageRoleAgent, task, a2a.TextPart{Text: res.Error})
	}
	if res.Response != "" {
		task.Artifacts = []*a2a.Artifact{{ID: "response", Name: "response", Parts: a2a.ContentParts{a2a.TextPart{Text: res.Response}}}}
	}
	task.Metadata = map[string]any{"invocation_id": res.ID, "revision": res.Revision}
	if res.TraceID != "" {
		task.Metadata["trace_id"] = res.TraceID
	}
	h.tasks.Update(taskstore.Key{Agent: agentOf(ctx), ID: string(task.ID)}, func(r *record) {
		r.task, r.cancel = cloneTask(task), nil
	})
	return task
}

func now() *time.Time { t := time.Now().UTC(); return &t }

// stateOf is the A2A state of an invocation's status (agentd.Result.Status).
func stateOf(status string) a2a.TaskState {
	switch status {
	case "ok":
		return a2a.TaskStateCompleted
	case "cancelled":
		return a2a.TaskStateCanceled
	default: // error, timeout, max_turns
		return a2a.TaskStateFailed
	}
}

// OnSendMessage runs the message as an invocation of the agent, through agentd's runner, to
// its end, and answers the task. The task is recorded once the invocation is allowed.
func (h *handler) OnSendMessage(ctx context.Context, p *a2a.MessageSendParams) (a2a.SendMessageResult, error) {
	text, err := textOf(p)
	if err != nil {
		return nil, err
	}
	caller, err := callerOf(ctx, p.Message)
	if err != nil {
		return nil, err
	}
	task := newTask(p)
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	res, err := h.agents.Invoke(runCtx, agentd.Invocation{Agent: agentOf(ctx), Caller: caller, Message: text,
		OnStart: func(id string) { h.record(ctx, task, id, cancel) }})
	if err != nil {
		return nil, invokeError(err)
	}
	return h.finish(ctx, task, res), nil
}

// OnSendMessageStream runs the message as OnSendMessage does, answering as it goes: the task
// once the invocation is allowed, an artifact update per piece of the answer, then the final
// status. A denied invocation is answered with the error alone.
func (h *handler) OnSendMessageStream(ctx context.Context, p *a2a.MessageSendParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		text, err := textOf(p)
		if err != nil {
			yield(nil, err)
			return
		}
		caller, err := callerOf(ctx, p.Message)
		if err != nil {
			yield(nil, err)
			return
		}
		task := newTask(p)
		runCtx, cancel := context.WithCancelCause(ctx)
		type step struct {
			started bool
			text    string
			res     *agentd.Result
			err     error
		}
		steps := make(chan step)
		stop, done := make(chan struct{}), make(chan struct{})
		go func() { // owned: the iterator stops it (stop, runCtx) and waits for it (done) before it returns
			defer close(done)
			send := func(s step) {
				select {
				case steps <- s:
				case <-stop:
				}
			}
			res, err := h.agents.Invoke(runCtx, agentd.Invocation{Agent: agentOf(ctx), Caller: caller, Message: text,
				OnStart: func(id string) {
					h.record(ctx, task, id, cancel)
					send(step{started: true})
				},
				OnEvent: func(e agentd.Event) {
					if e.Type == "text" && e.Text != "" {
						send(step{text: e.Text})
					}
				}})
			send(step{res: res, err: err})
		}()
		defer func() { close(stop); cancel(errors.New("the A2A stream ended")); <-done }()
		for {
			var s step
			select {
			case s = <-steps:
			case <-done:
				return
			}
			switch {
			case s.err != nil:
				yield(nil, invokeError(s.err))
				return
			case s.started:
				if !yield(cloneTask(task), nil) {
					return
				}
			case s.res != nil:
				final := h.finish(ctx, task, s.res)
				ev := a2a.NewStatusUpdateEvent(final, final.Status.State, final.Status.Message)
				ev.Final = true
				ev.Metadata = final.Metadata
				yield(ev, nil)
				return
			default:
				ev := a2a.NewArtifactUpdateEvent(task, "response", a2a.TextPart{Text: s.text})
				ev.Append = true
				if !yield(ev, nil) {
					return
				}
			}
		}
	}
}

// decideTask decides a read or cancel of a task by the caller, and returns the task's record;
// a denial is answered as an unknown task (another principal's task is not revealed).
func (h *handler) decideTask(ctx context.Context, action string, id a2a.TaskID) (record, error) {
	agent, caller := agentOf(ctx), identity.CallerFrom(ctx)
	if id == "" {
		return record{}, fmt.Errorf("%w: id: required", a2a.ErrInvalidParams)
	}
	rec, known := h.tasks.Get(taskstore.Key{Agent: agent, ID: string(id)})
	if known {
		rec.task = cloneTask(rec.task) // the stored task is shared; the answer is changed below
	}
	v := h.agents.DecideTask(ctx, caller, agent, action,
		authz.Task{ID: bounded(string(id), maxTaskID), Principal: rec.principal, Agent: agent, DecisionID: rec.decisionID})
	if !v.Allow || !known {
		return record{}, fmt.Errorf("%w: %s (or not yours); decision %s", a2a.ErrTaskNotFound, bounded(string(id), maxTaskID), v.ID)
	}
	return rec, nil
}

// OnGetTask answers the caller's own task, decided as tasks/read.
func (h *handler) OnGetTask(ctx context.Context, q *a2a.TaskQueryParams) (*a2a.Task, error) {
	rec, err := h.decideTask(ctx, authz.ActionTasksRead, q.ID)
	if err != nil {
		return nil, err
	}
	if q.HistoryLength != nil && *q.HistoryLength >= 0 && *q.HistoryLength < len(rec.task.History) {
		rec.task.History = rec.task.History[len(rec.task.History)-*q.HistoryLength:]
	}
	return rec.task, nil
}

// OnCancelTask cancels the caller's own running task, decided as tasks/cancel.
func (h *handler) OnCancelTask(ctx context.Context, p *a2a.TaskIDParams) (*a2a.Task, error) {
	rec, err := h.decideTask(ctx, authz.ActionTasksCancel, p.ID)
	if err != nil {
		return nil, err
	}
	if rec.cancel == nil || rec.task.Status.State.Terminal() {
		return nil, fmt.Errorf("%w: task %s is %s", a2a.ErrTaskNotCancelable, p.ID, rec.task.Status.State)
	}
	rec.cancel(errors.New("cancelled by tasks/cancel"))
	rec.task.Status = a2a.TaskStatus{State: a2a.TaskStateCanceled, Timestamp: now()}
	return rec.task, nil
}

// OnResubscribeToTask is not supported: a stream is answered by the request that started it.
func (h *handler) OnResubscribeToTask(context.Context, *a2a.TaskIDParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(nil, fmt.Errorf("%w: tasks/resubscribe", a2a.ErrUnsupportedOperation))
	}
}

func (h *handler) OnGetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigParams) (*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) OnListTaskPushConfig(context.Context, *a2a.ListTaskPushConfigParams) ([]*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) OnSetTaskPushConfig(context.Context, *a2a.TaskPushConfig) (*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) OnDeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigParams) error {
	return a2a.ErrPushNotificationNotSupported
}
