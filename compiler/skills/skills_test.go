package skills

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lush-agents/lush/internal/diag"
)

func writeSkill(t *testing.T, root, ref, body string) string {
	t.Helper()
	r, err := ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "skills", filepath.FromSlash(r.dir()))
	if err := os.MkdirAll(filepath.Join(dir, "tools", "lint"), 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(dir, SkillFile), []byte(body), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "tools", "lint", "tool.yaml"), []byte("description: lint\ncommand: ./run\n"), 0o644))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const skillMD = "---\nname: code-review\ndescription: Reviews code.\nversion: \"1.0\"\n---\n\nReview carefully.\n"

func TestParseRef(t *testing.T) {
	r, err := ParseRef("skills.sh/acme/code-review@1.0")
	if err != nil || r.String() != "skills.sh/acme/code-review@1.0" || r.Unversioned() != "skills.sh/acme/code-review" {
		t.Fatalf("ParseRef = %+v, %v", r, err)
	}
	for in, want := range map[string]string{
		"skills.sh/acme/code-review":     "has no version",
		"acme/code-review@1.0":           "must be <registry>/<namespace>/<name>@<version>",
		"Skills.sh/acme/x@1":             "registry",
		"skills.sh/acme/x@latest":        "is not a version",
		"skills.sh/../x@1":               "namespace and name",
		"skills.sh/acme/code review@1.0": "namespace and name",
	} {
		if _, err := ParseRef(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRef(%q) error = %v, want %q", in, err, want)
		}
	}
}

func TestResolveDigestAndLock(t *testing.T) {
	root := t.TempDir()
	dir := writeSkill(t, root, "skills.sh/acme/code-review@1.0", skillMD)
	res := NewResolver(root, "skills")
	ref, _ := ParseRef("skills.sh/acme/code-review@1.0")
	var l diag.List
	s := res.Resolve(ref, diag.Pos{File: "agents/a/spec.yaml", Line: 5}, &l)
	if s == nil || l.HasErrors() {
		t.Fatalf("resolve: %v", l.Sorted())
	}
	if s.Fragment != "Review carefully." || s.Description != "Reviews code." || s.Dir != "skills/skills.sh/acme/code-review/1.0" {
		t.Errorf("skill = %+v", s)
	}
	if len(s.Tools) != 1 || s.Tools[0] != "lint" {
		t.Errorf("tools = %v", s.Tools)
	}

	// The same content elsewhere, with CRLF line endings, digests the same.
	other := t.TempDir()
	writeSkill(t, other, "skills.sh/acme/code-review@1.0", strings.ReplaceAll(skillMD, "\n", "\r\n"))
	s2 := NewResolver(other, "skills").Resolve(ref, diag.Pos{}, &l)
	if s2 == nil || s2.Digest != s.Digest {
		t.Errorf("digest differs across copies: %v vs %v", s.Digest, s2)
	}

	// No lock yet: an error that says how to fix it.
	lock, _ := ReadLock(root, &l)
	used := map[Ref]diag.Pos{ref: {File: "agents/a/spec.yaml", Line: 5}}
	var lv diag.List
	lock.Verify([]*Skill{s}, used, &lv)
	if got := lv.Sorted(); len(got) != 1 || got[0].Code != "lock-missing" || !strings.Contains(got[0].Suggestion, "lushctl skills lock") {
		t.Errorf("verify without lock = %v", got)
	}

	must(t, WriteLock(root, []*Skill{s}))
	lock, data := ReadLock(root, &l)
	if !strings.Contains(string(data), "skills.sh/acme/code-review@1.0: "+s.Digest) {
		t.Errorf("lock = %s", data)
	}
	lv = diag.List{}
	lock.Verify([]*Skill{s}, used, &lv)
	if lv.HasErrors() {
		t.Errorf("verify after lock: %v", lv.Sorted())
	}

	// Changing the skill breaks the lock, at the lock entry's line.
	must(t, os.WriteFile(filepath.Join(dir, SkillFile), []byte(skillMD+"Also be kind.\n"), 0o644))
	changed := NewResolver(root, "skills").Resolve(ref, diag.Pos{}, &l)
	lv = diag.List{}
	lock.Verify([]*Skill{changed}, used, &lv)
	if got := lv.Sorted(); len(got) != 1 || got[0].Code != "lock-mismatch" || got[0].Line != 5 {
		t.Errorf("verify after change = %+v", got)
	}

	// A pinned skill nobody uses is a warning.
	lv = diag.List{}
	lock.Verify(nil, nil, &lv)
	if got := lv.Sorted(); len(got) != 1 || got[0].Severity != diag.Warning || got[0].Code != "unused-skill" {
		t.Errorf("verify unused = %+v", got)
	}
}

func TestResolveErrors(t *testing.T) {
	root := t.TempDir()
	writeSkill(t, root, "skills.sh/acme/code-review@1.0", skillMD)
	res := NewResolver(root, "skills")
	tests := []struct{ ref, want string }{
		{"skills.sh/acme/code-review@2.0", "available versions of skills.sh/acme/code-review: 1.0"},
		{"skills.sh/acme/code-reveiw@1.0", `did you mean "skills.sh/acme/code-review"?`},
		{"skills.sh/other/thing@1.0", "put the skill in skills/skills.sh/other/thing/1.0/SKILL.md"},
	}
	for _, tt := range tests {
		ref, _ := ParseRef(tt.ref)
		var l diag.List
		if s := res.Resolve(ref, diag.Pos{File: "a"}, &l); s != nil {
			t.Errorf("%s resolved", tt.ref)
		}
		if got := l.Sorted(); len(got) != 1 || got[0].Suggestion != tt.want {
			t.Errorf("%s: %+v, want suggestion %q", tt.ref, got, tt.want)
		}
	}
}

func TestSkillFileProblems(t *testing.T) {
	tests := []struct{ body, want string }{
		{"no front matter", "SKILL.md has no YAML front matter"},
		{"---\nname: other\ndescription: d\n---\nx", `skill name "other" does not match`},
		{"---\nname: code-review\n---\nx", "needs name and description"},
		{"---\nname: code-review\ndescription: d\nversion: \"2.0\"\n---\nx", "declares version"},
	}
	for _, tt := range tests {
		root := t.TempDir()
		writeSkill(t, root, "skills.sh/acme/code-review@1.0", tt.body)
		ref, _ := ParseRef("skills.sh/acme/code-review@1.0")
		var l diag.List
		NewResolver(root, "skills").Resolve(ref, diag.Pos{}, &l)
		found := false
		for _, d := range l.Sorted() {
			found = found || strings.Contains(d.Message, tt.want)
		}
		if !found {
			t.Errorf("body %q: %v, want %q", tt.body, l.Sorted(), tt.want)
		}
	}
}

func TestSymlinkRefused(t *testing.T) {
	root := t.TempDir()
	dir := writeSkill(t, root, "skills.sh/acme/code-review@1.0", skillMD)
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")))
	ref, _ := ParseRef("skills.sh/acme/code-review@1.0")
	var l diag.List
	if s := NewResolver(root, "skills").Resolve(ref, diag.Pos{}, &l); s != nil || !strings.Contains(l.Sorted()[0].Message, "symbolic link") {
		t.Errorf("symlink accepted: %v", l.Sorted())
	}
}
