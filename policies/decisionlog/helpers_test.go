package decisionlog

import (
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/authz"
)

// sampleEvent returns an event with every field set, as the MCP gateway would log an allowed,
// stubbed write.
func sampleEvent(id string) *Event {
	return &Event{
		DecisionID: id,
		Path:       DefaultPath,
		Input: json.RawMessage(`{"action":"tools/call","principal":{"id":"user:alice","groups":["group:engineering"]},` +
			`"agent":"researcher","chain":["orchestrator","researcher"],"depth":2,` +
			`"tool":{"ref":"mcp://npx/@modelcontextprotocol/server-filesystem","name":"write_file","access":"write"},` +
			`"arguments":{"path":"data/q3.md","content":"<h1>Q3 & more</h1>"},"live_writes":false,"environment":"prod"}`),
		Result: json.RawMessage(`{"allow":true,"outcome":"stub","stub":true,"approval_required":false,"access":"write",` +
			`"risk":"write","reasons":[],"approvals":[],"rules":["lush.acl.agent_execute","lush.capability.allowlist",` +
			`"lush.privilege.tool_grant","lush.writes.stub"],"revision":"4f1c2a9b7e3d"}`),
		Timestamp:   time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.UTC),
		Labels:      map[string]string{"id": "gw-1", "version": "0.1.0", "environment": "prod"},
		Bundles:     map[string]Bundle{"lush": {Revision: "4f1c2a9b7e3d5f60"}},
		Metrics:     map[string]int64{"timer_lush_decision_ns": 81234},
		Erased:      []string{"/input/arguments/token"},
		Masked:      []string{"/input/arguments/password"},
		Revision:    "4f1c2a9b7e3d5f60",
		Point:       "mcp-gateway",
		Principal:   "user:alice",
		Groups:      []string{"group:engineering"},
		Agent:       "researcher",
		Chain:       []string{"orchestrator", "researcher"},
		Action:      "tools/call",
		Tool:        "mcp://npx/@modelcontextprotocol/server-filesystem",
		ToolName:    "write_file",
		Access:      "write",
		Risk:        "write",
		Outcome:     authz.OutcomeStub,
		Rules:       []string{"lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant", "lush.writes.stub"},
		LatencyNS:   81234,
		Environment: "prod",
		TraceID:     "4bf92f3577b34da6a3ce929d0e0e4736",
		SpanID:      "00f067aa0ba902b7",
		Error:       "",
		Parent:      "0193e4a8-7b1c-7def-8000-000000000001",
		Credential:  &CredentialUse{Type: "oauth", Obtained: "exchange", Source: "token exchange at https://login.example.com", Act: []string{"agent:researcher", "agent:orchestrator"}},
	}
}

func openLog(t testing.TB, opts ...Option) *Log {
	t.Helper()
	l, err := Open(context.Background(), filepath.Join(t.TempDir(), "logs", "decisions.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// noLeaks fails t if any goroutine of this package or of database/sql is still running after
// Close (it retries briefly: exiting goroutines take a moment to disappear).
func noLeaks(t *testing.T) {
	t.Helper()
	var stacks string
	for range 100 {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		leaked := false
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "decisionlog.(*Log)") || strings.Contains(g, "database/sql.(*DB)") {
				leaked = true
			}
		}
		if !leaked {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("goroutines left after Close:\n%s", stacks)
}
