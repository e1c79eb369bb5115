package a2a

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// fakeAgents stands in for agentd: bob may not invoke; "wait" runs until cancelled; anything
// else answers "hello" in two pieces. Tasks are decided as policies/tasks.rego does: the
// creator, at the agent the task was created at.
type fakeAgents struct {
	builds
	running chan struct{} // closed when a "wait" invocation runs
}

func (f *fakeAgents) Invoke(ctx context.Context, inv agentd.Invocation) (*agentd.Result, error) {
	if inv.Caller.ID == "user:bob" {
		return nil, &agentd.DeniedError{DecisionID: "dec-denied", Reasons: []authz.Reason{{Rule: "lush.acl.no_agent_execute", Message: "bob may not execute " + inv.Agent}}}
	}
	if inv.OnStart != nil {
		inv.OnStart(inv.Agent + "-decision")
	}
	if inv.Message == "wait" {
		close(f.running)
		<-ctx.Done()
		return &agentd.Result{ID: "inv-wait", Agent: inv.Agent, Status: "cancelled", Error: "cancelled"}, nil
	}
	if inv.OnEvent != nil {
		inv.OnEvent(agentd.Event{Type: "text", Text: "hel"})
		inv.OnEvent(agentd.Event{Type: "text", Text: "lo"})
	}
	return &agentd.Result{ID: "inv-1", Agent: inv.Agent, Status: "ok", Response: "hello", Revision: f.hash}, nil
}

func (f *fakeAgents) DecideTask(_ context.Context, c identity.Caller, agent, action string, task authz.Task) *enforce.Verdict {
	allow := task.Principal != "" && task.Principal == c.ID && task.Agent == agent && (action == authz.ActionTasksRead || action == authz.ActionTasksCancel)
	return &enforce.Verdict{Decision: authz.Decision{Allow: allow}, ID: "dec-task"}
}

// tokenAuth takes the bearer token for the principal id.
type tokenAuth struct{}

func (tokenAuth) Authenticate(r *http.Request) (identity.Caller, error) {
	id, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || id == "" {
		return identity.Caller{}, errors.New("no token")
	}
	return identity.Caller{ID: id}, nil
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func serve(t *testing.T) (*httptest.Server, *fakeAgents) {
	t.Helper()
	f := &fakeAgents{builds: builds{testManifest(), "rev1"}, running: make(chan struct{})}
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s, err := New(f, &policyhttp.Gate{Auth: tokenAuth{}}, CardOptions{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/", s.Handler())
	return srv, f
}

// clientFor is an a2a-go client of agent as principal, from the agent's card.
func clientFor(t *testing.T, srv *httptest.Server, principal, agent string) *a2aclient.Client {
	t.Helper()
	hc := &http.Client{Transport: bearer{principal}}
	card, err := agentcard.NewResolver(hc).Resolve(t.Context(), srv.URL+EndpointPath(agent))
	if err != nil {
		t.Fatalf("card: %v", err)
	}
	c, err := a2aclient.NewFromCard(t.Context(), card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func userText(s string) *a2a.MessageSendParams {
	return &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: s})}
}

func TestSendMessage(t *testing.T) {
	srv, _ := serve(t)
	alice := clientFor(t, srv, "user:alice", "triage")
	for _, tc := range []struct {
		name    string
		client  *a2aclient.Client
		params  *a2a.MessageSendParams
		wantErr error
		errText string
	}{
		{name: "allowed", client: alice, params: userText("hi")},
		{name: "denied", client: clientFor(t, srv, "user:bob", "triage"), params: userText("hi"), wantErr: a2a.ErrInvalidRequest, errText: "bob may not execute triage (decision dec-denied)"},
		{name: "no text", client: alice, params: userText("  "), wantErr: a2a.ErrInvalidParams, errText: "message.parts"},
		{name: "not text", client: alice, params: &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"x": 1}})},
			wantErr: a2a.ErrUnsupportedContentType, errText: "message.parts[0]"},
		{name: "too much text", client: alice, params: &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser,
			a2a.TextPart{Text: strings.Repeat("x", maxText/2)}, a2a.TextPart{Text: strings.Repeat("x", maxText/2)})},
			wantErr: a2a.ErrInvalidParams, errText: "more than 4194304 bytes"},
		{name: "continuing a task", client: alice, params: &a2a.MessageSendParams{Message: &a2a.Message{ID: "m", Role: a2a.MessageRoleUser,
			TaskID: "t1", Parts: a2a.ContentParts{a2a.TextPart{Text: "more"}}}}, wantErr: a2a.ErrUnsupportedOperation, errText: "message.taskId"},
		{name: "agent role", client: alice, params: &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "hi"})},
			wantErr: a2a.ErrInvalidParams, errText: "message.role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := tc.client.SendMessage(t.Context(), tc.params)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v, want %v naming %s", err, tc.wantErr, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			task, ok := res.(*a2a.Task)
			if !ok {
				t.Fatalf("result = %T, want a task", res)
			}
			if task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) != 1 || task.Metadata["invocation_id"] != "inv-1" {
				t.Fatalf("task = %+v", task)
			}
			if p := task.Artifacts[0].Parts[0].(a2a.TextPart); p.Text != "hello" {
				t.Errorf("response = %q", p.Text)
			}
		})
	}
}

func TestTasksArePrivate(t *testing.T) {
	srv, _ := serve(t)
	alice := clientFor(t, srv, "user:alice", "triage")
	res, err := alice.SendMessage(t.Context(), userText("hi"))
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*a2a.Task).ID
	for _, tc := range []struct {
		name   string
		client *a2aclient.Client
		id     a2a.TaskID
		found  bool
	}{
		{name: "creator reads", client: alice, id: id, found: true},
		{name: "another principal", client: clientFor(t, srv, "user:carol", "triage"), id: id},
		{name: "another agent", client: clientFor(t, srv, "user:alice", "bare"), id: id},
		{name: "unknown task", client: alice, id: "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task, err := tc.client.GetTask(t.Context(), &a2a.TaskQueryParams{ID: tc.id})
			if !tc.found {
				if !errors.Is(err, a2a.ErrTaskNotFound) {
					t.Fatalf("err = %v, want task not found", err)
				}
				_, err := tc.client.CancelTask(t.Context(), &a2a.TaskIDParams{ID: tc.id})
				if !errors.Is(err, a2a.ErrTaskNotFound) {
					t.Fatalf("cancel: err = %v, want task not found", err)
				}
				return
			}
			if err != nil || task.ID != id || task.Status.State != a2a.TaskStateCompleted {
				t.Fatalf("task, err = %+v, %v", task, err)
			}
			if _, err := tc.client.CancelTask(t.Context(), &a2a.TaskIDParams{ID: tc.id}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
				t.Fatalf("cancel of a completed task: err = %v", err)
			}
		})
	}
}

func TestStream(t *testing.T) {
	srv, _ := serve(t)
	var kinds, text []string
	for ev, err := range clientFor(t, srv, "user:alice", "triage").SendStreamingMessage(t.Context(), userText("hi")) {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			kinds = append(kinds, "task")
		case *a2a.TaskArtifactUpdateEvent:
			kinds = append(kinds, "artifact")
			text = append(text, e.Artifact.Parts[0].(a2a.TextPart).Text)
		case *a2a.TaskStatusUpdateEvent:
			kinds = append(kinds, string(e.Status.State))
			if !e.Final {
				t.Error("the status update is not final")
			}
		}
	}
	if got := strings.Join(kinds, " "); got != "task artifact artifact completed" {
		t.Errorf("events = %s", got)
	}
	if got := strings.Join(text, ""); got != "hello" {
		t.Errorf("text = %q", got)
	}
	for _, err := range clientFor(t, srv, "user:bob", "triage").SendStreamingMessage(t.Context(), userText("hi")) {
		if !errors.Is(err, a2a.ErrInvalidRequest) || !strings.Contains(err.Error(), "dec-denied") {
			t.Fatalf("denied stream: err = %v", err)
		}
	}
}

func TestCancel(t *testing.T) {
	srv, f := serve(t)
	alice := clientFor(t, srv, "user:alice", "triage")
	carol := clientFor(t, srv, "user:carol", "triage")
	var states []string
	for ev, err := range alice.SendStreamingMessage(t.Context(), userText("wait")) {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *a2a.Task: // recorded and announced once allowed; the invocation runs
			<-f.running
			if _, err := carol.CancelTask(t.Context(), &a2a.TaskIDParams{ID: e.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Fatalf("another principal's cancel: err = %v, want task not found", err)
			}
			task, err := alice.CancelTask(t.Context(), &a2a.TaskIDParams{ID: e.ID})
			if err != nil || task.Status.State != a2a.TaskStateCanceled {
				t.Fatalf("cancel: %+v, %v", task, err)
			}
			states = append(states, "working")
		case *a2a.TaskStatusUpdateEvent:
			states = append(states, string(e.Status.State))
		}
	}
	if got := strings.Join(states, " "); got != "working canceled" {
		t.Errorf("states = %s", got)
	}
}

// TestCardPaths: the card is found from the agent's base URL and from its endpoint's; without
// credentials it is the public card (TestPublicAndExtendedCard), with bad ones refused.
func TestCardPaths(t *testing.T) {
	srv, _ := serve(t)
	for _, tc := range []struct {
		name, url, token string
		status           int
	}{
		{name: "base", url: srv.URL + CardPath("triage"), token: "user:alice", status: http.StatusOK},
		{name: "endpoint", url: srv.URL + EndpointPath("triage") + "/.well-known/agent-card.json", token: "user:alice", status: http.StatusOK},
		{name: "no credentials", url: srv.URL + CardPath("triage"), status: http.StatusOK},
		{name: "bad credentials", url: srv.URL + CardPath("triage"), token: " ", status: http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), "GET", tc.url, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
}
