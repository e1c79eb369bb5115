package gateway_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// echoArguments are arguments of tests__echo: {"text": "x"} with extra members (JSON) added.
func echoArguments(extra string) string { return `{"text":"x",` + extra + `}` }

// echoOfSize are arguments of tests__echo of exactly size bytes.
func echoOfSize(size int) string {
	return echoArguments(`"pad":"` + strings.Repeat("p", size-len(echoArguments(`"pad":""`))) + `"`)
}

// echoWithValues are arguments of tests__echo that hold n values in all.
func echoWithValues(n int) string {
	// {"text": "x", "n": [0, …]}: the object, its text and its list are 3 values.
	return echoArguments(`"n":[` + strings.TrimSuffix(strings.Repeat("0,", n-3), ",") + `]`)
}

// echoNested are arguments of tests__echo that nest depth levels deep.
func echoNested(depth int) string {
	return echoArguments(`"deep":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1))
}

// Arguments over a limit are refused before the policy with an invalid-params error that names
// the limit and its setting, whoever sends them; the refusal is one recorded denial with its own
// rule, whose logged input is a few hundred bytes whatever was sent; nothing reaches the
// upstream. Arguments just under each limit are decided and run as usual.
func TestArgumentLimits(t *testing.T) {
	def := start(t, gateway.Config{})
	// The same gateway with room for the outside tester's 3.8 MiB body, so that its depth is
	// what refuses it.
	roomy := start(t, gateway.Config{MaxBodyBytes: 8 << 20, Limits: gateway.LimitsConfig{Arguments: jsonlimit.Limits{MaxBytes: 8 << 20}}})
	tester := nestedArguments(500, 4000)
	for _, tc := range []struct {
		name string
		h    *harness
		key  string
		args string
		want string // the error's message; "" when the call runs
		rule string
	}{
		{"the tester's body, by its size", def, bobKey, tester,
			"tools/call arguments are 4000511 bytes; the limit is 1048576 (gateway config limits.arguments.max_bytes)", enforce.RuleArgumentsLimit},
		{"the tester's body, by its depth", roomy, bobKey, tester,
			"tools/call arguments nest more than 64 levels deep; the limit is 64 (gateway config limits.arguments.max_depth)", enforce.RuleArgumentsLimit},
		{"depth at the limit", def, aliceKey, echoNested(64), "", ""},
		{"depth over the limit", def, aliceKey, echoNested(65),
			"tools/call arguments nest more than 64 levels deep; the limit is 64 (gateway config limits.arguments.max_depth)", enforce.RuleArgumentsLimit},
		{"values at the limit", def, aliceKey, echoWithValues(100_000), "", ""},
		{"values over the limit", def, aliceKey, echoWithValues(100_001),
			"tools/call arguments hold more than 100000 values; the limit is 100000 (gateway config limits.arguments.max_nodes)", enforce.RuleArgumentsLimit},
		{"size at the limit", def, aliceKey, echoOfSize(1 << 20), "", ""},
		{"size over the limit", def, aliceKey, echoOfSize(1<<20 + 1),
			"tools/call arguments are 1048577 bytes; the limit is 1048576 (gateway config limits.arguments.max_bytes)", enforce.RuleArgumentsLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkCall(t, tc.h, tc.key, tc.args, tc.want, tc.rule)
		})
	}
}

// Strings of the arguments must be text: invalid UTF-8, which the gateway's decoder would
// silently replace with U+FFFD (and the policy then decide on a string the upstream never
// gets), is refused with the string's path, as is an unpaired surrogate escape.
func TestArgumentsMustBeText(t *testing.T) {
	h := start(t, gateway.Config{})
	for _, tc := range []struct{ name, args, want string }{
		{"invalid UTF-8", "{\"text\":\"caf\xe9\"}",
			"tools/call arguments hold a string with invalid UTF-8 at /text: send text as UTF-8, and binary data base64-encoded"},
		{"in a member name", "{\"text\":\"x\",\"opts\":{\"k\xff\":1}}", "tools/call arguments hold a member name with invalid UTF-8 at /opts"},
		{"unpaired surrogate", `{"text":"x\ud800y"}`, "tools/call arguments hold a string with an unpaired UTF-16 surrogate escape at /text"},
		{"UTF-8 and escapes", `{"text":"café \u00e9 \ud83d\ude00"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := ""
			if tc.want != "" {
				rule = enforce.RuleArgumentsInvalid
			}
			checkCall(t, h, aliceKey, tc.args, tc.want, rule)
		})
	}
}

// checkCall sends a tools/call of tests__echo with args as key's principal. When want is "", the
// call must run; otherwise it must be refused with an invalid-params error whose message starts
// with want, recorded as a denial by rule with a small logged input, and not reach the upstream.
func checkCall(t *testing.T, h *harness, key, args, want, rule string) {
	t.Helper()
	h.t = t
	before := len(h.rec.Calls())
	resp, out := h.post("assistant", toolsCall("tests__echo", args), h.session(key))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, out)
	}
	rpcErr, _ := out["error"].(map[string]any)
	if want == "" {
		res, _ := out["result"].(map[string]any)
		if rpcErr != nil || res == nil || res["isError"] == true || len(h.rec.Calls()) != before+1 {
			t.Fatalf("the call did not run: %v", out)
		}
		return
	}
	msg, _ := rpcErr["message"].(string)
	if rpcErr["code"] != float64(-32602) || !strings.HasPrefix(msg, want) {
		t.Fatalf("answer %v, want invalid params %q", out, want)
	}
	if n := len(h.rec.Calls()); n != before {
		t.Errorf("the upstream got the call: %v", h.rec.Calls())
	}
	decision, _ := rpcErr["data"].(map[string]any)["dev.lush/decision"].(map[string]any)
	id, _ := decision["id"].(string)
	if id == "" || !strings.HasSuffix(msg, "(decision "+id+")") || decision["outcome"] != authz.OutcomeDeny {
		t.Fatalf("decision in the answer: %v (%q)", decision, msg)
	}
	recs := h.events(decisionlog.Filter{DecisionID: id})
	if len(recs) != 1 {
		t.Fatalf("decision %s: %d records", id, len(recs))
	}
	ev := recs[0].Event
	var in authz.Input
	if err := json.Unmarshal(ev.Input, &in); err != nil {
		t.Fatal(err)
	}
	omitted, _ := in.Arguments.(map[string]any)[enforce.OmittedArguments].(map[string]any)
	if ev.Outcome != authz.OutcomeDeny || !slices.Equal(ev.Rules, []string{rule}) || ev.Tool != "mcp://tests.internal/mcp" ||
		ev.Point != gateway.Point || omitted["bytes"] != float64(len(args)) || len(ev.Input)+len(ev.Result) > 2048 {
		t.Errorf("logged %d+%d bytes: rules %v, input %s", len(ev.Input), len(ev.Result), ev.Rules, ev.Input)
	}
}
