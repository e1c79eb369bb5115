package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/decisionlog"
)

// The write audit trail shows when, which agent, for whom, which tool, whether it ran, the
// arguments, the response and the environment.
func TestWriteTrail(t *testing.T) {
	recs := []decisionlog.Record{
		{Seq: 2, Event: decisionlog.Event{DecisionID: "d-2", Timestamp: time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC), Agent: "orchestrator",
			Principal: "serviceaccount:digest-bot", Tool: "mcp://fs", ToolName: "write_file", Outcome: "allow", Environment: "prod",
			Input: json.RawMessage(`{"arguments":{"path":"drafts/q3.md"}}`)},
			Completion: &decisionlog.Completion{Status: "ok", Response: json.RawMessage(`{"content":[{"type":"text","text":"wrote"}]}`)}},
		{Seq: 1, Event: decisionlog.Event{DecisionID: "d-1", Timestamp: time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC), Agent: "orchestrator",
			Principal: "user:bob", Tool: "mcp://fs", ToolName: "write_file", Outcome: "stub", Environment: "prod", Input: json.RawMessage(`{}`)},
			Completion: &decisionlog.Completion{Status: "stubbed"}},
	}
	var b bytes.Buffer
	if err := writeTrail(&b, recs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"live/ok", `{"path":"drafts/q3.md"}`, `{"content":[{"type":"text","text":"wrote"}]}`, "prod", "stub/stubbed", "(not logged)"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	b.Reset()
	if err := writeCSV(&b, recs, true); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME,AGENT,PRINCIPAL") ||
		!strings.Contains(lines[1], `"{""path"":""drafts/q3.md""}"`) {
		t.Errorf("csv:\n%s", b.String())
	}
}
