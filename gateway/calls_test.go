package gateway

import (
	"encoding/json"
	"testing"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
)

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
