package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/agentd/model/scripted"
)

func TestAPIErrors(t *testing.T) {
	h := start(t, harnessOpts{})
	for _, tc := range []struct {
		name, path, key, body string
		code                  int
		want                  string
	}{
		{"no credentials", "/agents/orchestrator/chat", "", `{"message":"hi"}`, 401, "unauthenticated"},
		{"wrong key", "/agents/orchestrator/chat", "nope-0123456789", `{"message":"hi"}`, 401, "unauthenticated"},
		{"not json", "/agents/orchestrator/chat", aliceKey, `hello`, 400, "the body must be JSON"},
		{"unknown field", "/agents/orchestrator/chat", aliceKey, `{"message":"hi","temperature":1}`, 400, `unknown field \"temperature\"`},
		{"empty message", "/agents/orchestrator/chat", aliceKey, `{"message":"  "}`, 400, "message: required"},
		{"bad history role", "/agents/orchestrator/chat", aliceKey, `{"message":"hi","history":[{"role":"system","parts":[]}]}`, 400, `history[0].role`},
		{"unknown agent", "/agents/nobody/chat", aliceKey, `{"message":"hi"}`, 404, `no agent \"nobody\"`},
		{"denied", "/agents/loopy/chat", carolKey, `{"message":"hi"}`, 403, "lush.acl.no_agent_execute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", h.st.URL()+tc.path, strings.NewReader(tc.body))
			if tc.key != "" {
				req.Header.Set("X-API-Key", tc.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body bytes.Buffer
			body.ReadFrom(resp.Body)
			if resp.StatusCode != tc.code || !strings.Contains(body.String(), tc.want) {
				t.Errorf("got %d %s; want %d containing %q", resp.StatusCode, body.String(), tc.code, tc.want)
			}
		})
	}
}

func TestListAndStatus(t *testing.T) {
	h := start(t, harnessOpts{})
	names := func(key string) []string {
		code, body := h.get("/agents", key)
		if code != 200 {
			t.Fatalf("/agents: %d %s", code, body)
		}
		var out struct {
			Agents []agentd.AgentInfo `json:"agents"`
		}
		json.Unmarshal(body, &out)
		var n []string
		for _, a := range out.Agents {
			n = append(n, a.Name)
		}
		return n
	}
	if got := strings.Join(names(aliceKey), ","); got != "loopy,orchestrator,researcher" {
		t.Errorf("alice sees %s", got)
	}
	if got := strings.Join(names(carolKey), ","); got != "orchestrator" {
		t.Errorf("carol sees %s; want only the agent she may invoke", got)
	}
	h.chat("researcher", aliceKey, "hi")
	code, body := h.get("/agents/researcher/status", aliceKey)
	var st agentd.AgentInfo
	json.Unmarshal(body, &st)
	if code != 200 || st.Model != "gemini-2.5-flash" || st.Revision != h.hash || st.Stats == nil || st.Stats.Invocations != 1 {
		t.Errorf("status: %d %s", code, body)
	}
	if code, _ := h.get("/agents/researcher/status", carolKey); code != 404 {
		t.Errorf("carol's status of the researcher: %d, want 404", code)
	}
	if code, body := h.get("/health", ""); code != 200 || !strings.Contains(string(body), h.hash) {
		t.Errorf("health: %d %s", code, body)
	}
	if code, body := h.get("/metrics", ""); code != 200 || !strings.Contains(string(body), `lush_agent_invocations_total{agent="researcher",status="ok"} 1`) ||
		!strings.Contains(string(body), `lush_agent_tokens_total{agent="researcher",kind="input",model="gemini-2.5-flash"}`) {
		t.Errorf("metrics lack the invocation: %d", code)
	}
}

// The stream carries the text as it is produced, each tool result, and the final result.
func TestChatStream(t *testing.T) {
	h := start(t, harnessOpts{})
	req, _ := http.NewRequest("POST", h.st.URL()+"/agents/researcher/chat/stream", strings.NewReader(`{"message":"Q3?"}`))
	req.Header.Set("X-API-Key", aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var events []string
	var text strings.Builder
	var done agentd.Result
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
			events = append(events, event)
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			switch event {
			case "text":
				var e agentd.Event
				json.Unmarshal([]byte(data), &e)
				text.WriteString(e.Text)
			case "done":
				json.Unmarshal([]byte(data), &done)
			}
		}
	}
	if done.Status != "ok" || text.String() != done.Response {
		t.Errorf("streamed text %q, final response %q (status %s)", text.String(), done.Response, done.Status)
	}
	got := strings.Join(compact(events), ",")
	if got != "tool_result,text,done" {
		t.Errorf("events %s", got)
	}
}

// compact collapses runs of the same event.
func compact(s []string) []string {
	var out []string
	for _, e := range s {
		if len(out) == 0 || out[len(out)-1] != e {
			out = append(out, e)
		}
	}
	return out
}

// Each agent is an MCP server with one tool that invokes it, usable by any MCP client.
func TestAgentAsMCPServer(t *testing.T) {
	h := start(t, harnessOpts{})
	c, err := client.NewStreamableHttpClient(h.st.URL()+"/agents/researcher/mcp", transport.WithHTTPHeaders(map[string]string{"X-API-Key": aliceKey}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25", ClientInfo: mcp.Implementation{Name: "t"}}}); err != nil {
		t.Fatal(err)
	}
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "researcher" || tools.Tools[0].Description != "Finds facts in the notes." {
		t.Fatalf("tools: %+v %v", tools, err)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "researcher"
	req.Params.Arguments = map[string]any{"message": "Q3?"}
	res, err := c.CallTool(ctx, req)
	if err != nil || res.IsError {
		t.Fatalf("call: %+v %v", res, err)
	}
	if txt := res.Content[0].(mcp.TextContent).Text; txt != "Found: Q3 revenue grew 12%" {
		t.Errorf("answer %q", txt)
	}
	req.Params.Arguments = map[string]any{}
	if _, err := c.CallTool(ctx, req); err == nil || !strings.Contains(err.Error(), "arguments.message: required") {
		t.Errorf("call without a message: %v", err)
	}
}

// A model that keeps calling tools stops at the turn limit; a slow one at the timeout; a
// provider failure is reported as such. Each end is recorded on the invocation's decision.
func TestLoopLimits(t *testing.T) {
	endless := `turns:
` + strings.Repeat("  - calls: [{name: echo, args: {text: again}}]\n", 10)
	for _, tc := range []struct {
		name   string
		script string
		model  func(dir string) model.Model
		cfg    agentd.Config
		code   int
		status string
		want   string
	}{
		{name: "max turns", script: endless, cfg: agentd.Config{MaxTurns: 3}, code: 422, status: "max_turns", want: "after 3 model turns"},
		{name: "timeout", script: endless, cfg: agentd.Config{Timeout: 50 * time.Millisecond},
			model: func(dir string) model.Model { m, _ := scripted.New(dir); return slow{m} }, code: 504, status: "timeout", want: "within 50ms"},
		{name: "provider failure", script: "turns:\n  - error: quota exhausted\n", code: 502, status: "error", want: "quota exhausted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := scripts(t, map[string]string{"researcher": tc.script})
			var m model.Model
			if tc.model != nil {
				m = tc.model(dir)
			} else {
				m, _ = scripted.New(dir)
			}
			h := start(t, harnessOpts{model: m, agents: tc.cfg})
			code, res, body := h.chat("researcher", aliceKey, "loop")
			if code != tc.code || res.Status != tc.status || !strings.Contains(res.Error, tc.want) {
				t.Fatalf("got %d %s", code, body)
			}
			inv := find(h.decisions(), "agent/invoke", "researcher", "user:alice")
			if len(inv) != 1 || inv[0].Completion == nil || inv[0].Completion.Status != tc.status {
				t.Errorf("decision: %+v", inv)
			}
		})
	}
}

// slow delays every model turn.
type slow struct{ model.Model }

func (s slow) Generate(ctx context.Context, req model.Request, onText func(string)) (*model.Response, error) {
	select {
	case <-time.After(30 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Model.Generate(ctx, req, onText)
}

// blocking is a model whose turn lasts until its context ends; started is closed when the first
// turn begins (the invocation was decided and runs).
type blocking struct {
	once    sync.Once
	started chan struct{}
}

func (b *blocking) Generate(ctx context.Context, _ model.Request, _ func(string)) (*model.Response, error) {
	b.once.Do(func() { close(b.started) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// A client that goes away cancels the invocation: the client gives up once the model's turn has
// begun, and the invocation's completion says cancelled.
func TestClientCancellation(t *testing.T) {
	m := &blocking{started: make(chan struct{})}
	h := start(t, harnessOpts{model: m})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.started:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, _ := http.NewRequestWithContext(ctx, "POST", h.st.URL()+"/agents/researcher/chat", strings.NewReader(`{"message":"x"}`))
	req.Header.Set("X-API-Key", aliceKey)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the request should have been cancelled")
	}
	// The completion is written after the handler sees the cancellation: wait for it (bounded).
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		inv := find(h.decisions(), "agent/invoke", "researcher", "user:alice")
		if len(inv) == 1 && inv[0].Completion != nil {
			if inv[0].Completion.Status != "cancelled" {
				t.Fatalf("completion %+v", inv[0].Completion)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the invocation was not recorded as cancelled")
}

// agentd has no route to an MCP server, a local tool or a credential (test/layout_test.go keeps
// it from linking the packages that have one): its only way to act is the gateway's URL.
func TestAgentdNeedsTheGateway(t *testing.T) {
	if _, err := agentd.New(agentd.Config{}, agentd.Options{}); err == nil {
		t.Error("agentd.New accepted a config without a gateway")
	}
}
