package jsonlimit

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// nest is a value nested depth levels deep: depth arrays around a 1 (depth 0: the 1 alone).
func nest(depth int) string {
	return strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth)
}

// values is an object holding n values in all: itself, a list, and n-2 numbers in the list.
func values(n int) string {
	return `{"list":[` + strings.TrimSuffix(strings.Repeat("0,", n-2), ",") + `]}`
}

// Check refuses the first limit a value exceeds, naming the limit, its setting and where; a
// value just under each limit passes.
func TestCheckLimits(t *testing.T) {
	lim := Limits{MaxDepth: 4, MaxNodes: 10, MaxBytes: 64, Setting: "gateway config limits.arguments"}
	for _, tc := range []struct {
		name, json string
		limit      string // the limit exceeded; "" when the value passes
		msg, path  string
	}{
		{"depth at the limit", `{"a":` + nest(3) + `}`, "", "", ""},
		{"depth over the limit", `{"a":` + nest(4) + `}`, LimitDepth,
			"nest more than 4 levels deep; the limit is 4 (gateway config limits.arguments.max_depth)", "/a/0/0/0"},
		{"empty containers count", `[[[[[]]]]]`, LimitDepth, "nest more than 4 levels deep", "/0/0/0/0"},
		{"values at the limit", values(10), "", "", ""},
		{"values over the limit", values(11), LimitNodes,
			"hold more than 10 values; the limit is 10 (gateway config limits.arguments.max_nodes)", "/list/8"},
		{"bytes at the limit", `{"s":"` + strings.Repeat("x", 64-8) + `"}`, "", "", ""},
		{"bytes over the limit", `{"s":"` + strings.Repeat("x", 64-7) + `"}`, LimitBytes,
			"are 65 bytes; the limit is 64 (gateway config limits.arguments.max_bytes)", ""},
		{"scalars and whitespace", " {\"a\" : [ true , false , null , -1.5e+3 ] } ", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !json.Valid([]byte(tc.json)) {
				t.Fatalf("test value %s is not JSON", tc.json)
			}
			err := lim.Check([]byte(tc.json))
			if tc.limit == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("passed")
			}
			if err.Limit != tc.limit || !strings.Contains(err.Error(), tc.msg) || err.Path != tc.path || err.Bytes != int64(len(tc.json)) {
				t.Errorf("got limit %q, path %q, bytes %d, %q; want %q at %q, %q", err.Limit, err.Path, err.Bytes, err, tc.limit, tc.path, tc.msg)
			}
		})
	}
}

// Strings must be text: invalid UTF-8 and unpaired surrogate escapes, which decoders replace with
// U+FFFD, are refused with the path of the string (or, for a member name, of its object).
func TestCheckText(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		msg, path  string // msg "": the value passes
	}{
		{"valid UTF-8 and escapes", `{"a":"héllo \u00e9 \ud83d\ude00 😀 \" \\ \/ \b\f\n\r\t"}`, "", ""},
		{"U+FFFD itself", `{"a":"` + string(utf8.RuneError) + `"}`, "", ""},
		{"invalid byte", "{\"a\":[\"ok\",\"bad \xff\"]}", "hold a string with invalid UTF-8 at /a/1", "/a/1"},
		{"truncated sequence", "{\"a\":{\"b\":\"\xe2\x82\"}}", "invalid UTF-8 at /a/b", "/a/b"},
		{"encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", "invalid UTF-8 at /a", "/a"},
		{"lone high surrogate", `{"a":"\ud800"}`, "an unpaired UTF-16 surrogate escape at /a", "/a"},
		{"high surrogate then text", `{"a":"\ud800\u0041"}`, "unpaired", "/a"},
		{"lone low surrogate", `{"a":["\udc00"]}`, "unpaired UTF-16 surrogate escape at /a/0", "/a/0"},
		{"member name", "{\"a\":{\"ok\":1,\"b\xffd\":2}}", "hold a member name with invalid UTF-8 at /a", "/a"},
		{"top-level member name", "{\"b\xff\":2}", "hold a member name with invalid UTF-8: send", ""},
		{"escaped names in the path", `{"a/b~c\u0041":["\ud800"]}`, "at /a~1b~0cA/0", "/a~1b~0cA/0"},
		{"control characters in the path", `{"a\nb\u0000":"\ud800"}`, `at /a\u000ab\u0000:`, `/a\u000ab\u0000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Limits{}.Check([]byte(tc.json))
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || err.Limit != "" || !strings.Contains(err.Error(), tc.msg) || err.Path != tc.path {
				t.Fatalf("got %v (path %q), want %q at %q", err, errPath(err), tc.msg, tc.path)
			}
			if !utf8.ValidString(err.Error()) {
				t.Errorf("the message is not UTF-8: %q", err)
			}
		})
	}
}

func errPath(err *Error) string {
	if err == nil {
		return ""
	}
	return err.Path
}

// Text that is not one JSON value is refused, never passed.
func TestCheckSyntax(t *testing.T) {
	for _, bad := range []string{``, ` `, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{"a":1}{}`, `{1:2}`,
		`tru`, `nul`, `01`, `-`, `1.`, `1e`, `.5`, `"\x"`, `"\u12"`, `"\u12g4"`, "\"a\tb\"", `"open`, `[}`, `{]`} {
		if err := (Limits{}).Check([]byte(bad)); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// Long paths are bounded: a deep value's error names a pointer of at most a few hundred bytes.
func TestCheckPathBounded(t *testing.T) {
	long := strings.Repeat("k", 500)
	doc := strings.Repeat(`{"`+long+`":`, 60) + `"\ud800"` + strings.Repeat("}", 60)
	err := Limits{}.Check([]byte(doc))
	if err == nil || len(err.Path) > maxPath+len("…") || len(err.Error()) > 400 {
		t.Fatalf("%d-byte path, %d-byte message: %v", len(errPath(err)), len(err.Error()), err)
	}
}

// Config validation names the field at fault; zero fields are the defaults.
func TestValidate(t *testing.T) {
	if err := (Limits{}).Validate("limits.arguments"); err != nil {
		t.Error(err)
	}
	if got := (Limits{}).WithDefaults(); got.MaxDepth != DefaultMaxDepth || got.MaxNodes != DefaultMaxNodes || got.MaxBytes != DefaultMaxBytes {
		t.Errorf("defaults %+v", got)
	}
	for _, tc := range []struct {
		lim  Limits
		want string
	}{
		{Limits{MaxDepth: -1}, "limits.arguments.max_depth: -1 is not between 1 and 10000"},
		{Limits{MaxDepth: 10001}, "limits.arguments.max_depth: 10001"},
		{Limits{MaxNodes: -5}, "limits.arguments.max_nodes: -5 must be positive"},
		{Limits{MaxBytes: -1}, "limits.arguments.max_bytes: -1 must be positive"},
	} {
		if err := tc.lim.Validate("limits.arguments"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.lim, err, tc.want)
		}
	}
}

// FuzzCheck: with limits too high to matter, Check passes exactly the JSON values whose strings
// are all text (encoding/json's validity, and no string that decodes to U+FFFD from something
// else), and never panics.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `"\ud800"`, `"\ud83d\ude00"`, "\"\xff\"", `[1e5,-0.5,true]`, `{"a":"\u00e9"}`, `0`, `[[[]]]`} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxDepth: MaxDepthLimit, MaxNodes: 1 << 30, MaxBytes: 1 << 30}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := lim.Check(data)
		valid := json.Valid(data) && textOnly(data)
		if (err == nil) != valid {
			t.Fatalf("%q: Check says %v, encoding/json valid and text: %v", data, err, valid)
		}
	})
}

// textOnly reports whether every string (and member name) of a valid JSON value is text: valid
// UTF-8, each \u escape of a UTF-16 surrogate one of a high-low pair. It finds each string's raw
// form with encoding/json's tokenizer.
func textOnly(data []byte) bool {
	if !utf8.Valid(data) {
		return false // outside strings, JSON is ASCII
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	prev := int64(0)
	for {
		tok, err := dec.Token()
		if err != nil {
			return true
		}
		raw := strings.TrimLeft(string(data[prev:dec.InputOffset()]), " \t\r\n:,")
		prev = dec.InputOffset()
		if _, ok := tok.(string); ok && !pairedSurrogates(raw) {
			return false
		}
	}
}

// pairedSurrogates reports whether the \u escapes of a raw JSON string spell no unpaired
// surrogate.
func pairedSurrogates(raw string) bool {
	hex := func(i int) int {
		n := 0
		fmt.Sscanf(raw[i:i+4], "%04x", &n)
		return n
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++
			continue
		}
		switch r := hex(i + 2); {
		case r >= 0xDC00 && r <= 0xDFFF:
			return false
		case r >= 0xD800 && r <= 0xDBFF:
			if !strings.HasPrefix(raw[i+6:], "\\u") {
				return false
			}
			if lo := hex(i + 8); lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 11
		default:
			i += 5
		}
	}
	return true
}
