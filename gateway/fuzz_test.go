package gateway_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// FuzzToolsCall sends arbitrary tools/call params through the HTTP endpoint: from the JSON-RPC
// message to the policy input and back. The gateway must answer every one with a well-formed
// JSON-RPC response that is never an internal error (a panic is turned into one), and every
// decision it logs must carry a policy input of the documented shape.
func FuzzToolsCall(f *testing.F) {
	for _, s := range []string{
		`{"name":"tests__echo","arguments":{"text":"x"}}`,
		`{"name":"write_note","arguments":{"text":{"nested":[1,2,{"a":null}]}}}`,
		`{"name":"tests__echo","arguments":[]}`,
		`{"name":"tests__echo","arguments":"x"}`,
		`{"name":7}`,
		`{"name":"hello","_meta":{"progressToken":{"x":1}}}`,
		`{"name":"tests__sleep","arguments":{"ms":-1e308}}`,
		`{"name":"\u0000"}`,
		`{"name":"no-such-tool","arguments":{"text":"x"}}`,
		`{}`,
		`null`,
	} {
		f.Add(s)
	}
	h := start(f, gateway.Config{})
	resp, _ := h.post("assistant", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","clientInfo":{"name":"fuzz","version":"1"},"capabilities":{}}}`,
		map[string]string{"X-API-Key": aliceKey})
	sid := resp.Header.Get("Mcp-Session-Id")
	seen := int64(0)
	f.Fuzz(func(t *testing.T, params string) {
		h := *h // the harness reports to this input's t
		h.t = t
		body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":` + params + `}`
		resp, out := h.post("assistant", body, map[string]string{"X-API-Key": aliceKey, "Mcp-Session-Id": sid})
		switch resp.StatusCode {
		case http.StatusOK:
			if _, ok := out["result"]; !ok {
				e, _ := out["error"].(map[string]any)
				if code, _ := e["code"].(float64); code == -32603 {
					t.Fatalf("internal error for params %s: %v", params, e)
				}
				if e == nil {
					t.Fatalf("neither result nor error for params %s: %v", params, out)
				}
			}
		case http.StatusBadRequest:
		default:
			t.Fatalf("status %d for params %s: %v", resp.StatusCode, params, out)
		}
		for _, r := range h.events(decisionlog.Filter{AfterSeq: seen}) {
			seen = max(seen, r.Seq)
			var in authz.Input
			dec := json.NewDecoder(strings.NewReader(string(r.Event.Input)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&in); err != nil {
				t.Fatalf("logged input %s is not a policy input: %v", r.Event.Input, err)
			}
			if in.Principal.ID != "user:alice" || in.Agent != "assistant" || in.Tool == nil {
				t.Fatalf("logged input %+v", in)
			}
			// A name the agent has no tool by is a probe: no reference, the name bounded.
			probe := slices.Equal(r.Event.Rules, []string{"lush.capability.unknown_tool"})
			if (in.Tool.Ref == "") != probe || probe && (in.Tool.Name == "" || len(in.Tool.Name) > 128+len("…") || in.Arguments != nil) {
				t.Fatalf("logged input %+v, tool %+v, rules %v", in, *in.Tool, r.Event.Rules)
			}
		}
	})
}
