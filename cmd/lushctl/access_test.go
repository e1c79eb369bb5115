package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAccessReview(t *testing.T) {
	dir := quickstartCopy(t)
	r := lushctl(t, "", "access", "review", "--subject", "group:engineering", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "read_text_file") || strings.Contains(r.stdout, "user:carol") {
		t.Fatalf("review: %d %s %s", r.code, r.stdout, r.stderr)
	}
	build := func() string {
		r := lushctl(t, "", "build", "-q", "--offline", dir)
		if r.code != 0 {
			t.Fatalf("build: %s", r.stderr)
		}
		return strings.TrimSpace(r.stdout)
	}
	old := build()
	p := filepath.Join(dir, "lush.yaml")
	data, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.Replace(string(data), "      - principal: group:engineering\n        access: read\n", "", 1)), 0o644)
	next := build()
	r = lushctl(t, "", "access", "review", "--diff", old[:8], next[:8], dir)
	if r.code != 0 || !strings.Contains(r.stdout, "-  group:engineering  researcher") || strings.Contains(r.stdout, "\n+") {
		t.Errorf("diff: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = lushctl(t, "", "access", "review", "--diff", old, next, "-o", "json", dir)
	var changes []struct{ Change string }
	if err := json.Unmarshal([]byte(r.stdout), &changes); err != nil || len(changes) == 0 || changes[0].Change != "revoked" {
		t.Errorf("json diff: %v %s", err, r.stdout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"access", "review", "--diff", old, "--", dir}, "no build"},
		{[]string{"access", "review", "--build", "0000", dir}, "build 0000"},
		{[]string{"access", "review", dir, "extra"}, "at most 1"},
		{[]string{"access", "review", "-o", "csv", dir}, "--output"},
	} {
		if r := lushctl(t, "", tc.args...); r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %d %q, want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
