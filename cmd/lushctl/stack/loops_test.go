package stack_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/scheduler"
)

// TestLoopsAPI: the scheduler's API decides loop/read and loop/trigger with the shared policy,
// logs those decisions, and a manual firing runs the loop's agent as its service account.
func TestLoopsAPI(t *testing.T) {
	h := start(t, harnessOpts{scheduler: true})

	type errorBody struct {
		Error struct {
			Code       string `json:"code"`
			Message    string `json:"message"`
			DecisionID string `json:"decision_id"`
			Reasons    []struct {
				Rule string `json:"rule"`
			} `json:"reasons"`
		} `json:"error"`
	}
	refused := func(code int, body []byte, wantCode int, wantRule string) {
		t.Helper()
		var e errorBody
		json.Unmarshal(body, &e)
		if code != wantCode || e.Error.DecisionID == "" || len(e.Error.Reasons) == 0 || e.Error.Reasons[0].Rule != wantRule {
			t.Errorf("answer %d %s, want %d with rule %s and a decision id", code, body, wantCode, wantRule)
		}
	}
	list := func(key string) []string {
		t.Helper()
		code, body := h.get("/loops", key)
		var resp struct{ Loops []scheduler.LoopInfo }
		if code != http.StatusOK || json.Unmarshal(body, &resp) != nil {
			t.Fatalf("GET /loops: %d %s", code, body)
		}
		var names []string
		for _, l := range resp.Loops {
			names = append(names, l.Name)
		}
		return names
	}

	if code, _ := h.get("/loops", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /loops without credentials: %d", code)
	}
	if got := list(carolKey); len(got) != 1 || got[0] != "notes" {
		t.Errorf("carol (read) lists %v", got)
	}
	if got := list(daveKey); len(got) != 0 {
		t.Errorf("dave (nothing) lists %v", got)
	}
	code, body := h.get("/loops/notes/history", daveKey)
	refused(code, body, http.StatusForbidden, "lush.acl.no_loop_read")
	code, body = h.post("/loops/notes/trigger", carolKey, map[string]any{})
	refused(code, body, http.StatusForbidden, "lush.acl.no_loop_execute")
	code, body = h.post("/loops/nope/trigger", aliceKey, map[string]any{})
	refused(code, body, http.StatusNotFound, "lush.loop.unknown")
	if code, body := h.post("/loops/notes/trigger", aliceKey, map[string]any{"instructions": "typo"}); code != http.StatusBadRequest {
		t.Errorf("unknown field: %d %s", code, body)
	}

	code, body = h.post("/loops/notes/trigger", aliceKey, map[string]any{"instruction": "Look at Q3 only", "wait": true})
	var trig struct {
		DecisionID string           `json:"decision_id"`
		Firing     scheduler.Firing `json:"firing"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &trig) != nil {
		t.Fatalf("trigger: %d %s", code, body)
	}
	f := trig.Firing
	if f.Status != scheduler.StatusSucceeded || f.Trigger != scheduler.TriggerManual || f.TriggeredBy != "user:alice" ||
		f.Instruction != "Look at Q3 only" || f.DecisionID == "" || f.Revision != h.hash || f.Response == "" {
		t.Fatalf("firing = %+v", f)
	}

	// The log holds alice's loop/trigger decision and the invocation, as the service account.
	var sawTrigger, sawInvoke bool
	for _, r := range h.decisions() {
		e := r.Event
		switch e.DecisionID {
		case trig.DecisionID:
			var in struct{ Loop string }
			json.Unmarshal(e.Input, &in)
			sawTrigger = e.Action == "loop/trigger" && e.Principal == "user:alice" && e.Outcome == "allow" && in.Loop == "notes" && e.Point == scheduler.Point
		case f.DecisionID:
			sawInvoke = e.Action == "agent/invoke" && e.Agent == "researcher" && e.Principal == "serviceaccount:notes-bot" &&
				e.Outcome == "allow" && r.Completion != nil && r.Completion.Status == decisionlog.StatusOK
		}
	}
	if !sawTrigger || !sawInvoke {
		t.Errorf("decision log: loop/trigger by alice %v, agent/invoke as notes-bot %v", sawTrigger, sawInvoke)
	}

	// The firing is counted, and its lag observed.
	_, metrics := h.get("/metrics", aliceKey)
	for _, want := range []string{`lush_loop_firings_total{loop="notes",status="succeeded"} 1`, "lush_loop_firing_lag_seconds_count 1"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// carol may read the history and sees alice's firing.
	code, body = h.get("/loops/notes/history?limit=5", carolKey)
	var hist struct{ Firings []scheduler.Firing }
	if code != http.StatusOK || json.Unmarshal(body, &hist) != nil || len(hist.Firings) != 1 || hist.Firings[0].DecisionID != f.DecisionID {
		t.Fatalf("history: %d %s", code, body)
	}
	if code, body := h.get("/loops/notes/history?limit=0", carolKey); code != http.StatusBadRequest {
		t.Errorf("limit=0: %d %s", code, body)
	}
}
