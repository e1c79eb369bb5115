package enforce_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// Arguments over a limit, or not text, are refused before the policy: one recorded denial with
// its own rule, whose logged input holds a small placeholder instead of the arguments; the
// call takes no rate-limit token. Arguments within the limits are left to the policy.
func TestCheckArguments(t *testing.T) {
	e, _, log := limitedEnforcer(t, engineWith(t, limitsYAML))
	ctx := context.Background()
	lim := jsonlimit.Limits{MaxDepth: 8, MaxNodes: 50, MaxBytes: 4096, Setting: "gateway config limits.arguments"}
	huge := strings.Repeat("x", 4000)
	for _, tc := range []struct {
		name, args  string
		rule, limit string // rule "": the arguments pass
		message     string
	}{
		{"within the limits", `{"path":"q3.md","tags":[[["a"]]]}`, "", "", ""},
		{"too deep", `{"path":"q3.md","x":` + strings.Repeat("[", 8) + strings.Repeat("]", 8) + `,"pad":"` + huge[:3000] + `"}`,
			enforce.RuleArgumentsLimit, jsonlimit.LimitDepth,
			"the call's arguments nest more than 8 levels deep; the limit is 8 (gateway config limits.arguments.max_depth)"},
		{"too many values", `{"list":[` + strings.Repeat("1,", 60) + `1]}`, enforce.RuleArgumentsLimit, jsonlimit.LimitNodes,
			"the call's arguments hold more than 50 values; the limit is 50 (gateway config limits.arguments.max_nodes)"},
		{"too large", `{"path":"` + huge + huge + `"}`, enforce.RuleArgumentsLimit, jsonlimit.LimitBytes,
			"the call's arguments are 8011 bytes; the limit is 4096 (gateway config limits.arguments.max_bytes)"},
		{"not text", "{\"path\":\"q3\xff.md\"}", enforce.RuleArgumentsInvalid, "",
			"the call's arguments hold a string with invalid UTF-8 at /path: send text as UTF-8, and binary data base64-encoded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := readCall("user:dana", fs, "read_text_file")
			v, problem := e.CheckArguments(ctx, in, []byte(tc.args), lim)
			if tc.rule == "" {
				if v != nil || problem != nil {
					t.Fatalf("refused: %v %+v", problem, v)
				}
				return
			}
			if problem == nil || problem.Limit != tc.limit || v == nil || v.Allow || v.Outcome != authz.OutcomeDeny || !v.Recorded ||
				len(v.Rules) != 1 || v.Rules[0] != tc.rule || v.Reasons[0].Message != tc.message || v.Revision == "" {
				t.Fatalf("problem %v, verdict %+v", problem, v)
			}
			if err := log.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			ev := recorded(t, log, v.ID)
			var logged authz.Input
			if err := json.Unmarshal(ev.Input, &logged); err != nil {
				t.Fatal(err)
			}
			omitted, _ := logged.Arguments.(map[string]any)[enforce.OmittedArguments].(map[string]any)
			if omitted["bytes"] != float64(len(tc.args)) || omitted["problem"] != tc.message || len(ev.Input) > 1024 ||
				logged.Tool.Ref != fs || logged.Principal.ID != "user:dana" || ev.Rules[0] != tc.rule || ev.Outcome != authz.OutcomeDeny {
				t.Errorf("logged %d bytes: %s, rules %v", len(ev.Input), ev.Input, ev.Rules)
			}
		})
	}
	// Four refusals took no token: dana's burst of 2 (group:engineering 1/s burst 2) is whole.
	dana := readCall("user:dana", fs, "read_text_file")
	for i := range 2 {
		if v := e.Decide(ctx, dana); v.Outcome != authz.OutcomeAllow {
			t.Fatalf("call %d after the refusals: %+v", i+1, v.Decision)
		}
	}
}

// recorded reads the decision id's event from the log.
func recorded(t *testing.T, log *decisionlog.Log, id string) decisionlog.Event {
	t.Helper()
	r, err := decisionlog.OpenReader(log.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Query(context.Background(), decisionlog.Filter{DecisionID: id})
	if err != nil || len(recs) != 1 {
		t.Fatalf("query %s: %v %v", id, recs, err)
	}
	return recs[0].Event
}
