package report_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/audit/report"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/test/projecttest"
)

const fs = "mcp://npx/@modelcontextprotocol/server-filesystem"

// Decisions made with the quickstart's policy and their completions, summarised.
func TestReport(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../../examples/quickstart")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, ".lush"))
	res, eng := projecttest.Build(t, dir)
	logPath := filepath.Join(t.TempDir(), "decisions.db")
	dlog, err := decisionlog.Open(ctx, logPath)
	if err != nil {
		t.Fatal(err)
	}
	e := enforce.NewPolicy(enforce.Config{Environment: "dev", Log: dlog}).Enforcer("test")
	e.Policy().Set(eng)
	call := func(p string, groups []string, name, status string, ms int) {
		v := e.Decide(ctx, authz.Input{Action: authz.ActionToolsCall, Principal: authz.Principal{ID: p, Groups: groups}, Agent: "researcher",
			Chain: []string{"researcher"}, Depth: 1, Tool: &authz.Tool{Ref: fs, Name: name}})
		if v.Allow && status != "" {
			v.Complete(status, time.Duration(ms)*time.Millisecond, nil, "")
		}
	}
	for i := range 18 {
		call("user:bob", []string{"group:engineering"}, "read_text_file", decisionlog.StatusOK, 10+i)
	}
	call("user:bob", []string{"group:engineering"}, "read_text_file", decisionlog.StatusError, 500)
	call("user:bob", []string{"group:engineering"}, "read_text_file", decisionlog.StatusTimeout, 900)
	call("user:carol", []string{"group:contractors"}, "read_text_file", "", 0) // denied: no grant
	inv := e.Decide(ctx, authz.Input{Action: authz.ActionAgentInvoke, Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}},
		Agent: "researcher", Chain: []string{"researcher"}, Depth: 1})
	inv.CompleteInvocation(decisionlog.StatusOK, time.Second, 1200, 300, "")
	if err := dlog.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := decisionlog.OpenReader(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err := report.Compute(ctx, r, decisionlog.Filter{}, res.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decisions != 22 || len(rep.Tools) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	tool := rep.Tools[0]
	if tool.Calls != 21 || tool.Allowed != 20 || tool.Denied != 1 || tool.Errors != 2 || tool.ErrRate != 0.1 || tool.Reads != 21 ||
		tool.P50MS < 10 || tool.P50MS > 30 || tool.P95MS < 500 {
		t.Errorf("tool: %+v", tool)
	}
	if len(rep.Agents) != 1 || rep.Agents[0].Invocations != 1 || rep.Agents[0].TokensIn != 1200 || rep.Agents[0].TokensOut != 300 {
		t.Errorf("agents: %+v", rep.Agents)
	}
	if len(rep.Principals) != 2 || rep.Principals[0].Principal != "user:bob" || rep.Principals[1].Denied != 1 {
		t.Errorf("principals: %+v", rep.Principals)
	}
	if !slices.Contains(rep.Unused, "researcher: tools/clock") || slices.Contains(rep.Unused, "researcher: "+fs) {
		t.Errorf("unused tools: %v", rep.Unused)
	}
	if !slices.ContainsFunc(rep.UnusedGrants, func(s string) bool { return strings.HasPrefix(s, fs+": user:alice") }) ||
		slices.ContainsFunc(rep.UnusedGrants, func(s string) bool { return strings.HasPrefix(s, fs+": group:engineering") }) {
		t.Errorf("unused grants: %v", rep.UnusedGrants)
	}
}
