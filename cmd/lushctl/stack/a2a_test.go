package stack_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	a2aserver "github.com/lush-agents/lush/agentd/a2a"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/identity"
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

// TestA2ACardSecurity: with auth.oauth configured, the card publishes an oauth2 scheme beside
// bearer and apiKey; anyone reads the public card (no skills), a caller with an API key the full
// one (also as the authenticated extended card), bad credentials are refused, and an agent that
// is not deployed is not found.
func TestA2ACardSecurity(t *testing.T) {
	const issuer = "http://127.0.0.1:9/tenant" // never reached: the card only names it
	h := start(t, harnessOpts{gw: func(c *gateway.Config) {
		c.Auth.OAuth = []identity.OAuthConfig{{Issuer: issuer, Scopes: []string{"mcp:tools"}}}
	}})
	card := func(agent, key string) (int, *a2a.AgentCard) {
		t.Helper()
		code, body := h.get(a2aserver.CardPath(agent), key)
		var c a2a.AgentCard
		if code == http.StatusOK {
			if err := json.Unmarshal(body, &c); err != nil {
				t.Fatalf("card: %v\n%s", err, body)
			}
		}
		return code, &c
	}

	code, pub := card("orchestrator", "")
	if code != http.StatusOK || pub.Name != "orchestrator" || len(pub.Skills) != 0 || !pub.SupportsAuthenticatedExtendedCard {
		t.Fatalf("anonymous: %d %+v, want the public card", code, pub)
	}
	oauth, ok := pub.SecuritySchemes[a2aserver.SchemeOAuth2].(a2a.OAuth2SecurityScheme)
	if !ok || oauth.Oauth2MetadataURL != "http://127.0.0.1:9/.well-known/oauth-authorization-server/tenant" ||
		!strings.Contains(oauth.Description, h.st.URL()+"/.well-known/oauth-protected-resource") {
		t.Errorf("oauth2 scheme = %#v", pub.SecuritySchemes[a2aserver.SchemeOAuth2])
	}
	for _, s := range []a2a.SecuritySchemeName{a2aserver.SchemeBearer, a2aserver.SchemeAPIKey} {
		if pub.SecuritySchemes[s] == nil {
			t.Errorf("no %s scheme: %v", s, pub.SecuritySchemes)
		}
	}
	if code, full := card("orchestrator", aliceKey); code != http.StatusOK || len(full.Skills) == 0 {
		t.Errorf("with an API key: %d, %d skills; want the full card", code, len(full.Skills))
	}
	if code, _ := card("orchestrator", "mallory-key-0123456789"); code != http.StatusUnauthorized {
		t.Errorf("a wrong API key: %d, want 401", code)
	}
	for _, key := range []string{"", aliceKey} {
		if code, _ := card("nobody", key); code != http.StatusNotFound {
			t.Errorf("an agent not deployed (key %q): %d, want 404", key, code)
		}
	}

	cl, err := a2aclient.NewFromCard(t.Context(), pub, a2aclient.WithJSONRPCTransport(&http.Client{Transport: apiKey(aliceKey)}))
	if err != nil {
		t.Fatal(err)
	}
	if ext, err := cl.GetAgentCard(t.Context()); err != nil || ext.Name != "orchestrator" || len(ext.Skills) == 0 {
		t.Fatalf("agent/getAuthenticatedExtendedCard: %+v, %v", ext, err)
	}
}
