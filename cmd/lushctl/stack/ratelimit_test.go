package stack_test

import (
	"net/http"
	"strings"
	"testing"
)

// Rate limits go through the one decision: a tools/call over a tool's limit is refused to the
// model with the retry time, and an invocation over a principal's limit is answered 429 with
// Retry-After.
func TestRateLimits(t *testing.T) {
	h := start(t, harnessOpts{lushYAML: `rate_limits:
  - principal: user:carol
    rate: 1/h
  - tool: mcp://tests.internal/mcp
    rate: 1/h
    burst: 1
`})
	// The first echo is denied by a project policy, which takes no token; the second takes the
	// tool's only token.
	code, res, body := h.chat("researcher", aliceKey, "what do the notes say?")
	if code != http.StatusOK || len(res.Tools) != 2 || res.Tools[0].Outcome != "deny" || res.Tools[1].Outcome != "allow" {
		t.Fatalf("first chat: %d %s", code, body)
	}
	code, res, body = h.chat("researcher", aliceKey, "and now?")
	if code != http.StatusOK || len(res.Tools) != 2 {
		t.Fatalf("second chat: %d %s", code, body)
	}
	if second := res.Tools[1]; second.Outcome != "deny" || second.Status != "denied" ||
		!strings.Contains(second.Error, "rate limit mcp://tests.internal/mcp 1/h burst 1 exceeded: retry after ") {
		t.Errorf("tool calls: %+v", res.Tools)
	}
	limited := 0
	for _, r := range h.decisions() {
		if len(r.Event.Rules) == 1 && r.Event.Rules[0] == "lush.rate.limited" {
			limited++
		}
	}
	if limited != 1 {
		t.Errorf("%d rate-limited decisions in the log, want 1", limited)
	}

	// carol's one invocation an hour.
	if code, _, body := h.chat("orchestrator", carolKey, "hi"); code != http.StatusOK {
		t.Fatalf("carol's first chat: %d %s", code, body)
	}
	req, _ := http.NewRequest("POST", h.st.URL()+"/agents/orchestrator/chat", strings.NewReader(`{"message":"again"}`))
	req.Header.Set("X-API-Key", carolKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("carol's second chat: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
