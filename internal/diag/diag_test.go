package diag

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestClosest(t *testing.T) {
	cands := []string{"model", "description", "tools", "skills", "acl", "name"}
	tests := []struct {
		word, want string
		ok         bool
	}{
		{"modle", "model", true}, // transposition
		{"descripton", "description", true},
		{"tool", "tools", true},
		{"acls", "acl", true},
		{"banana", "", false},
		{"x", "", false},
	}
	for _, tt := range tests {
		got, ok := Closest(tt.word, cands)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Closest(%q) = %q, %v; want %q, %v", tt.word, got, ok, tt.want, tt.ok)
		}
	}
}

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"ab", "ba", 1}, {"read", "raed", 1},
	}
	for _, tt := range tests {
		if got := distance(tt.a, tt.b); got != tt.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestListSortedAndText(t *testing.T) {
	var l List
	l.SetStep(StepParse)
	l.Warnf(Pos{File: "b.yaml", Line: 1}, "w", "second file")
	l.ErrorHint(Pos{File: "a.yaml", Line: 3, Col: 8}, "unknown-model", `did you mean "gemini-2.5-flash"?`, "unknown model %q", "gpt-5")
	l.Errorf(Pos{File: "a.yaml", Line: 1, Col: 1}, "x", "first")
	l.Errorf(Pos{File: "a.yaml", Line: 1, Col: 1}, "x", "first") // duplicate is dropped
	if !l.HasErrors() {
		t.Fatal("HasErrors = false")
	}
	if e, w := l.Counts(); e != 3 || w != 1 {
		t.Fatalf("Counts = %d, %d", e, w)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, l.Sorted()); err != nil {
		t.Fatal(err)
	}
	want := "a.yaml:1:1\n  ✗ first\n" +
		"a.yaml:3:8\n  ✗ unknown model \"gpt-5\"\n    did you mean \"gemini-2.5-flash\"?\n" +
		"b.yaml:1\n  ⚠ warning: second file\n"
	if buf.String() != want {
		t.Errorf("text =\n%s\nwant\n%s", buf.String(), want)
	}
	js, err := json.Marshal(&l)
	if err != nil {
		t.Fatal(err)
	}
	var back []Diagnostic
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != 3 || back[1].Code != "unknown-model" || back[1].Line != 3 || back[1].Step != StepParse || back[2].Severity != Warning {
		t.Errorf("json round trip = %+v", back)
	}
	if got := Summary(1, 2); got != "1 error, 2 warnings" {
		t.Errorf("Summary = %q", got)
	}
}
