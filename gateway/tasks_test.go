package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// taskServer is an MCP server (streamable HTTP, JSON answers) with the experimental tasks of
// 2025-11-25: its tool "env" answers a tools/call with a task; tasks/get, tasks/result,
// tasks/cancel and tasks/list answer for any task it created, whoever asks. It records the task
// operations it receives.
type taskServer struct {
	mu    sync.Mutex
	tasks []string
	ops   []string // "<method> <taskId>"
	// notify makes tasks/get answer on an SSE stream that first carries the task's status
	// notification (notifications/tasks/status).
	notify bool
}

func (s *taskServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			TaskID string `json:"taskId"`
		} `json:"params"`
	}
	if json.NewDecoder(r.Body).Decode(&m) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if m.ID == nil { // a notification
		w.WriteHeader(http.StatusAccepted)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	task := func(id, status string) map[string]any {
		return map[string]any{"taskId": id, "status": status, "createdAt": "2026-07-28T00:00:00Z",
			"lastUpdatedAt": "2026-07-28T00:00:00Z", "ttl": 60000}
	}
	var result any
	var rpcErr map[string]any
	switch m.Method {
	case "initialize":
		result = map[string]any{"protocolVersion": "2025-11-25", "serverInfo": map[string]any{"name": "tasks", "version": "1"},
			"capabilities": map[string]any{"tools": map[string]any{}, "tasks": map[string]any{"list": map[string]any{},
				"cancel": map[string]any{}, "requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}}}
	case "ping":
		result = map[string]any{}
	case "tools/list":
		result = map[string]any{"tools": []any{map[string]any{"name": "env", "description": "Runs as a task.",
			"inputSchema": map[string]any{"type": "object"}, "execution": map[string]any{"taskSupport": "optional"}}}}
	case "tools/call":
		id := fmt.Sprintf("task-%d", len(s.tasks)+1)
		s.tasks = append(s.tasks, id)
		result = map[string]any{"task": task(id, "working")}
	case "tasks/get", "tasks/result", "tasks/cancel":
		s.ops = append(s.ops, m.Method+" "+m.Params.TaskID)
		switch {
		case !slices.Contains(s.tasks, m.Params.TaskID):
			rpcErr = map[string]any{"code": -32602, "message": "no such task"}
		case m.Method == "tasks/result":
			result = map[string]any{"content": []any{map[string]any{"type": "text", "text": "slept"}}}
		case m.Method == "tasks/cancel":
			result = task(m.Params.TaskID, "cancelled")
		default:
			result = task(m.Params.TaskID, "completed")
		}
	case "tasks/list":
		s.ops = append(s.ops, m.Method)
		var all []any
		for _, id := range s.tasks {
			all = append(all, task(id, "working"))
		}
		result = map[string]any{"tasks": all}
	default:
		rpcErr = map[string]any{"code": -32601, "message": "method not found"}
	}
	body := map[string]any{"jsonrpc": "2.0", "id": m.ID}
	if rpcErr != nil {
		body["error"] = rpcErr
	} else {
		body["result"] = result
	}
	if s.notify && m.Method == "tasks/get" && rpcErr == nil {
		w.Header().Set("Content-Type", "text/event-stream")
		status, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": task(m.Params.TaskID, "completed")})
		answer, _ := json.Marshal(body)
		fmt.Fprintf(w, "event: message\ndata: %s\n\nevent: message\ndata: %s\n\n", status, answer)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(body)
}

func (s *taskServer) operations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ops)
}

// startTasks serves a gateway whose agent "assistant" uses a taskServer, with lushExtra added to
// lush.yaml.
func startTasks(t *testing.T, lushExtra string) (*harness, *taskServer) {
	t.Helper()
	up := &taskServer{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	h := &harness{t: t, url: srv.URL}
	h.dir = project(t, srv.URL, lushExtra)
	h.serve(gateway.Config{})
	return h, up
}

// rpc sends a raw JSON-RPC request through c and returns its result or error.
func rpc(t *testing.T, c *client.Client, method string, params any) (json.RawMessage, *mcp.JSONRPCErrorDetails) {
	t.Helper()
	resp, err := c.GetTransport().SendRequest(context.Background(), transport.JSONRPCRequest{JSONRPC: "2.0",
		ID: mcp.NewRequestId(method), Method: method, Params: params})
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return resp.Result, resp.Error
}

// createTask calls the task tool as the client and returns the id of the task it created.
func createTask(t *testing.T, c *client.Client) string {
	t.Helper()
	res, rpcErr := rpc(t, c, "tools/call", map[string]any{"name": "env", "arguments": map[string]any{}, "task": map[string]any{"ttl": 60000}})
	if rpcErr != nil {
		t.Fatalf("tools/call: %v", rpcErr.Message)
	}
	var r struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if json.Unmarshal(res, &r) != nil || r.Task.TaskID == "" {
		t.Fatalf("tools/call did not create a task: %s", res)
	}
	return r.Task.TaskID
}

// Each later operation on a task is decided as a read (or cancel) of the task by the principal
// who created it, logged, and forwarded to the upstream; another principal gets exactly the
// answer of an unknown task, and the upstream never sees their request.
func TestTaskOperationsBelongToTheirCreator(t *testing.T) {
	h, up := startTasks(t, "")
	alice, bot := h.client("assistant", aliceKey), h.client("assistant", botKey)
	id := createTask(t, alice)

	_, unknown := rpc(t, alice, "tasks/get", map[string]any{"taskId": "task-404"})
	if unknown == nil || unknown.Code != mcp.INVALID_PARAMS {
		t.Fatalf("tasks/get of an unknown task: %+v, want invalid params", unknown)
	}
	for _, tc := range []struct {
		name    string
		c       *client.Client
		method  string
		forward bool   // reaches the upstream
		rule    string // the rule of the logged decision
	}{
		{"creator gets", alice, "tasks/get", true, "lush.task.owner"},
		{"creator gets the result", alice, "tasks/result", true, "lush.task.owner"},
		{"another principal gets", bot, "tasks/get", false, "lush.task.not_owner"},
		{"another principal gets the result", bot, "tasks/result", false, "lush.task.not_owner"},
		{"another principal cancels", bot, "tasks/cancel", false, "lush.task.not_owner"},
		{"creator cancels", alice, "tasks/cancel", true, "lush.task.owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.operations())
			res, rpcErr := rpc(t, tc.c, tc.method, map[string]any{"taskId": id})
			ops := up.operations()[before:]
			if tc.forward {
				if rpcErr != nil || !slices.Equal(ops, []string{tc.method + " " + id}) {
					t.Fatalf("%s: %s %+v; upstream saw %q", tc.method, res, rpcErr, ops)
				}
			} else {
				if len(ops) != 0 {
					t.Fatalf("the upstream saw %q", ops)
				}
				// The same answer as for a task that does not exist, bar the id.
				want := fmt.Sprint(unknown.Code, " ", unknown.Message)
				if got := fmt.Sprint(rpcErr.Code, " ", rpcErr.Message); rpcErr == nil || got != want[:len(want)-len("task-404")]+id {
					t.Fatalf("%s by another principal: %q, want the answer of an unknown task %q", tc.method, got, want)
				}
			}
			action := "tasks/read"
			if tc.method == "tasks/cancel" {
				action = "tasks/cancel"
			}
			recs := h.events(decisionlog.Filter{Action: action})
			last := recs[len(recs)-1].Event
			if !slices.Contains(last.Rules, tc.rule) || last.Tool != "mcp://tests.internal/mcp" {
				t.Fatalf("decision %s %s rules %v tool %q, want %s on %s", last.Action, last.Outcome, last.Rules, last.Tool, tc.rule, "mcp://tests.internal/mcp")
			}
		})
	}
}

// tasks/list returns only the caller's own tasks.
func TestTaskListIsTheCallersOwn(t *testing.T) {
	h, _ := startTasks(t, "")
	alice, bot := h.client("assistant", aliceKey), h.client("assistant", botKey)
	mine := []string{createTask(t, alice), createTask(t, alice)}
	theirs := []string{createTask(t, bot)}
	for _, tc := range []struct {
		name string
		c    *client.Client
		want []string
	}{{"alice", alice, mine}, {"bot", bot, theirs}, {"a principal with no tasks", h.client("assistant", bobKey), nil}} {
		t.Run(tc.name, func(t *testing.T) {
			res, rpcErr := rpc(t, tc.c, "tasks/list", map[string]any{})
			if rpcErr != nil {
				t.Fatal(rpcErr.Message)
			}
			var r struct {
				Tasks []struct {
					TaskID string `json:"taskId"`
				} `json:"tasks"`
			}
			json.Unmarshal(res, &r)
			var got []string
			for _, x := range r.Tasks {
				got = append(got, x.TaskID)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("tasks/list: %q, want %q", got, tc.want)
			}
		})
	}
}

// A holder of the tasks role may read and cancel the tasks of others.
func TestTasksRoleReadsOthersTasks(t *testing.T) {
	h, up := startTasks(t, "roles:\n  tasks: [user:bob]\n")
	id := createTask(t, h.client("assistant", aliceKey))
	if _, rpcErr := rpc(t, h.client("assistant", bobKey), "tasks/get", map[string]any{"taskId": id}); rpcErr != nil {
		t.Fatalf("tasks/get by a holder of the tasks role: %v", rpcErr.Message)
	}
	if ops := up.operations(); !slices.Equal(ops, []string{"tasks/get " + id}) {
		t.Fatalf("upstream saw %q", ops)
	}
}

// The gateway declares tasks to its clients when an upstream of the agent does, and answers
// the methods the protocol version does not have with method not found.
func TestTasksCapabilityAndMethods(t *testing.T) {
	h, _ := startTasks(t, "")
	c := h.client("assistant", aliceKey)
	if caps := c.GetServerCapabilities(); caps.Tasks == nil || caps.Tasks.List == nil || caps.Tasks.Cancel == nil {
		t.Fatalf("capabilities %+v: no tasks", caps)
	}
	for _, tc := range []struct {
		method string
		params any
		code   int
	}{
		{"tasks/update", map[string]any{"taskId": "t", "inputResponses": map[string]any{}}, mcp.METHOD_NOT_FOUND},
		{"tasks/get", map[string]any{}, mcp.INVALID_PARAMS},
		{"tasks/get", map[string]any{"taskId": 7}, mcp.INVALID_PARAMS},
	} {
		if _, rpcErr := rpc(t, c, tc.method, tc.params); rpcErr == nil || rpcErr.Code != tc.code {
			t.Errorf("%s %v: %+v, want code %d", tc.method, tc.params, rpcErr, tc.code)
		}
	}
}

// A task's status notifications reach the session that created the task, and no other.
func TestTaskStatusReachesItsCreatorOnly(t *testing.T) {
	h, up := startTasks(t, "")
	up.mu.Lock()
	up.notify = true
	up.mu.Unlock()
	listen := func(key string) (*client.Client, chan string) {
		//lint:ignore SA1019 a 2025-11-25 session's notifications come on its GET stream
		c := h.client("assistant", key, transport.WithContinuousListening())
		got := make(chan string, 16)
		c.OnNotification(func(n mcp.JSONRPCNotification) {
			if n.Method == "notifications/tasks/status" {
				id, _ := n.Params.AdditionalFields["taskId"].(string)
				got <- id
			}
		})
		return c, got
	}
	alice, aliceGot := listen(aliceKey)
	bot, botGot := listen(botKey)
	waitFor := func(got chan string) string {
		select {
		case id := <-got:
			return id
		case <-time.After(20 * time.Second):
			t.Fatal("no task status notification")
			return ""
		}
	}
	mine, theirs := createTask(t, alice), createTask(t, bot)
	if _, rpcErr := rpc(t, alice, "tasks/get", map[string]any{"taskId": mine}); rpcErr != nil {
		t.Fatal(rpcErr.Message)
	}
	if id := waitFor(aliceGot); id != mine {
		t.Fatalf("alice got the status of %q, want %q", id, mine)
	}
	// The bot's own task's status, after alice's in its stream's order: had alice's reached the
	// bot, it would come first.
	if _, rpcErr := rpc(t, bot, "tasks/get", map[string]any{"taskId": theirs}); rpcErr != nil {
		t.Fatal(rpcErr.Message)
	}
	if id := waitFor(botGot); id != theirs {
		t.Fatalf("the bot got the status of %q (alice's task is %q), want its own %q", id, mine, theirs)
	}
}
