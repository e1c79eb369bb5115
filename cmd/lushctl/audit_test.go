package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/test/syncbuf"
)

// auditRun runs lushctl like run does, with the audit command added when main.go does not wire
// it yet, and returns the exit code.
func auditRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	if cmd, _, err := root.Find([]string{"audit"}); err != nil || cmd == root {
		root.AddCommand(newAuditCmd())
	}
	root.SetArgs(args)
	root.SetIn(strings.NewReader(""))
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "lushctl:", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "lushctl:", err)
	return exitRuntime
}

func audit(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := auditRun(context.Background(), args, &out, &errb)
	return result{code, out.String(), errb.String()}
}

var auditBase = time.Date(2020, 5, 1, 12, 0, 0, 0, time.UTC)

// auditLog writes a decision log with four decisions, one minute apart, the first completed.
func auditLog(t *testing.T, path string) *decisionlog.Log {
	t.Helper()
	ctx := context.Background()
	l, err := decisionlog.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	events := []*decisionlog.Event{
		{DecisionID: "3f2a9c1e-0000-4000-8000-000000000001", Principal: "user:alice", Agent: "researcher", Action: "tools/call",
			Tool: "mcp://fs", ToolName: "read_text_file", Outcome: "allow", Rules: []string{"lush.acl.agent_execute", "lush.capability.allowlist"},
			Input: json.RawMessage(`{"arguments":{"path":"<q3>.md"}}`)},
		{DecisionID: "4b7d0a2f-0000-4000-8000-000000000002", Principal: "user:bob", Agent: "researcher", Action: "tools/call",
			Tool: "mcp://fs", ToolName: "write_file", Outcome: "deny", Rules: []string{"lush.privilege.access_exceeded"}},
		{DecisionID: "5c8e1b30-0000-4000-8000-000000000003", Principal: "serviceaccount:digest-bot", Action: "loop/trigger", Outcome: "allow",
			Rules: []string{"lush.acl.loop_execute"}},
		{DecisionID: "6d9f2c41-0000-4000-8000-000000000004", Principal: "user:alice", Agent: "writer", Action: "tools/call",
			Tool: "tools/shell", Outcome: "stub", Rules: []string{"lush.writes.stub"}},
	}
	for i, e := range events {
		e.Timestamp = auditBase.Add(time.Duration(i) * time.Minute)
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Complete(ctx, &decisionlog.Completion{DecisionID: events[0].DecisionID, Status: "ok", LatencyNS: 1500}); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestAuditQueryText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.db")
	auditLog(t, path)
	r := audit(t, "audit", "query", "--log", path)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	want := []string{
		"TIME                      POINT  OUTCOME  RESULT  PRINCIPAL                  AGENT       TOOL                       DECISION ID                           RULES",
		"2020-05-01T12:03:00.000Z  -      stub     -       user:alice                 writer      tools/shell                6d9f2c41-0000-4000-8000-000000000004  lush.writes.stub",
		"2020-05-01T12:02:00.000Z  -      allow    -       serviceaccount:digest-bot  -           -                          5c8e1b30-0000-4000-8000-000000000003  lush.acl.loop_execute",
		"2020-05-01T12:01:00.000Z  -      deny     -       user:bob                   researcher  mcp://fs (write_file)      4b7d0a2f-0000-4000-8000-000000000002  lush.privilege.access_exceeded",
		"2020-05-01T12:00:00.000Z  -      allow    ok      user:alice                 researcher  mcp://fs (read_text_file)  3f2a9c1e-0000-4000-8000-000000000001  lush.acl.agent_execute,lush.capability.allowlist",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nwant:\n%s", r.stdout, strings.Join(want, "\n"))
	}
	// Filters; a prefix of the id works as --decision-id.
	tests := []struct {
		args []string
		want []string // short ids, in order
	}{
		{[]string{"--principal", "user:alice"}, []string{"6d9f2c41", "3f2a9c1e"}},
		{[]string{"--agent", "researcher", "--oldest"}, []string{"3f2a9c1e", "4b7d0a2f"}},
		{[]string{"--tool", "mcp://fs", "--outcome", "deny"}, []string{"4b7d0a2f"}},
		{[]string{"--tool-name", "read_text_file"}, []string{"3f2a9c1e"}},
		{[]string{"--action", "loop/trigger"}, []string{"5c8e1b30"}},
		{[]string{"--decision-id", "4b7d0a2f"}, []string{"4b7d0a2f"}},
		{[]string{"--since", "2020-05-01T12:02:00Z"}, []string{"6d9f2c41", "5c8e1b30"}},
		{[]string{"--until", "2020-05-01T12:01:00Z"}, []string{"3f2a9c1e"}},
		{[]string{"-n", "1"}, []string{"6d9f2c41"}},
	}
	for _, tc := range tests {
		r := audit(t, append([]string{"audit", "query", "--log", path}, tc.args...)...)
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
			f := strings.Fields(line)
			got = append(got, f[len(f)-2][:8])
		}
		if r.code != 0 || strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%v: exit %d, got %v, want %v (%s)", tc.args, r.code, got, tc.want, r.stderr)
		}
	}
	// --since as a duration: every event is older than an hour.
	r = audit(t, "audit", "query", "--log", path, "--since", "1h")
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no decisions in "+path+" match") {
		t.Errorf("--since 1h: %+v", r)
	}
}

func TestAuditQueryJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.db")
	auditLog(t, path)
	r := audit(t, "audit", "query", "--log", path, "-o", "json", "--principal", "user:alice")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), r.stdout)
	}
	var recs []decisionlog.Record
	for _, line := range lines {
		var rec decisionlog.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		recs = append(recs, rec)
	}
	if recs[0].Seq != 4 || recs[1].Seq != 1 || recs[1].Event.DecisionID != "3f2a9c1e-0000-4000-8000-000000000001" {
		t.Errorf("records %+v", recs)
	}
	if c := recs[1].Completion; c == nil || c.Status != "ok" || c.LatencyNS != 1500 {
		t.Errorf("completion %+v", c)
	}
	if recs[0].Completion != nil || strings.Contains(lines[0], `"completion"`) {
		t.Errorf("no completion expected: %s", lines[0])
	}
	if !strings.Contains(lines[1], `"input":{"arguments":{"path":"<q3>.md"}}`) || !strings.Contains(lines[1], `"enforcement_point":""`) {
		t.Errorf("event JSON: %s", lines[1])
	}
	// Nothing matches: no lines, exit 0.
	r = audit(t, "audit", "query", "--log", path, "-o", "json", "--principal", "user:nobody")
	if r.code != 0 || r.stdout != "" {
		t.Errorf("no match: %+v", r)
	}
}

func TestAuditLogLocation(t *testing.T) {
	dir := t.TempDir()
	auditLog(t, filepath.Join(dir, ".lush", "decisions.db"))
	other := filepath.Join(t.TempDir(), "elsewhere.db")
	auditLog(t, other)
	t.Chdir(dir)
	if r := audit(t, "audit", "query", "-n", "1"); r.code != 0 || !strings.Contains(r.stdout, "6d9f2c41") {
		t.Errorf("default path: %+v", r)
	}
	t.Setenv("LUSH_DECISION_LOG", filepath.Join(dir, "nope.db"))
	r := audit(t, "audit", "query")
	if r.code != exitRuntime || !strings.Contains(r.stderr, "no decision log at "+filepath.Join(dir, "nope.db")) {
		t.Errorf("env path: %+v", r)
	}
	if r := audit(t, "audit", "tail", "--log", other, "-n", "1"); r.code != 0 || !strings.Contains(r.stdout, "6d9f2c41") {
		t.Errorf("--log beats the environment: %+v", r)
	}
	t.Setenv("LUSH_DECISION_LOG", "")
	t.Chdir(t.TempDir())
	for _, sub := range []string{"query", "tail"} {
		r := audit(t, "audit", sub)
		if r.code != exitRuntime || !strings.Contains(r.stderr, "no decision log at ") || !strings.Contains(r.stderr, filepath.Join(".lush", "decisions.db")) {
			t.Errorf("%s without a log: %+v", sub, r)
		}
	}
}

func TestAuditUsageErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.db")
	auditLog(t, path)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"query", "--outcome", "allowed"}, "--outcome must be one of allow, deny, stub, approval_required, error or live_write, not \"allowed\""},
		{[]string{"query", "--since", "yesterday"}, "--since must be a duration ago (90s, 1h, 7d) or an RFC 3339 time"},
		{[]string{"query", "--until", "-1h"}, "--until must be a positive duration"},
		{[]string{"query", "--since", "2026-05-02T00:00:00Z", "--until", "2026-05-01T00:00:00Z"}, "--since (2026-05-02T00:00:00Z) must be before --until"},
		{[]string{"query", "--limit", "0"}, "--limit must be between 1 and 10000, not 0"},
		{[]string{"tail", "-n", "10001"}, "--limit must be between 1 and 10000, not 10001"},
		{[]string{"query", "-o", "yaml"}, "--output must be text or json"},
		{[]string{"query", "extra"}, "unknown command \"extra\""},
		{[]string{"tail", "extra"}, "unknown command \"extra\""},
		{[]string{"query", "--nope"}, "unknown flag: --nope"},
	}
	for _, tc := range tests {
		r := audit(t, append([]string{"audit"}, append(tc.args, "--log", path)...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	// 7d is a duration too.
	if r := audit(t, "audit", "query", "--log", path, "--since", "7d"); r.code != 0 {
		t.Errorf("--since 7d: %+v", r)
	}
}

func TestAuditHelp(t *testing.T) {
	for _, sub := range []string{"query", "tail"} {
		r := audit(t, "audit", sub, "--help")
		if r.code != 0 || !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "lushctl audit "+sub) ||
			!strings.Contains(r.stdout, "LUSH_DECISION_LOG") {
			t.Errorf("%s --help: %+v", sub, r)
		}
	}
	if r := audit(t, "audit"); r.code != 0 || !strings.Contains(r.stdout, "query") || !strings.Contains(r.stdout, "tail") {
		t.Errorf("audit: %+v", r)
	}
}

func TestAuditTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.db")
	auditLog(t, path)
	r := audit(t, "audit", "tail", "--log", path, "-n", "2")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME") ||
		!strings.Contains(lines[1], "5c8e1b30-") || !strings.Contains(lines[2], "6d9f2c41-") {
		t.Errorf("tail -n 2 (oldest first): %+v", r)
	}
	r = audit(t, "audit", "tail", "--log", path, "-o", "json", "--outcome", "allow")
	var seqs []int64
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var rec decisionlog.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		seqs = append(seqs, rec.Seq)
	}
	if r.code != 0 || fmt.Sprint(seqs) != "[1 3]" {
		t.Errorf("tail json: seqs %v, %+v", seqs, r)
	}
	if r := audit(t, "audit", "tail", "--log", path, "--principal", "user:nobody"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no decisions") {
		t.Errorf("tail, no match: %+v", r)
	}
}

func TestAuditTailFollow(t *testing.T) {
	for _, output := range []string{"text", "json"} {
		t.Run(output, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "decisions.db")
			l := auditLog(t, path)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out, errb syncbuf.Buffer
			done := make(chan int, 1)
			go func() {
				done <- auditRun(ctx, []string{"audit", "tail", "--log", path, "-f", "-n", "1", "--principal", "user:carol", "-o", output}, &out, &errb)
			}()
			record := func(id, principal string) {
				e := &decisionlog.Event{DecisionID: id, Principal: principal, Action: "tools/call", Tool: "tools/clock", Outcome: "allow", Rules: []string{"lush.x"}}
				if err := l.Record(context.Background(), e); err != nil {
					t.Fatal(err)
				}
			}
			waitOutput := func(want string) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for !strings.Contains(out.String(), want) {
					if time.Now().After(deadline) {
						t.Fatalf("no %q in output:\n%s\nstderr: %s", want, out.String(), errb.String())
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			if output == "text" {
				waitOutput("DECISION ID") // the header shows it is running
			}
			record("c0ffee01-new", "user:carol")
			record("b0b00001-other", "user:bob")
			waitOutput("c0ffee01")
			// A burst more than one poll apart, in order, each printed once.
			for i := range 5 {
				record(fmt.Sprintf("c0ffee1%d-burst", i), "user:carol")
			}
			waitOutput("c0ffee14")
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("exit %d: %s", code, errb.String())
				}
			case <-time.After(5 * time.Second):
				t.Fatal("tail --follow did not stop when its context ended")
			}
			got := out.String()
			if strings.Contains(got, "b0b00001") {
				t.Errorf("printed a decision the filter excludes:\n%s", got)
			}
			var order []string
			for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
				for _, id := range []string{"c0ffee01", "c0ffee10", "c0ffee11", "c0ffee12", "c0ffee13", "c0ffee14"} {
					if strings.Contains(line, id) {
						order = append(order, id)
					}
				}
			}
			if strings.Join(order, " ") != "c0ffee01 c0ffee10 c0ffee11 c0ffee12 c0ffee13 c0ffee14" {
				t.Errorf("printed %v:\n%s", order, got)
			}
		})
	}
}
