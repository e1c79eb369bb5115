package authz_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/test/projecttest"
)

var (
	buildOnce   sync.Once
	builtBundle []byte
	buildErr    error
)

// quickstart builds examples/quickstart once for all tests.
func quickstart(t testing.TB) []byte {
	t.Helper()
	buildOnce.Do(func() {
		res, err := compiler.Build(context.Background(), "../../examples/quickstart", compiler.Offline(true))
		if err != nil {
			buildErr = err
			return
		}
		if !res.OK() {
			buildErr = &buildFailure{res}
			return
		}
		builtBundle = res.Bundle
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBundle
}

type buildFailure struct{ res *compiler.Result }

func (b *buildFailure) Error() string {
	var s []string
	for _, d := range b.res.Diagnostics {
		s = append(s, d.String())
	}
	return "quickstart does not build:\n" + strings.Join(s, "\n")
}

const fs = "mcp://npx/@modelcontextprotocol/server-filesystem"

func engine(t testing.TB) *authz.Engine {
	t.Helper()
	e, err := authz.FromBytes(context.Background(), quickstart(t), authz.Timeout(projecttest.DecisionTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestDecisions(t *testing.T) {
	e := engine(t)
	eng := authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}
	bot := authz.Principal{ID: "serviceaccount:digest-bot"}
	tests := []struct {
		name    string
		in      authz.Input
		outcome string
		rules   []string
	}{
		{"read allowed", authz.Input{Action: "tools/call", Principal: eng, Agent: "researcher",
			Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}, Arguments: map[string]any{"path": "q3.md"}},
			"allow", []string{"lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant"}},
		{"write without grant denied", authz.Input{Action: "tools/call", Principal: eng, Agent: "orchestrator",
			Tool: &authz.Tool{Ref: fs, Name: "write_file"}, Arguments: map[string]any{"path": "drafts/x.md"}},
			"deny", []string{"lush.privilege.access_exceeded"}},
		{"write stubbed", authz.Input{Action: "tools/call", Principal: bot, Agent: "orchestrator",
			Tool: &authz.Tool{Ref: fs, Name: "write_file"}, Arguments: map[string]any{"path": "drafts/x.md"}},
			"stub", nil},
		{"write live", authz.Input{Action: "tools/call", Principal: bot, Agent: "orchestrator", LiveWrites: true,
			Tool: &authz.Tool{Ref: fs, Name: "write_file"}, Arguments: map[string]any{"path": "drafts/x.md"}},
			"allow", nil},
		{"project policy denies", authz.Input{Action: "tools/call", Principal: bot, Agent: "orchestrator", LiveWrites: true,
			Tool: &authz.Tool{Ref: fs, Name: "write_file"}, Arguments: map[string]any{"path": "/etc/passwd"}},
			"deny", []string{"quickstart.drafts.outside"}},
		{"not in allowlist", authz.Input{Action: "tools/call", Principal: eng, Agent: "researcher",
			Tool: &authz.Tool{Ref: fs, Name: "write_file"}},
			"deny", nil},
		{"agent acl", authz.Input{Action: "agent/invoke", Principal: eng, Agent: "notifier"}, "deny", []string{"lush.acl.no_agent_execute"}},
		{"depth", authz.Input{Action: "agent/invoke", Principal: bot, Agent: "researcher", Chain: []string{"a", "b", "c", "d", "e", "researcher"}},
			"deny", []string{"lush.depth.exceeded"}},
		{"loop read by everyone", authz.Input{Action: "loop/read", Principal: authz.Principal{ID: "user:zed"}, Loop: "weekday-digest"}, "allow", []string{"lush.acl.loop_read"}},
		{"loop trigger", authz.Input{Action: "loop/trigger", Principal: authz.Principal{ID: "user:zed"}, Loop: "weekday-digest"}, "deny", []string{"lush.acl.no_loop_execute"}},
		{"unknown action", authz.Input{Action: "tools/explode", Principal: eng}, "deny", nil},
		{"empty input", authz.Input{}, "deny", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := e.Decide(context.Background(), tt.in)
			if d.Outcome != tt.outcome {
				t.Fatalf("outcome = %s, want %s: %+v", d.Outcome, tt.outcome, d)
			}
			if d.Allow != (tt.outcome != "deny") {
				t.Errorf("allow = %v with outcome %s", d.Allow, d.Outcome)
			}
			if d.Revision != e.Revision() || len(d.Revision) != 64 {
				t.Errorf("revision = %q", d.Revision)
			}
			if tt.outcome == "deny" && len(d.Reasons) == 0 {
				t.Errorf("a denial without reasons: %+v", d)
			}
			for _, r := range tt.rules {
				found := false
				for _, got := range d.Rules {
					found = found || got == r
				}
				if !found {
					t.Errorf("rules = %v, want %s among them", d.Rules, r)
				}
			}
			if d.Executes() != (tt.outcome == "allow") {
				t.Errorf("Executes() = %v for outcome %s", d.Executes(), d.Outcome)
			}
		})
	}
}

func TestFailClosed(t *testing.T) {
	e := engine(t)
	// A cancelled context: evaluation fails, the decision denies with outcome error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := e.Decide(ctx, authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "serviceaccount:digest-bot"}, Agent: "researcher",
		Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}})
	if d.Allow || d.Outcome != authz.OutcomeError || d.Error == "" || d.Executes() {
		t.Errorf("cancelled decision = %+v", d)
	}
	// Arguments that are not JSON values deny.
	d = e.Decide(context.Background(), authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "serviceaccount:digest-bot"}, Agent: "researcher",
		Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}, Arguments: make(chan int)})
	if d.Allow || d.Outcome != authz.OutcomeError {
		t.Errorf("bad arguments decision = %+v", d)
	}
}

func TestBundleLoadErrors(t *testing.T) {
	if _, err := authz.FromBytes(context.Background(), []byte("not a bundle")); err == nil {
		t.Error("garbage loaded as a bundle")
	}
	// Requiring a signature refuses an unsigned bundle.
	_, err := authz.FromBytes(context.Background(), quickstart(t), authz.VerifyWith(nil, "ci"))
	if err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("unsigned bundle with verification: %v", err)
	}
}
