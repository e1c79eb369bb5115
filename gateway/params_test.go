package gateway

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/lush-agents/lush/internal/mcphttp"
)

// randParamsJSON is random JSON text shaped like params: mostly objects, with keys and values of
// every kind, whitespace anywhere, duplicate and escaped keys, and now and then something that is
// not an object or not JSON at all.
func randParamsJSON(r *rand.Rand) string {
	switch r.IntN(12) {
	case 0:
		return []string{"", "null", " null ", "[]", `[{"a":1}]`, `"x"`, "1", "true", "{", `{"a":}`, `{"a":1,}`,
			`{"a" 1}`, `{"a":1}{`, `{"a":1} x`, "{}", " { } ", `{"a":tru}`, "\xff", `{"\xff":1}`}[r.IntN(19)]
	case 1: // mangled: cut short or with a byte changed
		s := randObject(r, 0)
		if r.IntN(2) == 0 && len(s) > 1 {
			return s[:r.IntN(len(s))]
		}
		b := []byte(s)
		const bytes = `{}[]",: \a1\`
		b[r.IntN(len(b))] = bytes[r.IntN(len(bytes))]
		return string(b)
	}
	return ws(r) + randObject(r, 0) + ws(r)
}

func ws(r *rand.Rand) string {
	return []string{"", "", "", " ", "\n\t", "\r\n  "}[r.IntN(6)]
}

var paramKeys = []string{"name", "arguments", "_meta", "uri", "cursor", "ref", "", "a b", `q\"uote`, `\u006eame`,
	"n\\u0061me", "é", "<&>", "NAME", "Name", `back\\slash`}

func randObject(r *rand.Rand, depth int) string {
	var b strings.Builder
	b.WriteString("{" + ws(r))
	for i := range r.IntN(5) {
		if i > 0 {
			b.WriteString(ws(r) + "," + ws(r))
		}
		b.WriteString(`"` + paramKeys[r.IntN(len(paramKeys))] + `"` + ws(r) + ":" + ws(r) + randValue(r, depth+1))
	}
	b.WriteString(ws(r) + "}")
	return b.String()
}

func randValue(r *rand.Rand, depth int) string {
	n := 9
	if depth > 3 {
		n = 6
	}
	switch r.IntN(n) {
	case 0:
		return []string{"null", "true", "false"}[r.IntN(3)]
	case 1:
		return []string{"0", "-1", "1.5e10", "12345678901234567890", "-0.0", "3E-7"}[r.IntN(6)]
	case 2, 3:
		return `"` + []string{"", "ping", `a\"b`, `\\`, `\u00e9\n`, "é", "}]", ",:", `{"x":1}`, "/etc/passwd"}[r.IntN(10)] + `"`
	case 4, 5:
		return `"` + paramKeys[r.IntN(len(paramKeys))] + `"`
	case 6, 7:
		return randObject(r, depth)
	default:
		var b strings.Builder
		b.WriteString("[" + ws(r))
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteString("," + ws(r))
			}
			b.WriteString(randValue(r, depth+1) + ws(r))
		}
		b.WriteString("]")
		return b.String()
	}
}

// TestSplitObjectIsUnmarshal compares params (its own decoder, and json.Unmarshal where that
// declines) with json.Unmarshal into the map on random and adversarial params.
func TestSplitObjectIsUnmarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 2))
	split := 0
	for i := range 50000 {
		data := randParamsJSON(r)
		var want map[string]json.RawMessage
		json.Unmarshal([]byte(data), &want)
		if want == nil {
			want = map[string]json.RawMessage{}
		}
		got := params(&mcphttp.Request{Params: json.RawMessage(data)})
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("params %d %q:\ngot  %q\nwant %q", i, data, got, want)
		}
		own, ok := splitObject([]byte(data))
		if !ok {
			continue
		}
		split++
		for k, v := range own { // a value's capacity ends with it: appending to it cannot write into the params
			if len(v) != cap(v) {
				t.Fatalf("params %d %q: value of %q has room beyond it", i, data, k)
			}
		}
	}
	if split < 10000 {
		t.Errorf("only %d of 50000 params took the own decoder: the comparison tests little", split)
	}
}
