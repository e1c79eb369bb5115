package stack_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// An agent's MCP tool holds its arguments to the gateway config's limits.arguments, before it
// decodes them: over a limit, or not text, the call is refused with an invalid-params error that
// names the limit and its setting, recorded as a denied agent/invoke with its own rule and a
// small logged input, and the agent does not run. Arguments within the limits run the agent.
func TestArgumentLimitsAtAgentd(t *testing.T) {
	h := start(t, harnessOpts{gw: func(c *gateway.Config) {
		c.Limits.Arguments = jsonlimit.Limits{MaxDepth: 4, MaxNodes: 100, MaxBytes: 4096}
	}})
	for _, tc := range []struct {
		name, args string
		want, rule string // want "": the agent runs
	}{
		{"within the limits", `{"message":"Q3?","context":[[["a"]]]}`, "", ""},
		{"too deep", `{"message":"Q3?","context":[[[["a"]]]]}`,
			"tools/call arguments nest more than 4 levels deep; the limit is 4 (gateway config limits.arguments.max_depth)", enforce.RuleArgumentsLimit},
		{"too many values", `{"message":"Q3?","context":[` + strings.Repeat("1,", 100) + `1]}`,
			"tools/call arguments hold more than 100 values; the limit is 100 (gateway config limits.arguments.max_nodes)", enforce.RuleArgumentsLimit},
		{"too large", `{"message":"` + strings.Repeat("Q", 4096) + `"}`,
			"tools/call arguments are 4110 bytes; the limit is 4096 (gateway config limits.arguments.max_bytes)", enforce.RuleArgumentsLimit},
		{"not UTF-8", "{\"message\":\"Q3\xff?\"}",
			"tools/call arguments hold a string with invalid UTF-8 at /message: send text as UTF-8, and binary data base64-encoded", enforce.RuleArgumentsInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			status, out := h.mcpCall("/agents/researcher/mcp", aliceKey,
				`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"researcher","arguments":`+tc.args+`}}`)
			rpcErr, _ := out["error"].(map[string]any)
			if tc.want == "" {
				if res, _ := out["result"].(map[string]any); status != http.StatusOK || res == nil || res["isError"] == true {
					t.Fatalf("the agent did not run: %d %v", status, out)
				}
				return
			}
			msg, _ := rpcErr["message"].(string)
			if status != http.StatusOK || rpcErr["code"] != float64(-32602) || !strings.HasPrefix(msg, tc.want) {
				t.Fatalf("answer %d %v, want invalid params %q", status, out, tc.want)
			}
			decision, _ := rpcErr["data"].(map[string]any)["dev.lush/decision"].(map[string]any)
			id, _ := decision["id"].(string)
			var ev *decisionlog.Event
			for _, r := range h.decisions() {
				if r.Event.DecisionID == id {
					ev = &r.Event
				}
			}
			if ev == nil {
				t.Fatalf("decision %q is not in the log", id)
			}
			var in authz.Input
			if err := json.Unmarshal(ev.Input, &in); err != nil {
				t.Fatal(err)
			}
			omitted, _ := in.Arguments.(map[string]any)[enforce.OmittedArguments].(map[string]any)
			if ev.Action != authz.ActionAgentInvoke || ev.Agent != "researcher" || ev.Principal != "user:alice" || ev.Outcome != authz.OutcomeDeny ||
				!slices.Equal(ev.Rules, []string{tc.rule}) || omitted["bytes"] != float64(len(tc.args)) || len(ev.Input)+len(ev.Result) > 2048 {
				t.Errorf("logged %d+%d bytes: %s %s %v %s", len(ev.Input), len(ev.Result), ev.Action, ev.Outcome, ev.Rules, ev.Input)
			}
		})
	}
}

// mcpCall opens an MCP session at path as the principal of key, sends body in it, and returns the
// status and the decoded JSON-RPC answer.
func (h *harness) mcpCall(path, key, body string) (int, map[string]any) {
	h.t.Helper()
	send := func(body, session string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, h.st.URL()+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("X-API-Key", key)
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			h.t.Fatal(err)
		}
		return resp
	}
	resp := send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","clientInfo":{"name":"raw","version":"1"},"capabilities":{}}}`, "")
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		h.t.Fatalf("initialize: status %d, no session", resp.StatusCode)
	}
	resp = send(body, sid)
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}
