package decisionlog

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/lush-agents/lush/policies/authz"
)

// FuzzApplyMask: for arbitrary input JSON and pointers, ApplyMask never panics, always leaves
// valid JSON (or no input), and never leaves a removed or replaced value in the output. To check
// the last, a value the pointer names is first replaced by a sentinel found nowhere else.
func FuzzApplyMask(f *testing.F) {
	f.Add([]byte(`{"arguments":{"password":"hunter2"}}`), "/input/arguments/password", "/input/x", byte(0))
	f.Add([]byte(`{"a":[1,{"b":[2,3]}]}`), "/input/a/1/b/0", "/input/a/0", byte(1))
	f.Add([]byte(`[1,2,3]`), "/input/1", "/input/-", byte(2))
	f.Add([]byte(`{"a~b":{"c/d":1}}`), "/input/a~0b/c~1d", "/input/a~2", byte(3))
	f.Add([]byte(`{"p":"x","p":"y"}`), "/input/p", "/result/allow", byte(0))
	f.Add([]byte(`"just a string"`), "/input", "/input/x", byte(1))
	f.Add([]byte(`{"a":{"b":{}}}`), "/input/a/b/c/d", "", byte(3))
	f.Add([]byte(`{"x":1`), "/input/x", "/input/x", byte(0))
	f.Fuzz(func(t *testing.T, input []byte, p1, p2 string, mode byte) {
		ops := []authz.MaskOp{opFor(mode, p1), opFor(mode>>2, p2)}

		// Robustness on the raw input.
		e := &Event{Input: json.RawMessage(slicesClone(input))}
		err := ApplyMask(e, ops)
		checkMasked(t, e, err)

		// Secrecy: plant a sentinel at p1 and mask p1.
		if !json.Valid(input) {
			return
		}
		const sentinel = "SENTINEL-7f3a9c"
		if bytes.Contains(input, []byte("SENTINEL")) || strings.Contains(p1+p2, "SENTINEL") {
			return
		}
		var doc any
		if err := json.Unmarshal(input, &doc); err != nil {
			return
		}
		tokens, ok := fuzzTokens(p1)
		if !ok {
			return
		}
		doc, planted := plant(doc, tokens, sentinel)
		if !planted {
			return
		}
		planted2, _ := json.Marshal(doc)
		e = &Event{Input: planted2}
		err = ApplyMask(e, ops)
		checkMasked(t, e, err)
		if bytes.Contains(e.Input, []byte(sentinel)) {
			t.Fatalf("%v left the value at %q in %s", ops, p1, e.Input)
		}
	})
}

func opFor(mode byte, path string) authz.MaskOp {
	if mode&1 == 0 {
		return authz.MaskOp{Op: "remove", Path: path}
	}
	return authz.MaskOp{Op: "upsert", Path: path, Value: "***"}
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

func checkMasked(t *testing.T, e *Event, err error) {
	t.Helper()
	if err != nil {
		if e.Input != nil || len(e.Erased) != 1 || e.Erased[0] != "/input" || e.Masked != nil {
			t.Fatalf("failed masking (%v) left input %s", err, e.Input)
		}
		return
	}
	if e.Input != nil && !json.Valid(e.Input) {
		t.Fatalf("output is not JSON: %q", e.Input)
	}
}

// fuzzTokens is an independent reading of a pointer under /input (RFC 6901).
func fuzzTokens(p string) ([]string, bool) {
	if p != "/input" && !strings.HasPrefix(p, "/input/") {
		return nil, false
	}
	var out []string
	for _, raw := range strings.Split(p, "/")[2:] {
		if strings.Count(raw, "~") != strings.Count(raw, "~0")+strings.Count(raw, "~1") {
			return nil, false
		}
		out = append(out, strings.NewReplacer("~1", "/", "~0", "~").Replace(raw))
	}
	return out, true
}

// plant replaces the value at tokens with s, if the pointer names an existing value.
func plant(node any, tokens []string, s string) (any, bool) {
	if len(tokens) == 0 {
		return s, true
	}
	switch v := node.(type) {
	case map[string]any:
		child, ok := v[tokens[0]]
		if !ok {
			return node, false
		}
		nc, ok := plant(child, tokens[1:], s)
		v[tokens[0]] = nc
		return v, ok
	case []any:
		i, err := strconv.Atoi(tokens[0])
		if err != nil || i < 0 || i >= len(v) || strconv.Itoa(i) != tokens[0] {
			return node, false
		}
		nc, ok := plant(v[i], tokens[1:], s)
		v[i] = nc
		return v, ok
	}
	return node, false
}

// FuzzParsePublicKey: `lushctl audit verify --public-key` reads any file; a key comes back only
// when the input holds an Ed25519 public key, and nothing panics.
func FuzzParsePublicKey(f *testing.F) {
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n"))
	f.Add([]byte("19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1\n"))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte("zz"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pub, err := ParsePublicKey(data)
		if err == nil && len(pub) != ed25519.PublicKeySize {
			t.Fatalf("a %d-byte key", len(pub))
		}
	})
}
