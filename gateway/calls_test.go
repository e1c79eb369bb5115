package gateway

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
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

// forwardParams builds the same params as the map the gateway used to copy and marshal: equal
// JSON values, on random and adversarial params (odd keys and names, escapes, duplicate members
// inside the arguments, whitespace, deep values, a _meta kept or replaced).
func TestForwardParamsIsTheMarshalledMap(t *testing.T) {
	old := func(p map[string]json.RawMessage, name string, meta json.RawMessage) []byte {
		out := map[string]json.RawMessage{}
		for k, v := range p {
			out[k] = v
		}
		out["name"], _ = json.Marshal(name)
		if meta != nil {
			out["_meta"] = meta
		}
		b, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	keys := []string{"name", "arguments", "_meta", "task", "", "a\"b", "<x>&", "é", "\u2028", "\x01", "zz", "Name"}
	values := []string{`{}`, `null`, `"x"`, `{"text":"ping"}`, `{"a":1,"a":2}`, "{ \"p\" :\n [1, 2.50, 1e300] }",
		`"<script>\u0026</script>"`, `"\ud800"`, `[[[[{"k":{"k":[]}}]]]]`, `true`, `-0`, `"\u2028"`}
	names := []string{"echo", "", "a\"b", "<tool>&", "é\u2028", "\xff", "read_file"}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		p := map[string]json.RawMessage{}
		for range r.IntN(5) {
			p[keys[r.IntN(len(keys))]] = json.RawMessage(values[r.IntN(len(values))])
		}
		if r.IntN(3) == 0 {
			p["_meta"] = json.RawMessage(`{"progressToken":` + values[r.IntN(len(values))] + `,"x":"<&>"}`)
		}
		var meta json.RawMessage // as forwardCall does
		if progressToken(p) != nil {
			meta = withProgressToken(p["_meta"], "lush-"+names[r.IntN(len(names))])
		}
		name := names[r.IntN(len(names))]
		got, want := forwardParams(p, name, meta), old(p, name, meta)
		g, err := decodeNumbers(got)
		if err != nil {
			t.Fatalf("case %d: %s: %v", i, got, err)
		}
		if w, _ := decodeNumbers(want); !reflect.DeepEqual(g, w) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// isErrorResult answers as decoding every result does, on results that name isError in any
// case, with escapes, nested, in strings, invalid, or not at all.
func TestIsErrorResultIsTheDecodedField(t *testing.T) {
	decoded := func(raw []byte) bool {
		var r struct {
			IsError bool `json:"isError"`
		}
		return json.Unmarshal(raw, &r) == nil && r.IsError
	}
	keys := []string{`"isError"`, `"ISERROR"`, `"iſError"`, `"is\u0045rror"`, `"\u0069sError"`, `"isErr"`, `"is_error"`, `"text"`, `"content"`, `"IsError"`}
	values := []string{`true`, `false`, `null`, `1`, `"true"`, `{"isError":true}`, `[true]`, `"error: isError"`}
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 20000 {
		var b bytes.Buffer
		b.WriteByte('{')
		for j := range r.IntN(4) {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(keys[r.IntN(len(keys))] + ":" + values[r.IntN(len(values))])
		}
		b.WriteByte('}')
		raw := b.Bytes()
		if r.IntN(10) == 0 {
			raw = raw[:r.IntN(len(raw)+1)] // invalid
		}
		if got, want := isErrorResult(raw), decoded(raw); got != want {
			t.Fatalf("case %d: %s: %v, decoding says %v", i, raw, got, want)
		}
	}
}

// TestProgressToken: the client's progress token is found, or not, whatever params hold.
func TestProgressToken(t *testing.T) {
	for _, tc := range []struct{ params, want string }{
		{`{}`, ``},
		{`{"name":"x","arguments":{"_meta":{"progressToken":1}}}`, ``},
		{`{"_meta":null}`, ``},
		{`{"_meta":{}}`, ``},
		{`{"_meta":[1]}`, ``},
		{`{"_meta":{"progressToken":null}}`, ``},
		{`{"_meta":{"progressToken":7}}`, `7`},
		{`{"_meta":{"progressToken":"t-1","other":true}}`, `"t-1"`},
	} {
		var p map[string]json.RawMessage
		if err := json.Unmarshal([]byte(tc.params), &p); err != nil {
			t.Fatal(err)
		}
		if got := progressToken(p); string(got) != tc.want {
			t.Errorf("%s: got %q, want %q", tc.params, got, tc.want)
		}
	}
}
