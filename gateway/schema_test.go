package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSchemaValidation is a table of schema edge cases: what matches, what does not and how it
// is described (bounded, never with the instance's values).
func TestSchemaValidation(t *testing.T) {
	const secret = "SECRET-VALUE-7f3a"
	tests := []struct {
		name   string
		schema string
		args   string // "" for absent arguments
		want   []string
	}{
		{"empty schema", `{}`, `{"a":1}`, nil},
		{"object, absent arguments", `{"type":"object"}`, "", nil},
		{"null arguments", `{"type":"object"}`, "null", nil},
		{"absent arguments, required", `{"type":"object","required":["q"]}`, "", []string{`/: missing required property "q"`}},
		{"wrong type", `{"type":"object","properties":{"q":{"type":"string"}}}`, `{"q":5}`, []string{"/q: expected string, got number"}},
		{"integer vs float", `{"properties":{"n":{"type":"integer"}}}`, `{"n":1.5}`, []string{"/n: expected integer, got number"}},
		{"integer as 1.0", `{"properties":{"n":{"type":"integer"}}}`, `{"n":1.0}`, nil},
		{"big integer", `{"properties":{"n":{"type":"integer","maximum":9007199254740993}}}`, `{"n":9007199254740993}`, nil},
		{"several missing", `{"required":["a","b"]}`, `{}`, []string{`/: missing required properties "a", "b"`}},
		{"additional properties", `{"properties":{"a":{}},"additionalProperties":false}`, `{"a":1,"b":2}`, []string{`/: property "b" not allowed`}},
		{"nested path", `{"properties":{"a":{"type":"array","items":{"type":"object","properties":{"b/c":{"type":"boolean"}}}}}}`,
			`{"a":[{"b/c":true},{"b/c":"x"}]}`, []string{"/a/1/b~1c: expected boolean, got string"}},
		{"pattern hides the value", `{"properties":{"token":{"type":"string","pattern":"^[a-z]+$"}}}`, `{"token":"` + secret + `"}`,
			[]string{"/token: does not match the pattern ^[a-z]+$"}},
		{"enum hides the value", `{"properties":{"m":{"enum":["a","b"]}}}`, `{"m":"` + secret + `"}`, []string{"/m: not one of the values the schema allows (enum)"}},
		{"const hides the value", `{"properties":{"m":{"const":"a"}}}`, `{"m":"` + secret + `"}`, []string{"/m: not the value the schema requires (const)"}},
		{"maxLength", `{"properties":{"m":{"maxLength":3}}}`, `{"m":"` + secret + `"}`, []string{"/m: longer than 3 characters"}},
		{"minimum", `{"properties":{"n":{"minimum":2.5}}}`, `{"n":1}`, []string{"/n: less than the minimum 2.5"}},
		{"oneOf", `{"properties":{"v":{"oneOf":[{"type":"string"},{"type":"integer"}]}}}`, `{"v":true}`,
			[]string{"/v: expected integer, got boolean", "/v: expected string, got boolean"}},
		{"false schema", `{"properties":{"x":false}}`, `{"x":1}`, []string{"/x: not allowed (the schema is false here)"}},
		{"local $ref", `{"$defs":{"s":{"type":"string"}},"properties":{"x":{"$ref":"#/$defs/s"}}}`, `{"x":1}`, []string{"/x: expected string, got number"}},
		{"draft-07", `{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"x":{"type":"string"}}}`, `{"x":1}`, []string{"/x: expected string, got number"}},
		{"many errors are bounded", `{"properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"},"d":{"type":"string"},"e":{"type":"string"},"f":{"type":"string"},"g":{"type":"string"}}}`,
			`{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1}`, nil /* checked below */},
		{"long property name is bounded", `{"additionalProperties":false}`, `{"` + strings.Repeat("k", 500) + `":1}`, nil /* checked below */},
		{"schema does not compile", `{"type":5}`, `{}`, []string{"/: the tool's input schema is not a valid JSON Schema ("}},
		{"external $ref does not compile", `{"properties":{"x":{"$ref":"https://schemas.example.com/x.json"}}}`, `{}`, []string{"/: the tool's input schema is not a valid JSON Schema ("}},
		{"schema not JSON", `{"type":`, `{}`, []string{"/: the tool's input schema is not a valid JSON Schema (not JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, _ := json.Marshal(map[string]any{"name": "t", "inputSchema": json.RawMessage(tt.schema)})
			if !json.Valid([]byte(tt.schema)) {
				raw = []byte(`{"name":"t","inputSchema":"` + strings.ReplaceAll(tt.schema, `"`, `\"`) + `"}`)
			}
			e := &exposed{Name: "t", Raw: raw}
			s := e.compiled()
			if !json.Valid([]byte(tt.schema)) {
				// A schema that is not JSON cannot be part of a tools/list answer; compile it directly.
				_, s.inErr = compileSchema(json.RawMessage(tt.schema))
			}
			got := s.checkArguments(json.RawMessage(tt.args))
			for _, g := range got {
				if strings.Contains(g, secret) || len(g) > maxSchemaMessage+300 {
					t.Errorf("error %q leaks the value or is unbounded", g)
				}
			}
			switch tt.name {
			case "many errors are bounded":
				if len(got) != maxSchemaErrors || !strings.Contains(got[len(got)-1], "and 3 more errors") {
					t.Errorf("errors = %q", got)
				}
				return
			case "long property name is bounded":
				if len(got) != 1 || len(got[0]) > 200 || !strings.Contains(got[0], "not allowed") {
					t.Errorf("errors = %q", got)
				}
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("errors = %q, want %q", got, tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("error %d = %q, want %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestOutputValidation checks results against an output schema.
func TestOutputValidation(t *testing.T) {
	const secret = "SECRET-OUT-91c2"
	out := `{"type":"object","properties":{"count":{"type":"integer"}},"required":["count"]}`
	tests := []struct {
		name, schema, result, want string
	}{
		{"no output schema", "", `{"content":[]}`, ""},
		{"conforms", out, `{"content":[],"structuredContent":{"count":3}}`, ""},
		{"mismatch", out, `{"content":[],"structuredContent":{"count":"` + secret + `"}}`, "/count: expected integer, got string"},
		{"missing field", out, `{"structuredContent":{}}`, `/: missing required property "count"`},
		{"no structuredContent", out, `{"content":[{"type":"text","text":"3"}]}`, "the result has no structuredContent"},
		{"null structuredContent", out, `{"structuredContent":null}`, "the result has no structuredContent"},
		{"error results are not checked", out, `{"isError":true,"content":[{"type":"text","text":"boom"}]}`, ""},
		{"output schema does not compile", `{"type":"nope"}`, `{"structuredContent":{}}`, "the tool's output schema is not a valid JSON Schema"},
		{"many errors", `{"properties":{"a":{"type":"string"},"b":{"type":"string"}}}`, `{"structuredContent":{"a":1,"b":2}}`, "/a: expected string, got number (1 more)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := map[string]any{"name": "t", "inputSchema": map[string]any{"type": "object"}}
			if tt.schema != "" {
				tool["outputSchema"] = json.RawMessage(tt.schema)
			}
			raw, _ := json.Marshal(tool)
			e := &exposed{Name: "t", Raw: raw}
			got := e.compiled().checkResult(json.RawMessage(tt.result))
			if (tt.want == "") != (got == "") || !strings.HasPrefix(got, tt.want) {
				t.Errorf("checkResult = %q, want %q", got, tt.want)
			}
			if strings.Contains(got, secret) {
				t.Errorf("the message leaks a value: %q", got)
			}
		})
	}
}

// TestSchemasCompiledOnce: the schemas of a catalog entry are compiled on first use, once.
func TestSchemasCompiledOnce(t *testing.T) {
	e := &exposed{Name: "t", Raw: json.RawMessage(`{"name":"t","inputSchema":{"type":"object"}}`)}
	if a, b := e.compiled(), e.compiled(); a != b || a.in == nil || a.in != b.in {
		t.Fatal("schemas compiled twice")
	}
}

// FuzzCheckArguments: validation never panics, and every error is a bounded "/…: …" string.
func FuzzCheckArguments(f *testing.F) {
	f.Add(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`, `{"q":5}`)
	f.Add(`{"additionalProperties":false}`, `{"a":{"b":[1,2,3]}}`)
	f.Add(`{"oneOf":[{"type":"string"},{"type":"integer"}]}`, `"x"`)
	f.Add(`{"properties":{"a":{"$ref":"#"}}}`, `{"a":{"a":{"a":1}}}`)
	f.Fuzz(func(t *testing.T, schema, args string) {
		if !json.Valid([]byte(schema)) {
			return
		}
		raw, _ := json.Marshal(map[string]any{"name": "t", "inputSchema": json.RawMessage(schema)})
		e := &exposed{Name: "t", Raw: raw}
		for _, msg := range e.compiled().checkArguments(json.RawMessage(args)) {
			if !strings.HasPrefix(msg, "/") || !strings.Contains(msg, ": ") || len(msg) > 1000 {
				t.Fatalf("bad error %q", msg)
			}
		}
	})
}
