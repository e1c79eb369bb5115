package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/lush-agents/lush/authz"
	"github.com/lush-agents/lush/enforce"
)

// TestStubConformsToOutputSchema: a stub's structured content validates against the tool's
// output schema, since clients check it.
func TestStubConformsToOutputSchema(t *testing.T) {
	schemas := []string{
		`{"type":"object","properties":{"content":{"type":"string"}},"required":["content"],"additionalProperties":false}`,
		`{"type":"object","properties":{"n":{"type":"integer","minimum":3},"ok":{"type":"boolean"},"tags":{"type":"array","items":{"type":"string"},"minItems":2},
		  "kind":{"enum":["a","b"]},"nested":{"type":"object","properties":{"id":{"type":["string","null"],"maxLength":5}},"required":["id"]}},
		  "required":["n","ok","tags","kind","nested"]}`,
		`{"type":"object","properties":{"v":{"anyOf":[{"type":"number"},{"type":"string"}]},"c":{"const":"fixed"}},"required":["v","c"]}`,
	}
	for _, s := range schemas {
		raw := json.RawMessage(`{"name":"t","outputSchema":` + s + `}`)
		res := stub(&exposed{Name: "t", Ref: "mcp://x/y", Upstream: "t", Raw: raw, HasOut: true}, map[string]any{"a": 1},
			&enforce.Verdict{ID: "d1", Decision: authz.Decision{Outcome: "stub"}})
		var doc any
		json.Unmarshal([]byte(s), &doc)
		c := jsonschema.NewCompiler()
		c.AddResource("s.json", doc)
		sch, err := c.Compile("s.json")
		if err != nil {
			t.Fatal(err)
		}
		out, _ := json.Marshal(res["structuredContent"])
		var v any
		json.Unmarshal(out, &v)
		if err := sch.Validate(v); err != nil {
			t.Errorf("stub %s does not validate against %s: %v", out, s, err)
		}
		if text := res["content"].([]map[string]string)[0]["text"]; !strings.HasPrefix(text, "[stub] t was NOT executed") {
			t.Errorf("text = %q", text)
		}
	}
}

// The decision is added to every allowed result's _meta, spliced or merged, leaving the rest of
// the result as it was.
func TestWithDecision(t *testing.T) {
	v := &enforce.Verdict{ID: "d-1", Tool: "mcp://x", Decision: authz.Decision{Outcome: "allow", Access: "read"}}
	for _, tc := range []struct{ in, want string }{
		{`{}`, `{"_meta":{"dev.lush/decision":{}}}`},
		{` { "content" : [{"type":"text","text":"hi"}] } `, `{"content":[{"type":"text","text":"hi"}],"_meta":{"dev.lush/decision":{}}}`},
		{`{"content":[],"_meta":{"progress":1}}`, `{"content":[],"_meta":{"progress":1,"dev.lush/decision":{}}}`},
		{`{"content":[{"type":"text","text":"\"_meta\" in a text"}]}`, `{"content":[{"type":"text","text":"\"_meta\" in a text"}],"_meta":{"dev.lush/decision":{}}}`},
		{`[1,2]`, `[1,2]`},
		{`null`, `null`},
	} {
		got := withDecision(json.RawMessage(tc.in), v)
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: result is not JSON: %s", tc.in, got)
		}
		json.Unmarshal([]byte(tc.want), &w)
		// The decision itself is compared by id; the rest exactly.
		if m, ok := g.(map[string]any); ok {
			meta := m["_meta"].(map[string]any)
			d := meta["dev.lush/decision"].(map[string]any)
			if d["id"] != "d-1" || d["tool"] != "mcp://x" {
				t.Errorf("%s: decision %v", tc.in, d)
			}
			meta["dev.lush/decision"] = map[string]any{}
		}
		gj, _ := json.Marshal(g)
		wj, _ := json.Marshal(w)
		if string(gj) != string(wj) {
			t.Errorf("%s: got %s, want %s", tc.in, gj, wj)
		}
	}
}
