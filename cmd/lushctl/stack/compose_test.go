package stack_test

import (
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// find returns the decisions matching action, agent and principal, oldest first.
func find(recs []decisionlog.Record, action, agent, principal string) []decisionlog.Record {
	var out []decisionlog.Record
	for _, r := range recs {
		if r.Event.Action == action && r.Event.Agent == agent && (principal == "" || r.Event.Principal == principal) {
			out = append(out, r)
		}
	}
	return out
}

func toolCall(res *agentd.Result, name string) *agentd.ToolCall {
	for i := range res.Tools {
		if res.Tools[i].Name == name {
			return &res.Tools[i]
		}
	}
	return nil
}

// The orchestrator calls the researcher through lush:// as alice: the researcher runs as alice
// (the principal is propagated), its read reaches the upstream, the orchestrator's write is
// stubbed, every step is in the decision log, and the spans form one trace.
func TestOrchestratorCallsResearcher(t *testing.T) {
	h := start(t, harnessOpts{})
	code, res, body := h.chat("orchestrator", aliceKey, "Write a report on Q3")
	if code != 200 || res.Status != "ok" {
		t.Fatalf("chat: %d %s", code, body)
	}
	if !strings.Contains(res.Response, "Report written.") || !strings.Contains(res.Response, "NOT executed") || !strings.Contains(res.Response, "Found: Q3 revenue grew 12%") {
		t.Errorf("response %q: want the scripted report quoting the stub", res.Response)
	}
	r := toolCall(res, "researcher")
	if r == nil || r.Status != "ok" || r.Outcome != "allow" || r.Tool != "lush://researcher" || r.DecisionID == "" {
		t.Fatalf("researcher call: %+v", r)
	}
	w := toolCall(res, "write_note")
	if w == nil || w.Status != "stubbed" || w.Outcome != "stub" || w.Access != "write" {
		t.Fatalf("write_note call: %+v", w)
	}
	if got := h.rec.Calls(); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("upstream received %v; want only the researcher's echo (the write is stubbed)", got)
	}
	if res.Usage.Input == 0 || res.Usage.Output == 0 {
		t.Errorf("usage %+v: want token counts", res.Usage)
	}

	recs := h.decisions()
	inv := find(recs, "agent/invoke", "orchestrator", "user:alice")
	if len(inv) != 1 || inv[0].Event.Outcome != "allow" || inv[0].Event.Point != agentd.Point || inv[0].Event.DecisionID != res.ID {
		t.Fatalf("orchestrator invocation decisions: %+v", inv)
	}
	if c := inv[0].Completion; c == nil || c.Status != "ok" || c.TokensInput != int64(res.Usage.Input) || c.TokensOutput != int64(res.Usage.Output) {
		t.Errorf("orchestrator invocation completion: %+v (usage %+v)", inv[0].Completion, res.Usage)
	}
	child := find(recs, "agent/invoke", "researcher", "user:alice")
	if len(child) != 1 || child[0].Event.Outcome != "allow" || !slices.Equal(child[0].Event.Chain, []string{"orchestrator", "researcher"}) {
		t.Fatalf("researcher invocation: %+v", child)
	}
	// The researcher's first echo asks for a salary: the project's policy denies it, the model
	// reads the denial and asks for something else, which runs.
	echo := find(recs, "tools/call", "researcher", "user:alice")
	if len(echo) != 2 || echo[0].Event.Outcome != "deny" || !slices.Contains(echo[0].Event.Rules, "test.pay.private") ||
		echo[1].Event.Outcome != "allow" || echo[1].Event.ToolName != "echo" || !slices.Equal(echo[1].Event.Chain, []string{"orchestrator", "researcher"}) {
		t.Fatalf("researcher's echo calls: %+v", echo)
	}
	calls := find(recs, "tools/call", "orchestrator", "user:alice")
	var outcomes []string
	for _, c := range calls {
		outcomes = append(outcomes, c.Event.Tool+"="+c.Event.Outcome)
	}
	if !slices.Equal(outcomes, []string{"lush://researcher=allow", "mcp://tests.internal/mcp=stub"}) {
		t.Errorf("orchestrator's tool calls: %v", outcomes)
	}

	// One trace: orchestrator invocation -> tool span -> gateway call -> researcher invocation.
	spans := h.spans.Ended()
	root := spanNamed(t, spans, "invoke_agent orchestrator")
	researcher := spanNamed(t, spans, "invoke_agent researcher")
	if researcher.SpanContext().TraceID() != root.SpanContext().TraceID() {
		t.Fatal("the researcher's invocation is not in the orchestrator's trace")
	}
	if !descends(spans, researcher, root) {
		t.Error("the researcher's invocation does not descend from the orchestrator's")
	}
	attrs := map[string]string{}
	for _, a := range root.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	for k, want := range map[string]string{"lush.agent": "orchestrator", "lush.principal": "user:alice", "lush.model": "gemini-2.5-flash", "lush.status": "ok"} {
		if attrs[k] != want {
			t.Errorf("root span %s = %q, want %q", k, attrs[k], want)
		}
	}
	if attrs["lush.tokens.input"] == "" || attrs["lush.tokens.input"] == "0" {
		t.Errorf("root span has no token count: %v", attrs)
	}
	tool := spanNamed(t, spans, "tool write_note")
	tattrs := map[string]string{}
	for _, a := range tool.Attributes() {
		tattrs[string(a.Key)] = a.Value.String()
	}
	if tattrs["lush.tool"] != "mcp://tests.internal/mcp" || tattrs["lush.access"] != "write" || tattrs["lush.status"] != "stubbed" || tattrs["lush.latency_ms"] == "" {
		t.Errorf("tool span attributes: %v", tattrs)
	}
	if tool.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Error("the tool span is not a child of the invocation span")
	}
	// Each model turn is a span of the invocation, with its number and tokens.
	var turns []string
	for _, s := range spans {
		if s.Name() != "chat gemini-2.5-flash" || s.Parent().SpanID() != root.SpanContext().SpanID() {
			continue
		}
		a := map[string]string{}
		for _, kv := range s.Attributes() {
			a[string(kv.Key)] = kv.Value.String()
		}
		if a["lush.tokens.input"] == "" || a["lush.tokens.input"] == "0" || a["lush.agent"] != "orchestrator" {
			t.Errorf("model turn span attributes: %v", a)
		}
		turns = append(turns, a["lush.turn"])
	}
	slices.Sort(turns)
	if len(turns) < 2 || turns[0] != "1" || turns[1] != "2" {
		t.Errorf("model turns of the orchestrator: %v, want one span per turn, numbered from 1", turns)
	}
}

// carol may run the orchestrator and holds a grant on lush://researcher, but not execute on
// the researcher: agentd refuses that invocation, the orchestrator's model reads the refusal
// and goes on; her write is denied (no grant) and the model recovers from that too.
func TestPrincipalWithoutExecuteIsRefused(t *testing.T) {
	h := start(t, harnessOpts{})
	code, res, body := h.chat("orchestrator", carolKey, "Write a report on Q3")
	if code != 200 || res.Status != "ok" {
		t.Fatalf("chat: %d %s", code, body)
	}
	r := toolCall(res, "researcher")
	if r == nil || r.Status != "error" || !strings.Contains(r.Error, "may not execute agent \"researcher\"") {
		t.Fatalf("researcher call: %+v", r)
	}
	// write_note is not listed for carol (no grant), so the model's call of it is an unknown tool.
	w := toolCall(res, "write_note")
	if w == nil || w.Status != "unknown_tool" || !strings.Contains(w.Error, "the tools are: researcher") {
		t.Fatalf("write_note call: %+v", w)
	}
	if len(h.rec.Calls()) != 0 {
		t.Errorf("upstream received %v; nothing should reach it", h.rec.Calls())
	}
	denied := find(h.decisions(), "agent/invoke", "researcher", "user:carol")
	if len(denied) != 1 || denied[0].Event.Outcome != "deny" || !slices.Contains(denied[0].Event.Rules, "lush.acl.no_agent_execute") {
		t.Fatalf("researcher invocation for carol: %+v", denied)
	}
	// Directly, too.
	if code, body := h.post("/agents/researcher/chat", carolKey, map[string]any{"message": "hi"}); code != 403 || !strings.Contains(string(body), "lush.acl.no_agent_execute") {
		t.Errorf("direct chat with the researcher as carol: %d %s", code, body)
	}
}

// loopy calls itself: the chain grows by one agent per call until the depth limit (5) refuses
// the sixth invocation; every level still answers.
func TestCycleStopsAtDepthLimit(t *testing.T) {
	h := start(t, harnessOpts{})
	code, res, body := h.chat("loopy", aliceKey, "go")
	if code != 200 || res.Status != "ok" {
		t.Fatalf("chat: %d %s", code, body)
	}
	if !strings.Contains(res.Response, "call chain depth 6") {
		t.Errorf("response %q: want the depth refusal, quoted up the chain", res.Response)
	}
	inv := find(h.decisions(), "agent/invoke", "loopy", "user:alice")
	var allowed, denied int
	for _, r := range inv {
		switch r.Event.Outcome {
		case "allow":
			allowed++
		case "deny":
			denied++
			if len(r.Event.Chain) != 6 || !slices.Contains(r.Event.Rules, "lush.depth.exceeded") {
				t.Errorf("denied invocation: chain %v rules %v", r.Event.Chain, r.Event.Rules)
			}
		}
	}
	if allowed != 5 || denied != 1 {
		t.Errorf("invocations: %d allowed, %d denied; want 5 and 1", allowed, denied)
	}
}

func spanNamed(t *testing.T, spans []trace.ReadOnlySpan, name string) trace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name())
	}
	t.Fatalf("no span %q among %v", name, names)
	return nil
}

// descends reports whether s has anc among its ancestors.
func descends(spans []trace.ReadOnlySpan, s, anc trace.ReadOnlySpan) bool {
	byID := map[string]trace.ReadOnlySpan{}
	for _, x := range spans {
		byID[x.SpanContext().SpanID().String()] = x
	}
	for cur := s; cur != nil; {
		p := cur.Parent()
		if !p.IsValid() {
			return false
		}
		if p.SpanID() == anc.SpanContext().SpanID() {
			return true
		}
		cur = byID[p.SpanID().String()]
	}
	return false
}
