package stack_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/agentd/model/scripted"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/gateway/approvalhttp"
	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// approvalYAML makes every write need a person's approval; carol (and alice, for the
// self-approval check) may approve.
const approvalYAML = `authorization:
  approval_required_for: [write]
roles:
  approve: [user:carol, user:alice]
`

func approvalHarness(t *testing.T, wait, expire time.Duration, notify ...string) *harness {
	t.Helper()
	m, err := scripted.New(scripts(t, map[string]string{"orchestrator": `turns:
  - calls: [{name: write_note, args: {text: "deploy v2 to production"}}]
  - text: "done: {{result}}"
`}))
	if err != nil {
		t.Fatal(err)
	}
	return start(t, harnessOpts{model: m, lushYAML: approvalYAML, gw: func(c *gateway.Config) {
		c.LiveWrites = gateway.LiveWrites{Tools: []string{"mcp://tests.internal/mcp"}}
		c.Approvals = approval.Config{Wait: wait, ExpireAfter: expire, Poll: 20 * time.Millisecond}
		if len(notify) > 0 {
			c.Approvals.Notify.URL = notify[0]
		}
	}})
}

// pendingApproval waits for the one pending approval and returns it.
func (h *harness) pendingApproval() approvalhttp.Item {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		code, body := h.get("/approvals", carolKey)
		if code != http.StatusOK {
			h.t.Fatalf("GET /approvals as carol: %d %s", code, body)
		}
		var page approvalhttp.Page
		if err := json.Unmarshal(body, &page); err != nil {
			h.t.Fatal(err)
		}
		if len(page.Approvals) == 1 {
			return page.Approvals[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatal("no pending approval appeared")
	return approvalhttp.Item{}
}

func (h *harness) writes() int {
	n := 0
	for _, c := range h.rec.Calls() {
		if c == "write_note" {
			n++
		}
	}
	return n
}

// chatAsync runs a chat in the background; the result arrives on the channel.
func (h *harness) chatAsync(agent, key, message string) <-chan *agentd.Result {
	out := make(chan *agentd.Result, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, res, _ := h.chat(agent, key, message)
		out <- res
	})
	h.t.Cleanup(wg.Wait)
	return out
}

// A write that needs approval waits for a person: approved, it runs once under a decision of its
// own; every step is in the decision log.
func TestApprovalApprovedCallRuns(t *testing.T) {
	notified := make(chan string, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct{ Text string }
		json.NewDecoder(r.Body).Decode(&m)
		notified <- m.Text
	}))
	defer hook.Close()
	h := approvalHarness(t, time.Minute, time.Hour, hook.URL)
	done := h.chatAsync("orchestrator", aliceKey, "ship it")
	ap := h.pendingApproval()
	select {
	case text := <-notified:
		if !strings.Contains(text, "lushctl approvals show "+ap.ID) || !strings.Contains(text, "user:alice") {
			t.Errorf("the approvers were told %q", text)
		}
	case <-time.After(10 * time.Second):
		t.Error("the webhook was not told of the approval request")
	}
	if ap.Principal != "user:alice" || ap.Agent != "orchestrator" || ap.Tool != "mcp://tests.internal/mcp" || ap.ToolName != "write_note" ||
		!strings.Contains(string(ap.Arguments), "deploy v2 to production") || !strings.Contains(string(ap.Reasons), "lush.approval.risk") {
		t.Errorf("pending approval: %+v", ap)
	}
	if h.writes() != 0 {
		t.Fatal("the write ran before it was approved")
	}

	// Who may not: dave reads nothing, alice may not approve her own call, bad bodies are named.
	if code, body := h.get("/approvals", daveKey); code != http.StatusForbidden || !strings.Contains(string(body), "lush.role.no_approval_read") {
		t.Errorf("dave lists: %d %s", code, body)
	}
	if code, body := h.post("/approvals/"+ap.ID, aliceKey, map[string]string{"decision": "approve"}); code != http.StatusForbidden ||
		!strings.Contains(string(body), "lush.approval.self") {
		t.Errorf("alice approves her own call: %d %s", code, body)
	}
	if code, body := h.post("/approvals/"+ap.ID, carolKey, map[string]string{"decision": "yes"}); code != http.StatusBadRequest ||
		!strings.Contains(string(body), `decision: \"approve\" or \"deny\"`) {
		t.Errorf("a bad decision: %d %s", code, body)
	}
	if code, body := h.post("/approvals/no-such-id", carolKey, map[string]string{"decision": "approve"}); code != http.StatusNotFound {
		t.Errorf("an unknown approval: %d %s", code, body)
	}

	code, body := h.post("/approvals/"+ap.ID, carolKey, map[string]string{"decision": "approve", "reason": "ticket OPS-142"})
	if code != http.StatusOK {
		t.Fatalf("carol approves: %d %s", code, body)
	}
	var res *agentd.Result
	select {
	case res = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the approved call did not finish")
	}
	if len(res.Tools) != 1 || res.Tools[0].Outcome != "allow" || res.Tools[0].Status != "ok" {
		t.Fatalf("tool calls after approval: %+v", res.Tools)
	}
	if h.writes() != 1 {
		t.Errorf("%d writes ran, want 1", h.writes())
	}
	// Decided once.
	if code, body := h.post("/approvals/"+ap.ID, carolKey, map[string]string{"decision": "deny"}); code != http.StatusConflict ||
		!strings.Contains(string(body), "already approved") {
		t.Errorf("deciding again: %d %s", code, body)
	}

	// The log: the call that asked (completed "approved"), carol's decision with her reason, and
	// the call that ran under the approval.
	var asked, decided, ran *decisionlog.Record
	for _, r := range h.decisions() {
		switch {
		case r.Event.DecisionID == ap.ID:
			asked = &r
		case r.Event.Action == "approval/decide" && r.Event.Principal == "user:carol" && strings.Contains(string(r.Event.Input), `"decision":"approve"`):
			decided = &r
		case r.Event.Action == "tools/call" && r.Event.Outcome == "allow" && r.Event.ToolName == "write_note":
			ran = &r
		}
	}
	switch {
	case asked == nil || asked.Event.Outcome != "approval_required" || asked.Completion == nil || asked.Completion.Status != decisionlog.StatusApproved:
		t.Errorf("the approval_required decision: %+v", asked)
	case decided == nil || !strings.Contains(string(decided.Event.Input), "ticket OPS-142") || !strings.Contains(string(decided.Event.Input), ap.ID):
		t.Errorf("carol's decision: %+v", decided)
	case ran == nil || !strings.Contains(strings.Join(ran.Event.Rules, ","), "lush.approval.granted") ||
		!strings.Contains(string(ran.Event.Input), `"approved_by":"user:carol"`) || ran.Completion == nil || ran.Completion.Status != "ok":
		t.Errorf("the call that ran: %+v", ran)
	}
	// The trace of the call has the approval's steps.
	var events []string
	for _, s := range h.spans.Ended() {
		if s.Name() == "tools/call write_note" {
			for _, e := range s.Events() {
				events = append(events, e.Name)
			}
		}
	}
	if strings.Join(events, ",") != "lush.approval.requested,lush.approval.approved" {
		t.Errorf("span events %v", events)
	}
}

// Denied: the model reads who refused and why; nothing runs.
func TestApprovalDeniedCallIsRefused(t *testing.T) {
	h := approvalHarness(t, time.Minute, time.Hour)
	done := h.chatAsync("orchestrator", aliceKey, "ship it")
	ap := h.pendingApproval()
	if code, body := h.post("/approvals/"+ap.ID, carolKey, map[string]string{"decision": "deny", "reason": "not during the freeze"}); code != http.StatusOK {
		t.Fatalf("carol denies: %d %s", code, body)
	}
	res := <-done
	if len(res.Tools) != 1 || res.Tools[0].Status == "ok" || !strings.Contains(res.Tools[0].Error, "user:carol denied approval") ||
		!strings.Contains(res.Tools[0].Error, "not during the freeze") {
		t.Fatalf("tool calls after denial: %+v", res.Tools)
	}
	if h.writes() != 0 {
		t.Error("a denied write ran")
	}
	for _, r := range h.decisions() {
		if r.Event.DecisionID == ap.ID && (r.Completion == nil || r.Completion.Status != decisionlog.StatusApprovalDenied) {
			t.Errorf("the approval_required decision: %+v", r.Completion)
		}
	}
}

// A call that gives up waiting tells the model to repeat it once approved; approved later (with
// no call waiting, as after a restart), the same call runs at once, and only once. A different
// call is not covered by that approval.
func TestApprovalOutlivesTheWait(t *testing.T) {
	h := approvalHarness(t, 200*time.Millisecond, time.Hour)
	_, res, body := h.chat("orchestrator", aliceKey, "ship it")
	if len(res.Tools) != 1 || !strings.Contains(res.Tools[0].Error, "repeat exactly the same call") {
		t.Fatalf("the call that gave up waiting: %s", body)
	}
	ap := h.pendingApproval()
	if code, body := h.post("/approvals/"+ap.ID, carolKey, map[string]string{"decision": "approve"}); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	if h.writes() != 0 {
		t.Fatal("the write ran with no call waiting")
	}
	_, res, body = h.chat("orchestrator", aliceKey, "ship it")
	if len(res.Tools) != 1 || res.Tools[0].Outcome != "allow" || res.Tools[0].Status != "ok" || h.writes() != 1 {
		t.Fatalf("the repeated call: %s", body)
	}
	// Used up: the third attempt asks for a new approval.
	_, res, body = h.chat("orchestrator", aliceKey, "ship it")
	if len(res.Tools) != 1 || !strings.Contains(res.Tools[0].Error, "repeat exactly the same call") || h.writes() != 1 {
		t.Fatalf("a third attempt: %s", body)
	}
}

// Nobody decides before the approval expires: refused, recorded as expired.
func TestApprovalExpires(t *testing.T) {
	h := approvalHarness(t, 300*time.Millisecond, 300*time.Millisecond)
	_, res, body := h.chat("orchestrator", aliceKey, "ship it")
	if len(res.Tools) != 1 || res.Tools[0].Status == "ok" || h.writes() != 0 {
		t.Fatalf("an unapproved call: %s", body)
	}
	code, list := h.get("/approvals?status=expired", carolKey)
	var page approvalhttp.Page
	json.Unmarshal(list, &page)
	if code != http.StatusOK || len(page.Approvals) != 1 {
		t.Fatalf("expired approvals: %d %s", code, list)
	}
	if code, body := h.post("/approvals/"+page.Approvals[0].ID, carolKey, map[string]string{"decision": "approve"}); code != http.StatusConflict ||
		!strings.Contains(string(body), "expired") {
		t.Errorf("approving an expired approval: %d %s", code, body)
	}
}
