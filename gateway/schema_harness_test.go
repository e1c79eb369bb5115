package gateway_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/test/mcpserver"
)

// schemaHarness serves the test project with local tools that declare input and output
// schemas: typed (arguments n: integer, token: lowercase letters) and the output tools good_out,
// bad_out, no_out and err_out, whose results do or do not conform to {count: integer}.
func schemaHarness(t *testing.T) *harness {
	t.Helper()
	url, rec := mcpserver.StartRecordedHTTP(t.Cleanup)
	h := &harness{t: t, rec: rec, url: url}
	outTools := map[string]string{
		"good_out": `{"content":[{"type":"text","text":"3"}],"structuredContent":{"count":3}}`,
		"bad_out":  `{"content":[{"type":"text","text":"SECRET-OUT-91c2"}],"structuredContent":{"count":"SECRET-OUT-91c2"}}`,
		"no_out":   `just text`,
		"err_out":  `{"isError":true,"content":[{"type":"text","text":"it broke"}]}`,
	}
	var grants, allow strings.Builder
	for _, name := range append([]string{"typed"}, slices.Sorted(maps.Keys(outTools))...) {
		grants.WriteString("  - tool: tools/" + name + "\n    grants:\n      - {principal: group:eng, access: read}\n")
		allow.WriteString("  - name: tools/" + name + "\n    access: read\n")
	}
	h.dir = project(t, url, grants.String())
	write := func(rel, content string, mode os.FileMode) {
		p := filepath.Join(h.dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("tools/typed/tool.yaml", `description: Typed.
command: ./run
access: read
input_schema:
  type: object
  properties:
    n: {type: integer}
    token: {type: string, pattern: "^[a-z]+$"}
  required: [n]
`, 0o644)
	write("tools/typed/run", "#!/bin/sh\necho typed ran\n", 0o755)
	for name, out := range outTools {
		write("tools/"+name+"/tool.yaml", `description: Output.
command: ./run
access: read
output_schema:
  type: object
  properties:
    count: {type: integer}
  required: [count]
`, 0o644)
		write("tools/"+name+"/run", "#!/bin/sh\ncat >/dev/null\nprintf '%s\\n' '"+out+"'\n", 0o755)
	}
	// The log masks the token argument, so that the whole event can be searched for it.
	write("policies/secrets.rego", "package lush.policies.secrets\n\nmask contains \"/input/arguments/token\"\n", 0o644)
	spec, err := os.ReadFile(filepath.Join(h.dir, "agents/assistant/spec.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	write("agents/assistant/spec.yaml", strings.Replace(string(spec), "acl:\n", allow.String()+"acl:\n", 1), 0o644)
	h.serve(gateway.Config{})
	return h
}

// TestInputSchema: arguments that do not match the tool's input schema are refused by the
// decision (lush.schema.invalid_arguments), logged, and never reach the tool.
func TestInputSchema(t *testing.T) {
	h := schemaHarness(t)
	alice := h.client("assistant", aliceKey)
	const echo = "arguments of mcp://tests.internal/mcp (echo) do not match its input schema: "
	const typed = "arguments of tools/typed do not match its input schema: "
	tests := []struct {
		name, tool string
		args       map[string]any
		refusal    string // "" when the call passes
	}{
		{"valid upstream call", "tests__echo", map[string]any{"text": "hi"}, ""},
		{"extra property allowed", "tests__echo", map[string]any{"text": "hi", "more": 1}, ""},
		{"wrong type", "tests__echo", map[string]any{"text": 5}, echo + "/text: expected string, got number"},
		{"missing required", "tests__echo", map[string]any{}, echo + `/: missing required property "text"`},
		{"absent arguments", "tests__echo", nil, echo + `/: missing required property "text"`},
		{"valid local call", "typed", map[string]any{"n": 2, "token": "abc"}, ""},
		{"two errors", "typed", map[string]any{"n": "two", "token": 1}, typed + "/n: expected integer, got string (1 more)"},
		{"secret value", "typed", map[string]any{"n": 1, "token": "SECRET-Token-3e1d"}, typed + "/token: does not match the pattern ^[a-z]+$"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := callTool(t, alice, tt.tool, tt.args)
			if tt.refusal == "" {
				if res.IsError {
					t.Fatalf("refused: %s", text(res))
				}
				return
			}
			if !res.IsError || !strings.HasPrefix(text(res), "Lush denied this call: "+tt.refusal) || !strings.Contains(text(res), "(decision ") {
				t.Fatalf("result = %s\nwant the refusal %q", text(res), tt.refusal)
			}
			if strings.Contains(text(res), "SECRET") {
				t.Errorf("the refusal echoes an argument value: %s", text(res))
			}
		})
	}

	// The upstream saw the valid calls only; the log shows the local tool ran for its valid call
	// only (an allowed call has a completion).
	if calls := h.rec.Calls(); strings.Count(strings.Join(calls, ","), "echo") != 2 {
		t.Errorf("upstream calls = %v, want the 2 valid echo calls", calls)
	}
	var denied int
	for _, r := range h.events(decisionlog.Filter{Action: "tools/call"}) {
		e := r.Event
		if e.Outcome != "deny" {
			if r.Completion == nil || r.Completion.Status != "ok" {
				t.Errorf("allowed call %s without an ok completion: %+v", e.ToolName, r.Completion)
			}
			if strings.Contains(string(e.Input), "arguments_valid") {
				t.Errorf("a valid call's input carries the schema verdict: %s", e.Input)
			}
			continue
		}
		denied++
		if !slices.Equal(e.Rules, []string{"lush.schema.invalid_arguments"}) || r.Completion != nil {
			t.Errorf("denied event rules = %v, completion %+v", e.Rules, r.Completion)
		}
		if !strings.Contains(string(e.Input), `"arguments_valid":false`) || !strings.Contains(string(e.Input), `"schema_errors":["/`) {
			t.Errorf("logged input lacks the schema verdict: %s", e.Input)
		}
		if !strings.Contains(string(e.Result), "do not match its input schema") {
			t.Errorf("logged result lacks the reason: %s", e.Result)
		}
		for _, doc := range [][]byte{e.Input, e.Result} {
			if strings.Contains(string(doc), "SECRET-Token") {
				t.Errorf("the log holds the secret argument: %s", doc)
			}
		}
	}
	if denied != 5 {
		t.Errorf("%d denials logged, want 5", denied)
	}
}

// TestOutputSchema: a result that does not conform to the tool's declared output schema is
// withheld: the model gets an error result, the completion says why.
func TestOutputSchema(t *testing.T) {
	h := schemaHarness(t)
	alice := h.client("assistant", aliceKey)
	tests := []struct {
		tool    string
		isError bool
		text    string // a part of the text the model gets
		status  string // the completion's status
		logged  string // a part of the completion's error
	}{
		{"good_out", false, "3", "ok", ""},
		{"bad_out", true, "the output of bad_out did not match its declared output schema: /count: expected integer, got string", "error",
			"the output of bad_out did not match its declared output schema: /count: expected integer, got string"},
		{"no_out", true, "the result has no structuredContent", "error", "no structuredContent"},
		{"err_out", true, "it broke", "error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			res := callTool(t, alice, tt.tool, nil)
			if res.IsError != tt.isError || !strings.Contains(text(res), tt.text) {
				t.Fatalf("result = %v %s", res.IsError, text(res))
			}
			if strings.Contains(text(res), "SECRET-OUT") {
				t.Errorf("a non-conforming result reached the model: %s", text(res))
			}
			if tt.isError && res.StructuredContent != nil {
				t.Errorf("structured content passed: %v", res.StructuredContent)
			}
			recs := h.events(decisionlog.Filter{Tool: "tools/" + tt.tool})
			if len(recs) != 1 || recs[0].Completion == nil {
				t.Fatalf("log = %+v", recs)
			}
			c := recs[0].Completion
			if c.Status != tt.status || !strings.Contains(c.Error, tt.logged) || strings.Contains(c.Error, "SECRET-OUT") {
				t.Errorf("completion = %s %q", c.Status, c.Error)
			}
		})
	}
}
