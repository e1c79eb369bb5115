package stub

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
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
		var tool struct {
			OutputSchema map[string]any `json:"outputSchema"`
		}
		json.Unmarshal(raw, &tool)
		res := Result(Call{Name: "t", Ref: "mcp://x/y", Tool: "t", Arguments: map[string]any{"a": 1}, OutputSchema: tool.OutputSchema, DecisionID: "d1"})
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

// A tool without a name at a server (a remote A2A agent) is named by its own name in the message.
func TestStubMessageNamesTheTool(t *testing.T) {
	for _, tc := range []struct{ name, tool, want string }{
		{"search", "search_notes", "It would have run search_notes with arguments"},
		{"translator", "", "It would have run translator with arguments"},
	} {
		res := Result(Call{Name: tc.name, Ref: "a2a://partner.example.com/agents/translator", Tool: tc.tool, Arguments: map[string]any{"message": "hi"}, DecisionID: "d1"})
		if text := res["content"].([]map[string]string)[0]["text"]; !strings.Contains(text, tc.want) {
			t.Errorf("%s: text = %q, want it to contain %q", tc.name, text, tc.want)
		}
	}
}
