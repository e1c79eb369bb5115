package main

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
)

const testA2AToken = "a2a-test-token-never-shown"

// echoAgent is an A2A agent for the tests: it echoes a message as a completed task, refuses
// "forbidden" as Lush refuses a denied invocation (invalid request, the reasons in the error's
// data) and fails "fail" as a task.
type echoAgent struct{ calls atomic.Int32 }

func (e *echoAgent) OnSendMessage(_ context.Context, p *a2a.MessageSendParams) (a2a.SendMessageResult, error) {
	e.calls.Add(1)
	text := textOfParts(p.Message.Parts)
	if text == "forbidden" {
		return nil, fmt.Errorf("%w: agent/invoke of echo denied for user:dave: not in the agent's ACL (decision 0190abcd)", a2a.ErrInvalidRequest)
	}
	task := a2a.NewSubmittedTask(p.Message, p.Message)
	if text == "fail" {
		task.Status = a2a.TaskStatus{State: a2a.TaskStateFailed, Message: a2a.NewMessageForTask(a2a.MessageRoleAgent, task, a2a.TextPart{Text: "the model gave up"})}
		return task, nil
	}
	task.Status = a2a.TaskStatus{State: a2a.TaskStateCompleted}
	task.Artifacts = []*a2a.Artifact{{ID: "response", Parts: a2a.ContentParts{a2a.TextPart{Text: "echo: " + text}}}}
	return task, nil
}

func (e *echoAgent) OnSendMessageStream(_ context.Context, p *a2a.MessageSendParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		e.calls.Add(1)
		task := a2a.NewSubmittedTask(p.Message, p.Message)
		task.Status = a2a.TaskStatus{State: a2a.TaskStateWorking}
		if !yield(task, nil) {
			return
		}
		for _, piece := range []string{"echo: ", textOfParts(p.Message.Parts)} {
			ev := a2a.NewArtifactUpdateEvent(task, "response", a2a.TextPart{Text: piece})
			ev.Append = true
			if !yield(ev, nil) {
				return
			}
		}
		final := a2a.NewStatusUpdateEvent(task, a2a.TaskStateCompleted, nil)
		final.Final = true
		yield(final, nil)
	}
}

func (e *echoAgent) OnGetTask(context.Context, *a2a.TaskQueryParams) (*a2a.Task, error) {
	return nil, a2a.ErrTaskNotFound
}
func (e *echoAgent) OnCancelTask(context.Context, *a2a.TaskIDParams) (*a2a.Task, error) {
	return nil, a2a.ErrTaskNotFound
}
func (e *echoAgent) OnResubscribeToTask(context.Context, *a2a.TaskIDParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) { yield(nil, a2a.ErrUnsupportedOperation) }
}
func (e *echoAgent) OnGetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigParams) (*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}
func (e *echoAgent) OnListTaskPushConfig(context.Context, *a2a.ListTaskPushConfigParams) ([]*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}
func (e *echoAgent) OnSetTaskPushConfig(context.Context, *a2a.TaskPushConfig) (*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}
func (e *echoAgent) OnDeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigParams) error {
	return a2a.ErrPushNotificationNotSupported
}
func (e *echoAgent) OnGetExtendedAgentCard(context.Context) (*a2a.AgentCard, error) {
	return nil, a2a.ErrAuthenticatedExtendedCardNotConfigured
}

// serveEchoAgent serves an echoAgent on loopback at <url>/agents/echo: the card to anyone
// (its endpoint at endpointHost when set), the JSON-RPC endpoint only with testA2AToken.
func serveEchoAgent(t *testing.T, endpointHost string) (base string, agent *echoAgent) {
	t.Helper()
	agent = &echoAgent{}
	rpc := a2asrv.NewJSONRPCHandler(agent)
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	if endpointHost == "" {
		endpointHost = host
	}
	card := &a2a.AgentCard{Name: "echo", Description: "Echoes what it is told.\nSecond line.", URL: "http://" + endpointHost + "/agents/echo/a2a",
		PreferredTransport: a2a.TransportProtocolJSONRPC, ProtocolVersion: "0.3.0", Version: "1",
		Capabilities: a2a.AgentCapabilities{Streaming: true}, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills:          []a2a.AgentSkill{{ID: "echo", Name: "echo", Description: "says it back", Tags: []string{"text"}}},
		SecuritySchemes: a2a.NamedSecuritySchemes{"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "bearer"}},
		Security:        []a2a.SecurityRequirements{{"bearer": a2a.SecuritySchemeScopes{}}}}
	mux.Handle("GET /agents/echo/.well-known/agent-card.json", a2asrv.NewStaticAgentCardHandler(card))
	mux.HandleFunc("POST /agents/echo/a2a", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testA2AToken {
			http.Error(w, `{"error":"unauthenticated"}`, http.StatusUnauthorized)
			return
		}
		rpc.ServeHTTP(w, r)
	})
	return srv.URL + "/agents/echo", agent
}

func TestA2ACommands(t *testing.T) {
	base, agent := serveEchoAgent(t, "")
	t.Setenv("LUSH_TOKEN", "")
	t.Setenv("LUSH_API_KEY", "")
	tests := []struct {
		name       string
		env        string // $LUSH_TOKEN
		args       []string
		code       int
		stdout     []string // each must appear
		exact      string   // when set, all of stdout
		stderr     []string
		reachAgent bool
	}{
		{name: "card", args: []string{"a2a", "card", base},
			stdout: []string{"name:", "echo", "Echoes what it is told.", "/agents/echo/a2a (JSONRPC)", "security:", "bearer (http bearer)", "echo", "says it back"}},
		{name: "card json", args: []string{"a2a", "card", base, "-o", "json"}, stdout: []string{`"name": "echo"`, `"protocolVersion": "0.3.0"`}},
		{name: "send", args: []string{"a2a", "send", base, "hello there", "--token", testA2AToken}, stdout: []string{"echo: hello there\n"}, reachAgent: true},
		{name: "send token from env", env: testA2AToken, args: []string{"a2a", "send", base, "from env"}, stdout: []string{"echo: from env"}, reachAgent: true},
		{name: "send json", args: []string{"a2a", "send", base, "hi", "--token", testA2AToken, "-o", "json"},
			stdout: []string{`"state": "completed"`, `"text": "echo: hi"`}, reachAgent: true},
		{name: "stream", args: []string{"a2a", "send", "--stream", base, "streamed", "--token", testA2AToken}, stdout: []string{"echo: streamed\n"}, reachAgent: true},
		{name: "stream ending a line", args: []string{"a2a", "send", "--stream", base, "two\nlines\n", "--token", testA2AToken},
			exact: "echo: two\nlines\n", reachAgent: true},
		{name: "stream json", args: []string{"a2a", "send", "--stream", "-o", "json", base, "streamed", "--token", testA2AToken},
			stdout: []string{`"kind":"task"`, `"kind":"artifact-update"`, `"final":true`}, reachAgent: true},
		{name: "refused", args: []string{"a2a", "send", base, "forbidden", "--token", testA2AToken}, code: exitFailed,
			stderr: []string{"lushctl: message/send to echo: invalid request: agent/invoke of echo denied for user:dave: not in the agent's ACL (decision 0190abcd)\n"}, reachAgent: true},
		{name: "task failed", args: []string{"a2a", "send", base, "fail", "--token", testA2AToken}, code: exitFailed,
			stderr: []string{"ended failed: the model gave up"}, reachAgent: true},
		{name: "no credentials", args: []string{"a2a", "send", base, "hello"}, code: exitFailed,
			stderr: []string{"401 Unauthorized: pass --token or --api-key"}},
		{name: "wrong token", args: []string{"a2a", "send", base, "hello", "--token", "not-it"}, code: exitFailed,
			stderr: []string{"401 Unauthorized"}},
		{name: "no card", args: []string{"a2a", "card", base + "/nope"}, code: exitFailed, stderr: []string{"fetch the Agent Card of", "404 Not Found"}},
		{name: "nothing listens", args: []string{"a2a", "card", "http://127.0.0.1:1/agents/echo"}, code: exitRuntime, stderr: []string{"fetch the Agent Card of http://127.0.0.1:1/agents/echo", "connection refused"}},
		{name: "bad url", args: []string{"a2a", "card", "ftp://x"}, code: exitUsage, stderr: []string{"<url> must be an agent's http(s) base URL"}},
		{name: "empty message", args: []string{"a2a", "send", base, " "}, code: exitUsage, stderr: []string{"<message> is empty"}},
		{name: "missing message", args: []string{"a2a", "send", base}, code: exitUsage, stderr: []string{"accepts 2 arg(s)"}},
		{name: "bad output", args: []string{"a2a", "card", base, "-o", "yaml"}, code: exitUsage, stderr: []string{"--output must be text or json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LUSH_TOKEN", tc.env)
			before := agent.calls.Load()
			r := lushctl(t, "", tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
			}
			if tc.exact != "" && r.stdout != tc.exact {
				t.Errorf("stdout = %q, want %q", r.stdout, tc.exact)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
				}
			}
			if strings.Contains(r.stdout+r.stderr, testA2AToken) {
				t.Errorf("the token is shown:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
			}
			if reached := agent.calls.Load() > before; reached != tc.reachAgent {
				t.Errorf("agent reached: %t, want %t", reached, tc.reachAgent)
			}
			if strings.HasSuffix(tc.name, "json") && !strings.Contains(tc.name, "stream") {
				var v map[string]any
				if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
					t.Errorf("-o json: not one JSON object: %v\n%s", err, r.stdout)
				}
			}
		})
	}
}

// A card whose endpoint is on another host gets no credentials: the command refuses to send.
func TestA2ACredentialsStayOnTheHost(t *testing.T) {
	var leaked atomic.Bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Store(true)
		}
		http.Error(w, "no", http.StatusTeapot)
	}))
	t.Cleanup(other.Close)
	base, agent := serveEchoAgent(t, strings.TrimPrefix(other.URL, "http://"))
	t.Setenv("LUSH_TOKEN", "")
	r := lushctl(t, "", "a2a", "send", base, "hello", "--token", testA2AToken)
	if r.code != exitFailed || !strings.Contains(r.stderr, "lushctl sends credentials only to") {
		t.Fatalf("exit %d, stderr %q; want 1 and a refusal", r.code, r.stderr)
	}
	if leaked.Load() || agent.calls.Load() != 0 {
		t.Fatal("the message was sent")
	}
}
