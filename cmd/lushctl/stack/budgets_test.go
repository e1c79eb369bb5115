package stack_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/agentd/model/scripted"
	"github.com/lush-agents/lush/gateway/budgethttp"
	"github.com/lush-agents/lush/policies/budget"
	"github.com/lush-agents/lush/scheduler"
)

// counting counts the model's turns: a denied invocation must not reach the model.
type counting struct {
	model.Model
	turns atomic.Int64
}

func (c *counting) Generate(ctx context.Context, req model.Request, onText func(string)) (*model.Response, error) {
	c.turns.Add(1)
	return c.Model.Generate(ctx, req, onText)
}

const budgetsYAML = `budgets:
  - name: researcher-calls
    agent: researcher
    tool_calls: 2
    per: day
  - name: orchestrator-tokens
    agent: orchestrator
    tokens: 10
    per: day
roles:
  budget: [user:carol]
`

var budgetScripts = map[string]string{
	"researcher": `turns:
  - calls: [{name: echo, args: {text: "one"}}]
  - calls: [{name: echo, args: {text: "two"}}]
  - calls: [{name: echo, args: {text: "three"}}]
  - text: "Found: {{result}}"
`,
	"orchestrator": `turns:
  - text: "done"
    usage: {input: 20, output: 5}
`,
}

func budgetStack(t *testing.T, logPath string) (*harness, *counting) {
	t.Helper()
	m, err := scripted.New(scripts(t, budgetScripts))
	if err != nil {
		t.Fatal(err)
	}
	c := &counting{Model: m}
	return start(t, harnessOpts{model: c, lushYAML: budgetsYAML, logPath: logPath}), c
}

func (h *harness) budgets(key string) map[string]budget.Status {
	h.t.Helper()
	code, body := h.get("/budgets", key)
	var list budgethttp.List
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
		h.t.Fatalf("GET /budgets: %d %s", code, body)
	}
	out := map[string]budget.Status{}
	for _, s := range list.Budgets {
		out[s.Budget+" "+s.Subject] = s
	}
	return out
}

// Budgets end to end: a tool_calls budget denies the call over it (lush.budget.exhausted) and
// then the agent's invocation; an exhausted token budget stops the agent before its model is
// called; usage survives a restart on the same log; a holder of the budget role tops up over
// HTTP (itself a logged decision) and calls are allowed again; others get 403.
func TestBudgets(t *testing.T) {
	h, m := budgetStack(t, "")
	code, res, body := h.chat("researcher", aliceKey, "what do the notes say?")
	if code != http.StatusOK || len(res.Tools) != 3 {
		t.Fatalf("first chat: %d %s", code, body)
	}
	if res.Tools[0].Outcome != "allow" || res.Tools[1].Outcome != "allow" || res.Tools[2].Outcome != "deny" ||
		!strings.Contains(res.Tools[2].Error, "budget researcher-calls exhausted: 2 of 2 tool calls used this day; it resets at ") {
		t.Fatalf("tool calls: %+v", res.Tools)
	}
	// The agent's budget is exhausted: it is not started.
	turns := m.turns.Load()
	code, body = h.post("/agents/researcher/chat", aliceKey, map[string]any{"message": "again"})
	if code != http.StatusForbidden || !strings.Contains(string(body), "lush.budget.exhausted") {
		t.Fatalf("chat with an exhausted budget: %d %s", code, body)
	}
	if m.turns.Load() != turns {
		t.Error("the model was called for a denied invocation")
	}

	// Tokens: the orchestrator's first invocation uses 25 of its 10 (the last invocation may
	// overrun), so the next is not started.
	if code, _, body := h.chat("orchestrator", aliceKey, "hi"); code != http.StatusOK {
		t.Fatalf("orchestrator: %d %s", code, body)
	}
	h.st.Log().Sync(context.Background())
	turns = m.turns.Load()
	code, body = h.post("/agents/orchestrator/chat", aliceKey, map[string]any{"message": "hi again"})
	if code != http.StatusForbidden || !strings.Contains(string(body), "budget orchestrator-tokens exhausted: 25 of 10 tokens used this day") {
		t.Fatalf("orchestrator over its tokens: %d %s", code, body)
	}
	if m.turns.Load() != turns {
		t.Error("the model was called for a denied invocation")
	}

	// Usage over HTTP, for the budget role only.
	got := h.budgets(carolKey)
	if s := got["researcher-calls researcher"]; s.Used != 2 || s.Remaining != 0 || s.Limit != 2 || !s.Resets.After(time.Now()) {
		t.Errorf("researcher-calls: %+v", s)
	}
	if s := got["orchestrator-tokens orchestrator"]; s.Used != 25 || s.Remaining != -15 {
		t.Errorf("orchestrator-tokens: %+v", s)
	}
	code, body = h.get("/budgets", daveKey)
	if code != http.StatusForbidden || !strings.Contains(string(body), `"decision_id"`) || !strings.Contains(string(body), "lush.role.no_budget_read") {
		t.Errorf("dave reads budgets: %d %s", code, body)
	}

	// Restart on the same log: the usage is durable.
	log := h.log
	h.stop()
	h, _ = budgetStack(t, log)
	if s := h.budgets(carolKey)["researcher-calls researcher"]; s.Used != 2 {
		t.Fatalf("after a restart: %+v", s)
	}
	if code, _ := h.post("/agents/researcher/chat", aliceKey, map[string]any{"message": "after the restart"}); code != http.StatusForbidden {
		t.Fatalf("chat after the restart: %d", code)
	}

	// Top-ups: refused without the role, with the decision id; granted with it.
	topUp := map[string]any{"amount": 2, "reason": "quarter-end crunch"}
	code, body = h.post("/budgets/researcher-calls/top-up", daveKey, topUp)
	var refused struct {
		Error struct {
			DecisionID string `json:"decision_id"`
			Reasons    []struct{ Rule string }
		}
	}
	if json.Unmarshal(body, &refused); code != http.StatusForbidden || refused.Error.DecisionID == "" || len(refused.Error.Reasons) != 1 ||
		refused.Error.Reasons[0].Rule != "lush.role.no_budget" {
		t.Fatalf("dave tops up: %d %s", code, body)
	}
	if code, body := h.post("/budgets/researcher-calls/top-up", carolKey, map[string]any{"amount": 0, "reason": "x"}); code != http.StatusBadRequest ||
		!strings.Contains(string(body), "amount must be a whole number from 1") {
		t.Errorf("amount 0: %d %s", code, body)
	}
	if code, body := h.post("/budgets/nope/top-up", carolKey, topUp); code != http.StatusNotFound || !strings.Contains(string(body), "the budgets are: orchestrator-tokens, researcher-calls") {
		t.Errorf("unknown budget: %d %s", code, body)
	}
	code, body = h.post("/budgets/researcher-calls/top-up", carolKey, topUp)
	var granted budgethttp.TopUpResult
	if json.Unmarshal(body, &granted); code != http.StatusOK || granted.Status.Granted != 2 || granted.Status.Remaining != 2 || granted.DecisionID == "" {
		t.Fatalf("carol tops up: %d %s", code, body)
	}
	code, res, body = h.chat("researcher", aliceKey, "now?")
	if code != http.StatusOK || len(res.Tools) != 3 || res.Tools[1].Outcome != "allow" || res.Tools[2].Outcome != "deny" {
		t.Fatalf("chat after the top-up: %d %s", code, body)
	}
	// The top-up is a decision in the log, with who, how much and why.
	found := false
	for _, r := range h.decisions() {
		if r.Event.DecisionID == granted.DecisionID {
			found = r.Event.Action == "budget/top-up" && r.Event.Principal == "user:carol" && r.Event.Outcome == "allow" &&
				strings.Contains(string(r.Event.Input), `"reason":"quarter-end crunch"`) && strings.Contains(string(r.Event.Input), `"amount":2`)
		}
	}
	if !found {
		t.Error("the top-up's decision is not in the log as it should be")
	}
}

// A loop's firing goes through the same decision: the agent of an exhausted budget is not
// started by the scheduler either, and the firing is recorded as denied with the reason.
func TestBudgetStopsLoopFirings(t *testing.T) {
	m, err := scripted.New(scripts(t, budgetScripts))
	if err != nil {
		t.Fatal(err)
	}
	c := &counting{Model: m}
	h := start(t, harnessOpts{model: c, scheduler: true, lushYAML: budgetsYAML})
	trigger := func() scheduler.Firing {
		t.Helper()
		code, body := h.post("/loops/notes/trigger", aliceKey, map[string]any{"wait": true})
		var trig struct {
			Firing scheduler.Firing `json:"firing"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &trig) != nil {
			t.Fatalf("trigger: %d %s", code, body)
		}
		return trig.Firing
	}
	if f := trigger(); f.Status != scheduler.StatusSucceeded {
		t.Fatalf("first firing: %+v", f)
	}
	turns := c.turns.Load()
	f := trigger()
	if f.Status != scheduler.StatusDenied || !strings.Contains(f.Error, "budget researcher-calls exhausted: 2 of 2 tool calls used this day") {
		t.Fatalf("second firing: %+v", f)
	}
	if c.turns.Load() != turns {
		t.Error("the model was called for a denied firing")
	}
}
