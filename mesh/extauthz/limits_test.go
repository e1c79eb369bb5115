package extauthz_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
)

// The sidecar holds a tools/call's arguments to the same limits as the gateway, before it
// decodes them: over a limit, or not text, the call is answered at the sidecar with 400 and an
// invalid-params error naming the limit and its setting, whoever sent it; the refusal is one
// recorded denial with its own rule and a small logged input. Arguments just under each limit
// are decided as usual.
func TestArgumentLimitsAtTheSidecar(t *testing.T) {
	h := start(t, harnessOpts{limits: jsonlimit.Limits{MaxDepth: 8, MaxNodes: 1000, MaxBytes: 64 << 10, Setting: "gateway config limits.arguments"}})
	nest := func(depth int) string { // {"query": "standup", "deep": [[…]]}: depth levels in all
		return `{"query":"standup","deep":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
	}
	values := func(n int) string { // n values in all
		return `{"query":"standup","n":[` + strings.TrimSuffix(strings.Repeat("0,", n-3), ",") + `]}`
	}
	size := func(n int) string { // n bytes
		frame := `{"query":"standup","pad":""}`
		return `{"query":"standup","pad":"` + strings.Repeat("p", n-len(frame)) + `"}`
	}
	for _, tc := range []struct {
		name, key, args string
		want, rule      string // want "": the call is decided as usual
	}{
		{"depth at the limit", aliceKey, nest(8), "", ""},
		{"depth over the limit", bobKey, nest(9),
			"tools/call arguments nest more than 8 levels deep; the limit is 8 (gateway config limits.arguments.max_depth)", enforce.RuleArgumentsLimit},
		{"values at the limit", aliceKey, values(1000), "", ""},
		{"values over the limit", aliceKey, values(1001),
			"tools/call arguments hold more than 1000 values; the limit is 1000 (gateway config limits.arguments.max_nodes)", enforce.RuleArgumentsLimit},
		{"size at the limit", aliceKey, size(64 << 10), "", ""},
		{"size over the limit", aliceKey, size(64<<10 + 1),
			"tools/call arguments are 65537 bytes; the limit is 65536 (gateway config limits.arguments.max_bytes)", enforce.RuleArgumentsLimit},
		{"invalid UTF-8", aliceKey, "{\"query\":\"stand\xffup\"}",
			"tools/call arguments hold a string with invalid UTF-8 at /query: send text as UTF-8, and binary data base64-encoded", enforce.RuleArgumentsInvalid},
		{"unpaired surrogate", aliceKey, `{"query":"\udc00"}`, "tools/call arguments hold a string with an unpaired UTF-16 surrogate escape at /query", enforce.RuleArgumentsInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := load(t, "call_read_apikey")
			hh := req.GetAttributes().GetRequest().GetHttp()
			hh.GetHeaders()["authorization"] = "Bearer " + tc.key
			hh.RawBody = []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search","arguments":` + tc.args + `}}`)
			a := read(t, h.check(req))
			if tc.want == "" {
				if !a.allowed {
					t.Fatalf("refused: %d %v", a.status, a.body)
				}
				return
			}
			rpcCode, msg, data := a.rpcError()
			if a.allowed || a.status != 400 || a.grpc != code.Code_INVALID_ARGUMENT || rpcCode != -32602 || !strings.HasPrefix(msg, tc.want) {
				t.Fatalf("answer: allowed %v, status %d (%v), %v %q; want %q", a.allowed, a.status, a.grpc, rpcCode, msg, tc.want)
			}
			id, _ := data["decision_id"].(string)
			if id == "" || a.headers["x-lush-decision-id"] != id || !strings.HasSuffix(msg, "(decision "+id+")") || a.body["id"] != float64(7) {
				t.Fatalf("decision %q in %v, headers %v", id, a.body, a.headers)
			}
			evs := h.events()
			ev := evs[len(evs)-1].Event
			var in authz.Input
			if err := json.Unmarshal(ev.Input, &in); err != nil {
				t.Fatal(err)
			}
			omitted, _ := in.Arguments.(map[string]any)[enforce.OmittedArguments].(map[string]any)
			if ev.DecisionID != id || ev.Outcome != authz.OutcomeDeny || !slices.Equal(ev.Rules, []string{tc.rule}) || ev.Point != "ext_authz" ||
				in.Tool.Name != "search" || omitted["bytes"] != float64(len(tc.args)) || len(ev.Input)+len(ev.Result) > 2048 {
				t.Errorf("logged %d+%d bytes: %s %v %s", len(ev.Input), len(ev.Result), ev.Outcome, ev.Rules, ev.Input)
			}
		})
	}
}
