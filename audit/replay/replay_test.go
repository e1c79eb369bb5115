package replay_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/audit/replay"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/test/projecttest"
)

const project = `project: replay-test
tool_classes:
  mcp://notes.example.com/mcp:
    search_notes: read
tool_grants:
  - tool: mcp://notes.example.com/mcp
    grants:
      - {principal: group:eng, access: read}
`

const agent = `name: researcher
model: gemini-2.5-flash
description: Reads notes.
tools:
  - server: mcp://notes.example.com/mcp
    access: read
acl:
  - {principal: group:eng, role: execute}
  - {principal: user:dave, role: execute}
`

// build returns the engine of the project, with lushYAML as its lush.yaml.
func build(t *testing.T, lushYAML string) *authz.Engine {
	t.Helper()
	_, eng := projecttest.Build(t, projecttest.Write(t, map[string]string{"lush.yaml": lushYAML, "agents/researcher/spec.yaml": agent}))
	return eng
}

// record is a logged decision of old about in.
func record(t *testing.T, old *authz.Engine, id string, in authz.Input) decisionlog.Record {
	t.Helper()
	d := old.Decide(context.Background(), in)
	input, _ := json.Marshal(in)
	result, _ := json.Marshal(d)
	ev := decisionlog.Event{DecisionID: id, Input: input, Result: result, Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Principal: in.Principal.ID, Agent: in.Agent, Action: in.Action, Outcome: d.Outcome, Rules: d.Rules}
	if in.Tool != nil {
		ev.Tool, ev.ToolName = in.Tool.Ref, in.Tool.Name
	}
	return decisionlog.Record{Event: ev}
}

func call(p string, groups ...string) authz.Input {
	return authz.Input{Action: authz.ActionToolsCall, Principal: authz.Principal{ID: p, Groups: append([]string{}, groups...)},
		Agent: "researcher", Chain: []string{"researcher"}, Depth: 1, Tool: &authz.Tool{Ref: "mcp://notes.example.com/mcp", Name: "search_notes"}}
}

// A candidate build that grants dave what only group:eng had flips dave's denied read to allow,
// and nothing else; a logged decision without its input is skipped.
func TestRun(t *testing.T) {
	old := build(t, project)
	next := build(t, strings.Replace(project, "      - {principal: group:eng, access: read}\n",
		"      - {principal: group:eng, access: read}\n      - {principal: user:dave, access: read}\n", 1))
	bob := record(t, old, "bob", call("user:bob", "group:eng"))
	dave := record(t, old, "dave", call("user:dave"))
	masked := record(t, old, "masked", call("user:dave"))
	masked.Event.Input = json.RawMessage("null")
	if bob.Event.Outcome != "allow" || dave.Event.Outcome != "deny" {
		t.Fatalf("the old build decided bob %s and dave %s", bob.Event.Outcome, dave.Event.Outcome)
	}

	for _, tc := range []struct {
		name      string
		eng       *authz.Engine
		recs      []decisionlog.Record
		replayed  int
		skipped   int
		flipped   []string
		principal string
	}{
		{"the same build changes nothing", old, []decisionlog.Record{bob, dave, masked}, 2, 1, nil, ""},
		{"a new grant flips dave", next, []decisionlog.Record{bob, dave, masked}, 2, 1, []string{"dave"}, "user:dave"},
		{"no records", next, nil, 0, 0, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum := replay.Run(context.Background(), tc.eng, tc.recs)
			if sum.Replayed != tc.replayed || sum.Skipped != tc.skipped || len(sum.Changed) != len(tc.flipped) || sum.Bundle != tc.eng.Revision() {
				t.Fatalf("summary %+v", sum)
			}
			for i, id := range tc.flipped {
				f := sum.Changed[i]
				if f.DecisionID != id || f.Was != "deny" || f.Now != "allow" || f.Candidate == nil || !f.Candidate.Allow ||
					f.Tool != "mcp://notes.example.com/mcp (search_notes)" || f.Time != "2026-01-02T03:04:05Z" {
					t.Errorf("flip %+v", f)
				}
				var logged authz.Decision
				if err := json.Unmarshal(f.Logged, &logged); err != nil || logged.Allow || !strings.Contains(strings.Join(logged.Rules, ","), "no_grant") {
					t.Errorf("the logged side of the flip: %s (%v)", f.Logged, err)
				}
			}
			if tc.principal != "" {
				want := []replay.Count{{Name: tc.principal, Flips: 1}}
				if len(sum.ByPrincipal) != 1 || sum.ByPrincipal[0] != want[0] || len(sum.ByAgent) != 1 || sum.ByAgent[0].Name != "researcher" ||
					len(sum.ByTool) != 1 || sum.ByTool[0].Flips != 1 {
					t.Errorf("counts: %+v %+v %+v", sum.ByPrincipal, sum.ByAgent, sum.ByTool)
				}
			} else if len(sum.ByPrincipal)+len(sum.ByAgent)+len(sum.ByTool) != 0 {
				t.Errorf("counts without flips: %+v", sum)
			}
		})
	}

	// A context that has ended replays nothing more.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if sum := replay.Run(ctx, next, []decisionlog.Record{bob, dave}); sum.Replayed != 0 {
		t.Errorf("replayed %d after the context ended", sum.Replayed)
	}
}
