package stack_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestFailedAuthenticationsAtEveryAPI: a wrong API key is refused by every API of the process, each
// refusal is counted in /metrics by method and reason, and the process logs it once (one report
// of failures for the whole process: one line per source address and reason per interval), with
// the source address and without the key.
func TestFailedAuthenticationsAtEveryAPI(t *testing.T) {
	h := start(t, harnessOpts{scheduler: true})
	const wrongKey = "mallory-key-0123456789"
	routes := []string{"/gateway/agents/researcher/mcp", "/agents/researcher/status", "/agents", "/loops", "/approvals", "/budgets", "/audit/decisions"}
	for _, path := range routes {
		if code, body := h.get(path, wrongKey); code != 401 {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
	_, metrics := h.get("/metrics", "")
	if want := fmt.Sprintf("lush_authentication_failures_total{method=\"apikey\",reason=\"unknown_api_key\"} %d\n", len(routes)); !strings.Contains(string(metrics), want) {
		t.Errorf("not counted as %s", want)
	}
	logs := h.logs.String()
	var lines []string
	for l := range strings.Lines(logs) {
		if strings.Contains(l, `msg="authentication failed"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "source=127.0.0.1 ") ||
		!strings.Contains(lines[0], "reason=unknown_api_key") || !strings.Contains(lines[0], "method=apikey") {
		t.Errorf("logged %q, want one WARN line with the source and the reason", lines)
	}
	if strings.Contains(logs, wrongKey) || strings.Contains(string(metrics), wrongKey) {
		t.Error("the key is in the log or the metrics")
	}
}
