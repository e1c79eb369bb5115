package stack_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	a2aserver "github.com/lush-agents/lush/agentd/a2a"
)

// TestA2ADepth: the agent calls another Lush says came before an A2A message (its
// dev.lush/delegation metadata) count in the depth of the invocation and of the tool calls the
// agent makes (the delegation token carries them to the gateway): a message 4 calls deep runs
// researcher at depth 5, the project's max_depth, and its tool calls too; one 5 calls deep is
// denied by lush.depth.exceeded. Metadata can only add depth: a depth of 0 with a longer chain
// counts the chain.
func TestA2ADepth(t *testing.T) {
	h := start(t, harnessOpts{})
	hc := &http.Client{Transport: apiKey(aliceKey)}
	card, err := agentcard.NewResolver(hc).Resolve(t.Context(), h.st.URL()+a2aserver.EndpointPath("researcher"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(t.Context(), card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	send := func(delegation map[string]any) error {
		m := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "What do the notes say?"})
		m.Metadata = map[string]any{a2aserver.DelegationMetadata: delegation}
		_, err := c.SendMessage(t.Context(), &a2a.MessageSendParams{Message: m})
		return err
	}

	tests := []struct {
		name       string
		delegation map[string]any
		depth      int  // of the agent/invoke decision
		allowed    bool // the invocation ran
	}{
		{"4 calls deep", map[string]any{"principal": "user:mallory", "chain": []string{"a", "b", "c", "d"}, "depth": 4}, 5, true},
		{"a lower depth than the chain", map[string]any{"chain": []string{"a", "b", "c", "d"}, "depth": 0}, 5, true},
		{"5 calls deep", map[string]any{"chain": []string{"orchestrator"}, "depth": 5}, 6, false},
	}
	for _, tt := range tests {
		before := len(h.decisions())
		err := send(tt.delegation)
		if tt.allowed != (err == nil) || (!tt.allowed && !errors.Is(err, a2a.ErrInvalidRequest)) {
			t.Fatalf("%s: err = %v, want allowed %v", tt.name, err, tt.allowed)
		}
		var invoke, tools int
		for _, r := range h.decisions()[before:] {
			var in struct {
				Depth int `json:"depth"`
			}
			if err := json.Unmarshal(r.Event.Input, &in); err != nil {
				t.Fatal(err)
			}
			switch r.Event.Action {
			case "agent/invoke":
				invoke++
				if r.Event.Principal != "user:alice" || in.Depth != tt.depth || (r.Event.Outcome == "allow") != tt.allowed ||
					(!tt.allowed && !slices.Contains(r.Event.Rules, "lush.depth.exceeded")) {
					t.Errorf("%s: agent/invoke by %s at depth %d: %s %v", tt.name, r.Event.Principal, in.Depth, r.Event.Outcome, r.Event.Rules)
				}
			case "tools/call", "tools/list":
				tools++
				if in.Depth != tt.depth {
					t.Errorf("%s: %s at depth %d, want %d", tt.name, r.Event.Action, in.Depth, tt.depth)
				}
			}
		}
		if invoke != 1 || (tt.allowed && tools == 0) || (!tt.allowed && tools != 0) {
			t.Errorf("%s: %d agent/invoke and %d tool decisions", tt.name, invoke, tools)
		}
	}

	// Metadata that is not what Lush sends is refused, naming the field.
	for _, bad := range []any{"deep", map[string]any{"depth": -1}, map[string]any{"depth": 1.5}, map[string]any{"chain": "a"}, map[string]any{"depth": 65}} {
		m := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "hi"})
		m.Metadata = map[string]any{a2aserver.DelegationMetadata: bad}
		_, err := c.SendMessage(t.Context(), &a2a.MessageSendParams{Message: m})
		if !errors.Is(err, a2a.ErrInvalidParams) || !strings.Contains(err.Error(), "message.metadata.dev.lush/delegation") {
			t.Errorf("metadata %v: err = %v", bad, err)
		}
	}
}
