package stack_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	a2aserver "github.com/lush-agents/lush/agentd/a2a"
)

// apiKey sends a Lush API key with every request of an A2A client.
type apiKey string

func (k apiKey) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-API-Key", string(k))
	return http.DefaultTransport.RoundTrip(r)
}

// TestA2A drives the stack's agents with a2a-go's client: the card, a message allowed and one
// denied by the agent's ACL, each decided as agent/invoke and logged, and a task another
// principal (who may execute the agent) cannot read.
func TestA2A(t *testing.T) {
	h := start(t, harnessOpts{})
	client := func(key, agent string) *a2aclient.Client {
		t.Helper()
		hc := &http.Client{Transport: apiKey(key)}
		card, err := agentcard.NewResolver(hc).Resolve(t.Context(), h.st.URL()+a2aserver.EndpointPath(agent))
		if err != nil {
			t.Fatalf("card of %s: %v", agent, err)
		}
		if card.Name != agent || card.Version != h.hash || card.SecuritySchemes[a2aserver.SchemeAPIKey] == nil {
			t.Fatalf("card = %+v", card)
		}
		c, err := a2aclient.NewFromCard(t.Context(), card, a2aclient.WithJSONRPCTransport(hc))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	msg := func(s string) *a2a.MessageSendParams {
		return &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: s})}
	}

	res, err := client(aliceKey, "orchestrator").SendMessage(t.Context(), msg("Write the Q3 report."))
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("alice's task = %+v", res)
	}
	if _, err := client(daveKey, "orchestrator").SendMessage(t.Context(), msg("hi")); !errors.Is(err, a2a.ErrInvalidRequest) {
		t.Fatalf("dave's message: err = %v, want a denial", err)
	}
	if got, err := client(aliceKey, "orchestrator").GetTask(t.Context(), &a2a.TaskQueryParams{ID: task.ID}); err != nil || got.ID != task.ID {
		t.Fatalf("alice reads her task: %+v, %v", got, err)
	}
	if _, err := client(carolKey, "orchestrator").GetTask(t.Context(), &a2a.TaskQueryParams{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("carol reads alice's task: err = %v, want task not found", err)
	}

	want := map[string]string{ // principal action -> outcome
		"user:alice agent/invoke": "allow", "user:dave agent/invoke": "deny",
		"user:alice tasks/read": "allow", "user:carol tasks/read": "deny",
	}
	for _, r := range h.decisions() {
		if r.Event.Agent != "orchestrator" {
			continue
		}
		k := r.Event.Principal + " " + r.Event.Action
		if w, ok := want[k]; ok && w == r.Event.Outcome {
			delete(want, k)
		}
	}
	if len(want) > 0 {
		t.Errorf("decisions missing from the log: %v", want)
	}
}
