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
