package decisionlog

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/lush-agents/lush/policies/authz"
)

func TestApplyMask(t *testing.T) {
	const input = `{"action":"tools/call","arguments":{"path":"a.md","password":"hunter2","token":"tok-VALUE-42","nested":{"deep":{"key":"k"}},` +
		`"list":["x","y","z"],"items":[{"secret":"s0"},{"secret":"s1"}],"a/b":1,"m~n":2,"n":12345678901234567890}}`
	rm := func(p string) authz.MaskOp { return authz.MaskOp{Op: "remove", Path: p} }
	up := func(p string, v any) authz.MaskOp { return authz.MaskOp{Op: "upsert", Path: p, Value: v} }
	tests := []struct {
		name         string
		input        string
		ops          []authz.MaskOp
		want         string // the masked input; "" means no change
		erased       []string
		masked       []string
		err          string
		notInOutput  []string
		wantUnmasked bool // the whole input is removed because masking failed
	}{
		{name: "remove", ops: []authz.MaskOp{rm("/input/arguments/password")},
			want:   `{"action":"tools/call","arguments":{"a/b":1,"items":[{"secret":"s0"},{"secret":"s1"}],"list":["x","y","z"],"m~n":2,"n":12345678901234567890,"nested":{"deep":{"key":"k"}},"path":"a.md","token":"tok-VALUE-42"}}`,
			erased: []string{"/input/arguments/password"}, notInOutput: []string{"hunter2"}},
		{name: "upsert", ops: []authz.MaskOp{up("/input/arguments/token", "***")},
			masked: []string{"/input/arguments/token"}, notInOutput: []string{"tok-VALUE-42"}},
		{name: "upsert creates missing members", ops: []authz.MaskOp{up("/input/arguments/new/field", map[string]any{"masked": true})},
			masked: []string{"/input/arguments/new/field"}},
		{name: "nested", ops: []authz.MaskOp{rm("/input/arguments/nested/deep/key")},
			erased: []string{"/input/arguments/nested/deep/key"}, notInOutput: []string{`"key"`}},
		{name: "array index remove", ops: []authz.MaskOp{rm("/input/arguments/list/1")},
			erased: []string{"/input/arguments/list/1"}, notInOutput: []string{`"y"`}},
		{name: "array element member", ops: []authz.MaskOp{rm("/input/arguments/items/1/secret"), up("/input/arguments/items/0/secret", "*")},
			erased: []string{"/input/arguments/items/1/secret"}, masked: []string{"/input/arguments/items/0/secret"}, notInOutput: []string{"s0", "s1"}},
		{name: "array index out of range", ops: []authz.MaskOp{rm("/input/arguments/list/3"), up("/input/arguments/list/7", "*"), rm("/input/arguments/list/01"), rm("/input/arguments/list/-")},
			want: input},
		{name: "missing path", ops: []authz.MaskOp{rm("/input/arguments/nope"), rm("/input/nope/deeper"), rm("/input/action/x"), up("/input/action/x", "*")},
			want: input},
		{name: "escaped tokens", ops: []authz.MaskOp{rm("/input/arguments/a~1b"), rm("/input/arguments/m~0n")},
			erased: []string{"/input/arguments/a~1b", "/input/arguments/m~0n"}, notInOutput: []string{`"a/b"`, `"m~n"`}},
		{name: "whole input removed", ops: []authz.MaskOp{rm("/input")}, want: "null", erased: []string{"/input"}},
		{name: "whole input replaced", ops: []authz.MaskOp{up("/input", "redacted")}, want: `"redacted"`, masked: []string{"/input"}},
		{name: "ops apply in order", ops: []authz.MaskOp{up("/input/arguments/password", "*"), rm("/input/arguments/password")},
			masked: []string{"/input/arguments/password"}, erased: []string{"/input/arguments/password"}, notInOutput: []string{"hunter2", `"password"`}},
		{name: "big numbers survive", ops: []authz.MaskOp{rm("/input/action")}, notInOutput: []string{"tools/call"}, erased: []string{"/input/action"}},
		{name: "duplicate keys cannot hide a secret", input: `{"password":"hunter2","password":"x"}`, ops: []authz.MaskOp{rm("/input/password")},
			want: `{}`, erased: []string{"/input/password"}, notInOutput: []string{"hunter2"}},
		{name: "empty input", input: "-", ops: []authz.MaskOp{rm("/input/a"), up("/input/a", 1)}, want: "null"},
		{name: "null input", input: "null", ops: []authz.MaskOp{rm("/input/a"), up("/input/a", 1)}, want: "null"},
		{name: "no ops", ops: nil, want: input},

		// Failures remove the input entirely and name the op, never a value.
		{name: "malformed pointer", ops: []authz.MaskOp{rm("/input/arguments/password"), rm("input/arguments/token")},
			err: `mask op 1 (remove "input/arguments/token"): path must be a JSON pointer starting with "/input"`, wantUnmasked: true},
		{name: "bad escape", ops: []authz.MaskOp{rm("/input/arguments/a~2b")}, err: `"~" must be followed by 0 or 1`, wantUnmasked: true},
		{name: "empty path", ops: []authz.MaskOp{rm("")}, err: "path is empty", wantUnmasked: true},
		{name: "result refused", ops: []authz.MaskOp{rm("/result/allow")}, err: "only the input can be masked", wantUnmasked: true},
		{name: "other root refused", ops: []authz.MaskOp{rm("/inputs/x"), rm("/labels/id")}, err: `path must start with "/input"`, wantUnmasked: true},
		{name: "unknown op", ops: []authz.MaskOp{{Op: "delete", Path: "/input/arguments/password"}}, err: `op must be "remove" or "upsert"`, wantUnmasked: true},
		{name: "value not JSON", ops: []authz.MaskOp{up("/input/arguments/password", make(chan int))}, err: "value of type chan int is not JSON", wantUnmasked: true},
		{name: "input not JSON", input: `{"password":"hunter2"`, ops: []authz.MaskOp{rm("/input/password")}, err: "input is not valid JSON", wantUnmasked: true},
		{name: "input with trailing data", input: `{"a":1} {"password":"hunter2"}`, ops: []authz.MaskOp{rm("/input/a")}, err: "input is not valid JSON", wantUnmasked: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.input
			switch in {
			case "":
				in = input
			case "-":
				in = ""
			}
			e := &Event{Input: json.RawMessage(in)}
			err := ApplyMask(e, tc.ops)
			if tc.err == "" && err != nil {
				t.Fatal(err)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				for _, secret := range []string{"hunter2", "tok-VALUE-42"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error leaks %q: %v", secret, err)
					}
				}
			}
			if tc.wantUnmasked {
				if e.Input != nil || !slices.Equal(e.Erased, []string{"/input"}) || e.Masked != nil {
					t.Errorf("failed masking left input %s erased %v masked %v", e.Input, e.Erased, e.Masked)
				}
				return
			}
			out := string(e.Input)
			if out == "" {
				out = "null"
			}
			if tc.want != "" {
				if tc.want == input && len(tc.ops) > 0 {
					// Unchanged content, re-encoded with sorted keys.
					var a, b any
					json.Unmarshal([]byte(input), &a)
					json.Unmarshal(e.Input, &b)
					aj, _ := json.Marshal(a)
					bj, _ := json.Marshal(b)
					if string(aj) != string(bj) {
						t.Errorf("input changed: %s", out)
					}
				} else if out != tc.want {
					t.Errorf("input = %s\nwant    %s", out, tc.want)
				}
			}
			if !json.Valid([]byte(out)) {
				t.Errorf("output is not JSON: %s", out)
			}
			if strings.Contains(in, "12345678901234567890") && strings.Contains(out, `"n"`) && !strings.Contains(out, "12345678901234567890") {
				t.Errorf("a big number lost precision: %s", out)
			}
			for _, s := range tc.notInOutput {
				if strings.Contains(out, s) {
					t.Errorf("output still contains %s: %s", s, out)
				}
			}
			if !slices.Equal(e.Erased, tc.erased) || !slices.Equal(e.Masked, tc.masked) {
				t.Errorf("erased %v masked %v, want %v %v", e.Erased, e.Masked, tc.erased, tc.masked)
			}
		})
	}
}

func TestApplyMaskAppendsAndUpsertValuesDoNotAlias(t *testing.T) {
	shared := map[string]any{"v": "*"}
	e := &Event{Input: json.RawMessage(`{"a":1,"b":2}`), Erased: []string{"/input/earlier"}}
	err := ApplyMask(e, []authz.MaskOp{
		{Op: "upsert", Path: "/input/a", Value: shared},
		{Op: "upsert", Path: "/input/b", Value: shared},
		{Op: "upsert", Path: "/input/a/v", Value: "changed"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Input) != `{"a":{"v":"changed"},"b":{"v":"*"}}` {
		t.Errorf("input = %s", e.Input)
	}
	if shared["v"] != "*" {
		t.Error("ApplyMask modified an op's value")
	}
	if !slices.Equal(e.Erased, []string{"/input/earlier"}) || len(e.Masked) != 3 {
		t.Errorf("erased %v masked %v", e.Erased, e.Masked)
	}
	if err := ApplyMask(nil, nil); err == nil {
		t.Error("nil event accepted")
	}
}
