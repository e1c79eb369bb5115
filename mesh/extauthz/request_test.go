package extauthz

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// reference decodes an object token by token, the slow and obvious way: nil when it is not an
// object, dup when a member appears twice.
func reference(b []byte) (out map[string]json.RawMessage, dup bool) {
	if !json.Valid(b) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, _ := dec.Token(); t != json.Delim('{') {
		return nil, false
	}
	out = map[string]json.RawMessage{}
	for dec.More() {
		t, _ := dec.Token()
		name := t.(string)
		var v json.RawMessage
		dec.Decode(&v)
		if _, ok := out[name]; ok {
			dup = true
		}
		out[name] = v
	}
	return out, dup
}

func TestDecodeObject(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{`{"a":1,"b":{"a":2,"a":3}}`, ""}, // nested names are not the object's
		{`{"a":"x\"y:","b":[{"a":1}],"c":"\\"}`, ""},
		{`{"a":1, "a" :2}`, `member "a" appears twice`},
		{`{"n\u0061me":1,"name":2}`, `member "name" appears twice`},
		{`{"a":1} {}`, "invalid character"},
		{`[1]`, "not a JSON object"},
		{`null`, "not a JSON object"},
		{`"{}"`, "not a JSON object"},
	} {
		_, err := decodeObject([]byte(tc.in))
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.err)
		}
	}
}

// FuzzDecodeObject: decodeObject accepts exactly the objects without duplicate members, and
// reads them as the token-by-token reference does.
func FuzzDecodeObject(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"a":1}}`, `{"a\"":1,"a":2}`, `{"\\":1,"\\\\":2}`, `{}`, `{"a" :1,"a"	:2}`, `{"n\u0061me":1,"name":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeObject(b)
		want, dup := reference(b)
		switch {
		case want == nil || dup:
			if err == nil {
				t.Fatalf("%q accepted (reference: object %v, duplicate %v)", b, want != nil, dup)
			}
		case err != nil:
			t.Fatalf("%q refused: %v", b, err)
		case len(got) != len(want):
			t.Fatalf("%q: %d members, reference %d", b, len(got), len(want))
		}
	})
}
