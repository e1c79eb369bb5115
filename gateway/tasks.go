package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/internal/taskstore"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/vault"
)

// Tasks (the MCP tasks extension, docs/gateway.md#tasks). A tools/call is decided as the call it
// is; when the upstream answers it with a task, the gateway records who created the task, where
// and under which decision. Every later operation on the task is decided again, as tasks/read or
// tasks/cancel by the caller of that task, logged, and forwarded to the upstream that owns it.
// A caller the policy does not let at a task gets the answer of a task that does not exist.
//
// Two generations of the wire are passed through: the extension io.modelcontextprotocol/tasks
// of 2026-07-28 (tasks/get with the result inlined, tasks/update, tasks/cancel; results with
// resultType "task" and ttlMs) and the experimental tasks of 2025-11-25 (a tools/call with a
// "task" param answered {"task": {...}}; tasks/get, tasks/result, tasks/list, tasks/cancel).

// TasksExtension is the name of the tasks extension in capabilities.extensions.
const TasksExtension = "io.modelcontextprotocol/tasks"

// CodeMissingClientCapability is the JSON-RPC error of a request the client did not declare the
// capability for (SEP-2575).
const CodeMissingClientCapability = -32021

// protocolTasksExtension is the first protocol version whose tasks are the extension.
const protocolTasksExtension = "2026-07-28"

// Bounds of the task records a replica keeps.
const (
	maxTasks   = 100_000        // records; beyond it the one that expires first is forgotten
	maxTaskTTL = 24 * time.Hour // a task the upstream keeps longer (or forever) is forgotten after this
	maxTaskID  = 256            // bytes of a task id the gateway records or decides
)

// taskRecord is what the gateway knows of a task an upstream created for an allowed call.
type taskRecord struct {
	ref        string // the upstream's tool reference
	tool       string // the upstream's name of the tool called
	principal  string // the caller whose call created it
	agent      string
	decisionID string // the decision that allowed the call
	session    string // the creator's session on this replica ("" without one): where status notifications go
}

// newTaskStore is the store of the tasks created through this replica, by agent and task id,
// until they expire (the task's own TTL, at most maxTaskTTL). Beyond maxTasks records a new task
// makes it forget the one that expires first (its creator then gets the answer of an unknown
// task: nothing is revealed or forwarded that was not recorded).
func newTaskStore() *taskstore.Store[taskRecord] {
	return taskstore.New[taskRecord](maxTasks, maxTaskTTL)
}

// createdTask reads a tools/call result for a task the upstream created: the task's id and its
// time to live (0 when the upstream gave none). Both wires: {"resultType": "task", "taskId": …,
// "ttlMs": …} and {"task": {"taskId": …, "ttl": …}}.
func createdTask(result json.RawMessage) (string, time.Duration, bool) {
	if !bytes.Contains(result, []byte(`"task`)) { // the usual result: no task
		return "", 0, false
	}
	var r struct {
		ResultType string `json:"resultType"`
		TaskID     string `json:"taskId"`
		TTLMs      *int64 `json:"ttlMs"`
		Task       *struct {
			TaskID string `json:"taskId"`
			TTL    *int64 `json:"ttl"`
		} `json:"task"`
	}
	if json.Unmarshal(result, &r) != nil {
		return "", 0, false
	}
	id, ttl := r.TaskID, r.TTLMs
	if r.ResultType != "task" {
		if r.Task == nil {
			return "", 0, false
		}
		id, ttl = r.Task.TaskID, r.Task.TTL
	}
	if id == "" || len(id) > maxTaskID {
		return "", 0, false
	}
	var d time.Duration
	if ttl != nil && *ttl > 0 && *ttl < int64(maxTaskTTL/time.Millisecond) {
		d = time.Duration(*ttl) * time.Millisecond
	}
	return id, d, true
}

// recordTask records the task an allowed tools/call to an upstream created, before the result
// reaches the client (which may ask for the task at once).
func (c *call) recordTask(e *exposed, decisionID string, result json.RawMessage) {
	if e.serverRef() == "" {
		return
	}
	id, ttl, ok := createdTask(result)
	if !ok {
		return
	}
	r := taskRecord{ref: e.Ref, tool: e.Upstream, principal: c.caller.ID, agent: c.agent, decisionID: decisionID}
	if c.req.Session != nil {
		r.session = c.req.Session.ID
	}
	c.g.tasks.Add(taskstore.Key{Agent: c.agent, ID: id}, ttl, r)
}

// task answers tasks/get, tasks/result, tasks/update, tasks/cancel and tasks/list.
func (c *call) task(ctx context.Context) (any, error) {
	method := c.req.Method
	if c.req.Protocol >= protocolTasksExtension {
		if method == "tasks/result" || method == "tasks/list" { // not part of the extension
			return nil, mcphttp.Errorf(mcphttp.CodeMethodNotFound, "method %q is not supported: tasks/get returns a task's result", method)
		}
		if !declaresTasks(c.req) {
			return nil, &mcphttp.Error{Code: CodeMissingClientCapability,
				Message: method + " needs the " + TasksExtension + " extension: declare it in the client's capabilities",
				Data:    map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}}
		}
	} else if method == "tasks/update" {
		return nil, mcphttp.Errorf(mcphttp.CodeMethodNotFound, "method %q is not supported before protocol %s", method, protocolTasksExtension)
	}
	if method == "tasks/list" {
		return c.listTasks(ctx)
	}
	id := stringParam(params(c.req), "taskId")
	if id == "" {
		return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, `%s needs params {"taskId": "<task id>"}`, method)
	}
	action := authz.ActionTasksRead
	if method == "tasks/cancel" || method == "tasks/update" {
		action = authz.ActionTasksCancel
	}
	rec, known := c.g.tasks.Get(taskstore.Key{Agent: c.agent, ID: id})
	in := c.input(action, &authz.Tool{Ref: rec.ref, Name: rec.tool})
	// An unknown task is decided too (and denied: it has no creator), so that probing is logged.
	in.Task = &authz.Task{ID: bounded(id, maxTaskID), Principal: rec.principal, Agent: c.agent, DecisionID: rec.decisionID}
	var cred *vault.Credential
	v := c.g.enforcer.Decide(ctx, in, c.taskCredential(known, rec.ref, &cred)...)
	if !v.Allow {
		if !known || rec.principal != c.caller.ID {
			return nil, unknownTask(id)
		}
		return nil, mcphttp.Errorf(mcphttp.CodeInvalidRequest, "%s", v.Explain())
	}
	srv, err := c.server(ctx, rec.ref, cred)
	if err != nil {
		v.Complete(decisionlog.StatusUnavailable, 0, nil, err.Error())
		return nil, mcphttp.Errorf(mcphttp.CodeInternalError, "the task's server is not available: %v", err)
	}
	start := time.Now()
	res, err := srv.Request(c.withTasks(ctx), method, c.req.Params, "", nil)
	status, rpcErr := outcome(err)
	errText := ""
	if err != nil {
		errText = err.Error()
		if cred != nil {
			errText = cred.Scrub(errText)
		}
	}
	v.Complete(status, time.Since(start), res, errText)
	switch {
	case rpcErr != nil:
		if cred != nil {
			rpcErr.Message = cred.Scrub(rpcErr.Message)
		}
		return nil, rpcErr
	case err != nil:
		return nil, mcphttp.Errorf(mcphttp.CodeInternalError, "%s", upstreamProblem(rec.ref, scrubbed{err, errText}, v.ID))
	}
	return res, nil
}

// taskCredential is the decision option that fetches the credential the task's server needs,
// for a known task.
func (c *call) taskCredential(known bool, ref string, cred **vault.Credential) []enforce.Option {
	if !known {
		return nil
	}
	return []enforce.Option{c.needCredential(ref, cred)}
}

// unknownTask is the answer to an operation on a task that does not exist, has expired, or that
// the caller may not see: the same, so that it does not confirm the task exists.
func unknownTask(id string) error {
	return &mcphttp.Error{Code: mcphttp.CodeInvalidParams, Message: "unknown task (or not yours): " + bounded(id, maxTaskID),
		Data: map[string]string{"taskId": bounded(id, maxTaskID)}}
}

// listTasks answers tasks/list (2025-11-25) with the caller's own tasks at this agent: each
// upstream that holds some is asked (a decision each, as a read of the caller's tasks there)
// and its list filtered to them.
func (c *call) listTasks(ctx context.Context) (any, error) {
	mine := map[string]taskRecord{}
	byRef := map[string]taskRecord{}
	for k, r := range c.g.tasks.Find(func(k taskstore.Key, r taskRecord) bool { return k.Agent == c.agent && r.principal == c.caller.ID }) {
		mine[k.ID], byRef[r.ref] = r, r
	}
	tasks := []json.RawMessage{}
	for ref, r := range byRef {
		in := c.input(authz.ActionTasksRead, &authz.Tool{Ref: ref})
		in.Task = &authz.Task{ID: "", Principal: r.principal, Agent: c.agent, DecisionID: ""}
		var cred *vault.Credential
		v := c.g.enforcer.Decide(ctx, in, c.needCredential(ref, &cred))
		if !v.Allow {
			continue
		}
		srv, err := c.server(ctx, ref, cred)
		if err != nil {
			v.Complete(decisionlog.StatusUnavailable, 0, nil, err.Error())
			continue
		}
		list, err := srv.ListAll(ctx, "tasks/list", "tasks")
		status, _ := outcome(err)
		v.Complete(status, 0, nil, "")
		for _, t := range list {
			if r, ok := mine[objectName(t, "taskId")]; ok && r.ref == ref {
				tasks = append(tasks, t)
			}
		}
	}
	return map[string]any{"tasks": tasks}, nil
}

// withTasks is the context of a request forwarded upstream for this client: one that declares
// the tasks extension to a 2026-07-28 server when the client declared it, so that the server
// creates tasks only for clients that can follow them.
func (c *call) withTasks(ctx context.Context) context.Context {
	if c.req.Protocol < protocolTasksExtension || !declaresTasks(c.req) {
		return ctx
	}
	return upstream.WithClientExtensions(ctx, map[string]any{TasksExtension: map[string]any{}})
}

// declaresTasks reports whether the request's client declared the tasks extension: in its
// capabilities (the session's, or a 2026-07-28 request's), or for this request alone in its
// _meta.
func declaresTasks(req *mcphttp.Request) bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(req.Capabilities(), &caps) == nil {
		if ext, ok := caps.Extensions[TasksExtension]; ok && string(ext) != "null" {
			return true
		}
	}
	var p struct {
		Meta struct {
			Caps struct {
				Extensions map[string]json.RawMessage `json:"extensions"`
			} `json:"io.modelcontextprotocol/clientCapabilities"`
		} `json:"_meta"`
	}
	if json.Unmarshal(req.Params, &p) != nil {
		return false
	}
	ext, ok := p.Meta.Caps.Extensions[TasksExtension]
	return ok && string(ext) != "null"
}

// taskStatus relays an upstream's task status notification to the session that created the
// task, on this replica; nobody else gets it.
func (g *Gateway) taskStatus(ref string, params json.RawMessage) {
	var p struct {
		TaskID string `json:"taskId"`
		Task   struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	id := p.TaskID
	if id == "" {
		id = p.Task.TaskID
	}
	for _, r := range g.tasks.Find(func(k taskstore.Key, r taskRecord) bool { return k.ID == id && r.ref == ref }) {
		if r.session != "" {
			g.transport.Notify(r.session, "notifications/tasks/status", json.RawMessage(params))
		}
	}
}

// addTasksCapability declares tasks in the capabilities the gateway answers a client of an agent
// with, when some upstream server of the agent declares them: the extension (2026-07-28) or the
// experimental tasks capability (2025-11-25).
func (g *Gateway) addTasksCapability(caps map[string]any, req *mcphttp.Request) {
	if key, tasks := g.tasksCapability(req.Endpoint, req.Protocol); tasks != nil {
		caps[key] = tasks
	}
}

// tasksCapability is the capability addTasksCapability adds, under its key; nil for none.
func (g *Gateway) tasksCapability(agent, protocol string) (key string, value any) {
	s := g.state.Load()
	if s == nil {
		return "", nil
	}
	a, ok := s.manifest.Agent(agent)
	if !ok {
		return "", nil
	}
	for _, at := range a.Tools {
		lists, up := g.pool.Lists(at.Ref)
		if !up {
			continue
		}
		caps := lists.Capabilities
		if protocol >= protocolTasksExtension {
			if _, ok := caps.Extensions[TasksExtension]; ok {
				return "extensions", map[string]any{TasksExtension: map[string]any{}}
			}
			continue
		}
		if caps.Tasks != nil {
			return "tasks", map[string]any{"list": map[string]any{}, "cancel": map[string]any{},
				"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
		}
	}
	return "", nil
}
