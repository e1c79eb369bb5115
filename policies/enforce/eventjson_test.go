package enforce

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/lush-agents/lush/policies/authz"
)

// adversarialStrings are strings encoding/json escapes in every way it has.
var adversarialStrings = []string{"", "a", "tools/call", `"`, `\`, `a"b\c`, "<script>&amp;</script>", "\u2028\u2029",
	"é", "日本", "\x00", "\x1f", "\n\r\t\b\f", "\x7f", "\xff", "a\xc3", "\ufffd", "😀", "group:eng", "/etc/passwd",
	strings.Repeat("x", 300), `{"a":1}`, "null", "1e21"}

// adversarialFloats are numbers at the edges of encoding/json's float formats.
var adversarialFloats = []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 123.456, 1e20, 1e21, -1e21, 1e-6, 1e-7,
	-1.5e-9, 999999999999999999999, math.MaxFloat64, math.SmallestNonzeroFloat64, 1e100, 1e-100, 2.5e-5, 100,
	math.Inf(1), math.NaN()}

// randString is a random string: in a clean rand (see clean), printable ASCII, HTML characters
// and JSON's own escapes included, which the writer writes itself; otherwise also control
// characters, non-ASCII and invalid UTF-8.
func (g gen) str() string {
	r := g.r
	if g.clean {
		const ascii = "abcXYZ019 _-./:<>&\"\\{}[],"
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = ascii[r.IntN(len(ascii))]
		}
		return string(b)
	}
	if r.IntN(3) == 0 {
		return adversarialStrings[r.IntN(len(adversarialStrings))]
	}
	const alphabet = "abcXYZ019 _-./:<>&\"\\é\n"
	var b strings.Builder
	for range r.IntN(12) {
		if r.IntN(20) == 0 {
			b.WriteRune(rune(r.IntN(0x3000)))
			continue
		}
		b.WriteByte(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// gen makes random values; a clean gen only strings and numbers the writer writes itself.
type gen struct {
	r     *rand.Rand
	clean bool
}

// randJSON is a random value of the kinds decoded JSON has (and the ints of omitted arguments).
func (g gen) json(depth int) any {
	r := g.r
	n := 9
	if depth > 3 {
		n = 6
	}
	switch r.IntN(n) {
	case 0:
		return nil
	case 1:
		return g.str()
	case 2:
		return r.IntN(2) == 0
	case 3:
		if f := adversarialFloats[r.IntN(len(adversarialFloats))]; r.IntN(2) == 0 && (!g.clean || !math.IsNaN(f) && !math.IsInf(f, 0)) {
			return f
		}
		return (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(50)-25))
	case 4:
		return float64(r.IntN(2000) - 1000)
	case 5:
		return r.IntN(1 << 20)
	case 6, 7:
		if r.IntN(10) == 0 {
			return map[string]any(nil)
		}
		m := map[string]any{}
		for range r.IntN(5) {
			m[g.str()] = g.json(depth + 1)
		}
		return m
	default:
		if r.IntN(10) == 0 {
			return []any(nil)
		}
		a := []any{}
		for range r.IntN(5) {
			a = append(a, g.json(depth+1))
		}
		return a
	}
}

// fill sets every field of v (a pointer) to a random value, by reflection, so that a field added
// to authz.Input or authz.Decision is in the comparison without anyone adding it here.
func (g gen) fill(v reflect.Value) {
	r := g.r
	switch v.Kind() {
	case reflect.String:
		v.SetString(g.str())
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int, reflect.Int64:
		switch r.IntN(3) {
		case 0:
			v.SetInt(0)
		case 1:
			v.SetInt(r.Int64() - math.MaxInt64/2)
		default:
			v.SetInt(int64(r.IntN(100)))
		}
	case reflect.Pointer:
		if r.IntN(3) == 0 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		g.fill(p.Elem())
		v.Set(p)
	case reflect.Slice:
		switch r.IntN(4) {
		case 0:
			v.SetZero()
			return
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		n := 1 + r.IntN(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range s.Len() {
			g.fill(s.Index(i))
		}
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				g.fill(v.Field(i))
			}
		}
	case reflect.Interface:
		if x := g.json(0); x != nil {
			v.Set(reflect.ValueOf(x))
		} else {
			v.SetZero()
		}
	default:
		panic("fill: a field of kind " + v.Kind().String() + ": teach fill and the writer about it")
	}
}

func marshalOrNil(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// TestInputJSONIsMarshal compares inputJSON and decisionJSON with json.Marshal on random and
// adversarial inputs and decisions (every field filled at random, by reflection).
func TestInputJSONIsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 1))
	fast := 0
	for i := range 20000 {
		g := gen{r: r, clean: i%2 == 0}
		var in authz.Input
		g.fill(reflect.ValueOf(&in).Elem())
		if got, want := inputJSON(&in), marshalOrNil(in); !bytes.Equal(got, want) {
			t.Fatalf("input %d: inputJSON = %s\njson.Marshal = %s", i, got, want)
		}
		var d authz.Decision
		g.fill(reflect.ValueOf(&d).Elem())
		if got, want := decisionJSON(&d), marshalOrNil(d); !bytes.Equal(got, want) {
			t.Fatalf("decision %d: decisionJSON = %s\njson.Marshal = %s", i, got, want)
		}
		w := getJSONWriter()
		w.input(&in)
		if !w.slow {
			fast++
		}
		putJSONWriter(w)
	}
	if fast < 100 {
		t.Errorf("only %d of 20000 random inputs took the writer's own path: the comparison tests little", fast)
	}
}

// TestInputJSONTypical compares the inputs the gateway sends most (ASCII strings, object
// arguments), which the writer writes itself, and the arguments of a call refused for its size.
func TestInputJSONTypical(t *testing.T) {
	valid := false
	for _, in := range []authz.Input{
		{},
		{Action: authz.ActionToolsCall, Principal: authz.Principal{ID: "user:alice", Groups: []string{"group:eng"}, Authentication: "apikey"},
			Agent: "assistant", Chain: []string{"assistant"}, Tool: &authz.Tool{Ref: "mcp://tests/echo", Name: "echo"},
			Arguments: map[string]any{"text": "ping <&>", "n": 1.5, "list": []any{true, nil, 1e21, "x"}}, Environment: "dev"},
		{Action: authz.ActionToolsCall, Tool: &authz.Tool{Ref: "r", ArgumentsValid: &valid, SchemaErrors: []string{"/a: bad"}},
			Arguments: map[string]any{OmittedArguments: map[string]any{"bytes": 1 << 21, "problem": "too large"}}},
		{Arguments: map[string]any{"deep": nest(300)}},
	} {
		if got, want := inputJSON(&in), marshalOrNil(in); !bytes.Equal(got, want) {
			t.Errorf("inputJSON = %s\njson.Marshal = %s", got, want)
		}
	}
	d := deny("lush.test", "a <reason>")
	if got, want := decisionJSON(&d), marshalOrNil(d); !bytes.Equal(got, want) {
		t.Errorf("decisionJSON = %s\njson.Marshal = %s", got, want)
	}
}

func nest(n int) any {
	var v any = "leaf"
	for range n {
		v = []any{v}
	}
	return v
}
