package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lush-agents/lush/gateway/budgethttp"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/test/projecttest"
)

// TestBudgetCommands: lushctl budget show and top-up against the real budgets API, policy and
// decision log: usage as the enforcer charged it, a top-up that takes effect, and refusals with
// lushctl's exit codes.
func TestBudgetCommands(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for rel, content := range map[string]string{
		"agents/helper/spec.yaml": "name: helper\nmodel: gemini-2.5-flash\ndescription: Helps.\ntools:\n" +
			"  - server: mcp://tests.internal/mcp\n    access: read\nacl:\n  - {principal: group:eng, role: execute}\n",
		"lush.yaml": `project: budget-cli
tool_classes:
  mcp://tests.internal/mcp: {echo: read}
tool_grants:
  - tool: mcp://tests.internal/mcp
    grants:
      - {principal: group:eng, access: read}
budgets:
  - name: helper-calls
    agent: helper
    tool_calls: 1
    per: day
  - name: eng-calls
    principal: group:eng
    tool_calls: 100
    per: month
roles:
  budget: [user:fay]
`,
	} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, eng := projecttest.Build(t, dir)
	log, err := decisionlog.Open(ctx, filepath.Join(t.TempDir(), "d.db"), decisionlog.CheckpointEvery(0))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	policy := enforce.NewPolicy(enforce.Config{Log: log})
	policy.Set(eng)
	calls, api := policy.Enforcer("test"), policy.Enforcer(budgethttp.Point)
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	auth, err := identity.New(ctx, identity.Config{APIKeys: []identity.APIKeyConfig{
		{Name: "fay", SHA256: sum("fay-key-0123456789"), Principal: "user:fay"},
		{Name: "bob", SHA256: sum("bob-key-0123456789"), Principal: "user:bob", Groups: []string{"group:eng"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()
	srv, err := budgethttp.New(budgethttp.Config{Store: log, Decider: api, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	call := authz.Input{Action: authz.ActionToolsCall, Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:eng"}}, Agent: "helper",
		Tool: &authz.Tool{Ref: "mcp://tests.internal/mcp", Name: "echo"}}
	if v := calls.Decide(ctx, call); !v.Allow {
		t.Fatalf("first call: %+v", v.Decision)
	}
	if v := calls.Decide(ctx, call); v.Allow {
		t.Fatal("second call allowed over helper-calls")
	}

	fay := []string{"--url", ts.URL, "--token", "fay-key-0123456789"}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"show", append([]string{"budget", "show"}, fay...), exitOK, []string{
			"BUDGET        SUBJECT   UNIT        USED  LIMIT      GRANTED  REMAINING  RESETS",
			"eng-calls     user:bob  tool calls  1     100/month  0        99",
			"helper-calls  helper    tool calls  1     1/day      0        0"}},
		{"show one as json", append([]string{"budget", "show", "--budget", "helper-calls", "-o", "json"}, fay...), exitOK, []string{`"subject": "helper"`, `"remaining": 0`}},
		{"show unknown", append([]string{"budget", "show", "--budget", "nope"}, fay...), exitFailed, []string{`there is no budget "nope"; the budgets are: eng-calls, helper-calls`}},
		{"show without the role", []string{"budget", "show", "--url", ts.URL, "--token", "bob-key-0123456789"}, exitFailed, []string{"may not read budget usage", "(decision "}},
		{"top-up without the role", []string{"budget", "top-up", "helper-calls", "--amount", "1", "--reason", "x", "--url", ts.URL, "--token", "bob-key-0123456789"},
			exitFailed, []string{"may not top budgets up", "(decision "}},
		{"top-up without reason", append([]string{"budget", "top-up", "helper-calls", "--amount", "1"}, fay...), exitUsage, []string{"--reason is required"}},
		{"top-up of a group budget needs a subject", append([]string{"budget", "top-up", "eng-calls", "--amount", "5", "--reason", "x"}, fay...), exitUsage, []string{"subject is required"}},
		{"top-up", append([]string{"budget", "top-up", "helper-calls", "--amount", "2", "--reason", "demo day"}, fay...), exitOK,
			[]string{"✓ budget helper-calls topped up by 2 tool calls for helper (decision ", "1 of 3 used this day, 2 remaining"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lushctl(t, "", tt.args...)
			for _, w := range tt.want {
				if r.code != tt.code || !strings.Contains(r.stdout+r.stderr, w) {
					t.Errorf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", r.code, tt.code, w, r.stdout, r.stderr)
				}
			}
		})
	}
	// The top-up took effect at once in the process's ledger.
	if v := calls.Decide(ctx, call); !v.Allow {
		t.Fatalf("call after the top-up: %+v", v.Decision)
	}
}
