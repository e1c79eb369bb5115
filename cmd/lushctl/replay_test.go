package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lush-agents/lush/audit/replay"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/test/projecttest"
)

// loggedDecisions builds the quickstart twice (the second build takes group:engineering's read
// grant on the filesystem away) and logs three decisions of the first build: bob's allowed read,
// carol's denied read, the digest bot's allowed clock.
func loggedDecisions(t *testing.T) (dir, old, next, logPath string) {
	t.Helper()
	ctx := context.Background()
	dir = quickstartCopy(t)
	build := func() string {
		r := lushctl(t, "", "build", "-q", "--offline", dir)
		if r.code != 0 {
			t.Fatalf("build: %s", r.stderr)
		}
		return strings.TrimSpace(r.stdout)
	}
	old = build()
	p := filepath.Join(dir, "lush.yaml")
	data, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.Replace(string(data), "      - principal: group:engineering\n        access: read\n", "", 1)), 0o644)
	next = build()

	_, bundle, err := buildstore.ForProject(dir).Load(old)
	if err != nil {
		t.Fatal(err)
	}
	eng := projecttest.Engine(t, bundle)
	logPath = filepath.Join(t.TempDir(), "decisions.db")
	dlog, err := decisionlog.Open(ctx, logPath)
	if err != nil {
		t.Fatal(err)
	}
	e := enforce.NewPolicy(enforce.Config{Environment: "dev", Log: dlog}).Enforcer("test")
	e.Policy().Set(eng)
	fs := "mcp://npx/@modelcontextprotocol/server-filesystem"
	call := func(p string, groups []string, agent, ref, name string) {
		v := e.Decide(ctx, authz.Input{Action: authz.ActionToolsCall, Principal: authz.Principal{ID: p, Groups: groups}, Agent: agent,
			Chain: []string{agent}, Depth: 1, Tool: &authz.Tool{Ref: ref, Name: name}, Arguments: map[string]any{"path": "q3.md"}})
		if !v.Recorded {
			t.Fatal("not recorded")
		}
	}
	call("user:bob", []string{"group:engineering"}, "researcher", fs, "read_text_file")   // allowed by the grant that goes away
	call("user:carol", []string{"group:contractors"}, "researcher", fs, "read_text_file") // denied before and after
	call("serviceaccount:digest-bot", nil, "researcher", "tools/clock", "")               // allowed before and after
	dlog.Close()

	return dir, old, next, logPath
}

// Logged decisions of one build, replayed under a build that takes a grant away: the decisions
// that grant made are listed as changing, the others are not.
func TestAuditReplay(t *testing.T) {
	dir, old, next, logPath := loggedDecisions(t)
	fs := "mcp://npx/@modelcontextprotocol/server-filesystem"
	r := lushctl(t, "", "audit", "replay", "--log", logPath, "--bundle", next[:10], "-C", dir, "-o", "json")
	var sum replay.Summary
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || r.code != 0 {
		t.Fatalf("replay: %d %v %s %s", r.code, err, r.stdout, r.stderr)
	}
	if sum.Replayed != 3 || len(sum.Changed) != 1 || sum.Changed[0].Principal != "user:bob" || sum.Changed[0].Was != "allow" || sum.Changed[0].Now != "deny" {
		t.Errorf("replay: %+v", sum)
	}
	if r := lushctl(t, "", "audit", "replay", "--log", logPath, "--bundle", next, "-C", dir, "--fail-on-change"); r.code != exitFailed ||
		!strings.Contains(r.stdout, "1 would change") {
		t.Errorf("--fail-on-change: %d %s", r.code, r.stdout)
	}
	if r := lushctl(t, "", "audit", "replay", "--log", logPath, "--bundle", old, "-C", dir, "--fail-on-change"); r.code != 0 {
		t.Errorf("the same build: %d %s", r.code, r.stdout)
	}
	if r := lushctl(t, "", "audit", "replay", "--log", logPath, "-C", dir); r.code != exitUsage || !strings.Contains(r.stderr, "--bundle is required") {
		t.Errorf("no bundle: %d %s", r.code, r.stderr)
	}

	// Query filters over the same log.
	count := func(args ...string) int {
		t.Helper()
		r := lushctl(t, "", append([]string{"audit", "query", "--log", logPath, "-o", "json"}, args...)...)
		if r.code != 0 {
			t.Fatalf("query %v: %d %s", args, r.code, r.stderr)
		}
		return strings.Count(r.stdout, "\n")
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--group", "group:engineering"}, 1},
		{[]string{"--group", "serviceaccount:digest-bot"}, 1},
		{[]string{"--text", "q3.md"}, 3},
		{[]string{"--text", "nowhere"}, 0},
		{[]string{"--access", "read"}, 3},
		{[]string{"--outcome", "live_write"}, 0},
		{[]string{"--writes"}, 0},
		{[]string{"--before", "3"}, 2},
	} {
		if got := count(tc.args...); got != tc.want {
			t.Errorf("query %v: %d decisions, want %d", tc.args, got, tc.want)
		}
	}
	r = lushctl(t, "", "audit", "query", "--log", logPath, "-o", "csv", "-n", "2")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "seq,time,decision_id,point,principal") || strings.Count(r.stdout, "\n") != 3 ||
		!strings.Contains(r.stderr, "there may be more: --before 2") {
		t.Errorf("csv: %d %s %s", r.code, r.stdout, r.stderr)
	}

	// The usage report of the same log, against the old build.
	r = lushctl(t, "", "audit", "report", "--log", logPath, "-C", dir, "--build", old)
	for _, want := range []string{"3 decisions", fs + " (read_text_file)  2", "user:carol", "DECLARED BUT NOT USED", "orchestrator: lush://researcher", "GRANTS NOT USED"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("report: no %q in %d\n%s%s", want, r.code, r.stdout, r.stderr)
		}
	}
	r = lushctl(t, "", "audit", "report", "--log", logPath, "-o", "json")
	var rep struct{ Decisions int }
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Decisions != 3 {
		t.Errorf("report json: %v %s", err, r.stdout)
	}
}
