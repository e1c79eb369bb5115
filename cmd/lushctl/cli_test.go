package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lush-agents/lush/internal/manifest"
)

type result struct {
	code           int
	stdout, stderr string
}

func lushctl(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// quickstartCopy copies examples/quickstart (without builds) into a temporary directory.
func quickstartCopy(t *testing.T) string {
	t.Helper()
	src := "../../examples/quickstart"
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == ".lush" {
			return fs.SkipDir
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		info, _ := d.Info()
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestBuildWritesAndPrintsHash(t *testing.T) {
	dir := quickstartCopy(t)
	r := lushctl(t, "", "build", "--offline", dir)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	hash := strings.TrimSpace(r.stdout)
	if !manifest.ValidHash(hash) {
		t.Fatalf("stdout is not a hash: %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "✓ built quickstart: 4 agents, 2 loops") {
		t.Errorf("stderr = %s", r.stderr)
	}
	for _, ext := range []string{".json", ".tar.gz"} {
		if _, err := os.Stat(filepath.Join(dir, ".lush", "build", hash+ext)); err != nil {
			t.Error(err)
		}
	}
	// -q prints only the hash; --check writes nothing.
	if r := lushctl(t, "", "build", "--offline", "-q", dir); r.code != 0 || strings.TrimSpace(r.stdout) != hash || r.stderr != "" {
		t.Errorf("-q: %+v", r)
	}
	other := quickstartCopy(t)
	if r := lushctl(t, "", "build", "--offline", "--check", other); r.code != 0 || strings.TrimSpace(r.stdout) != hash {
		t.Errorf("--check: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(other, ".lush")); err == nil {
		t.Error("--check wrote a build")
	}
	// JSON output.
	r = lushctl(t, "", "build", "--offline", "-o", "json", dir)
	var js struct {
		OK       bool   `json:"ok"`
		Hash     string `json:"hash"`
		Manifest string `json:"manifest"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || !js.OK || js.Hash != hash || !strings.HasSuffix(js.Manifest, hash+".json") {
		t.Errorf("json = %s (%v)", r.stdout, err)
	}
	// builds lists it; a prefix resolves it.
	r = lushctl(t, "", "builds", dir)
	if r.code != 0 || !strings.Contains(r.stdout, manifest.Short(hash)) || !strings.Contains(r.stdout, "quickstart") {
		t.Errorf("builds: %+v", r)
	}
	r = lushctl(t, "", "policy", "eval", dir, "--build", hash[:8], "--principal", "user:zed", "--action", "loop/read", "--loop", "weekday-digest")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "decision: ALLOW") {
		t.Errorf("eval --build: %+v", r)
	}
}

func TestExitCodes(t *testing.T) {
	dir := quickstartCopy(t)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"build", "--nope"}, exitUsage, "unknown flag"},
		{"unknown command", []string{"nosuchcmd"}, exitUsage, "unknown command"},
		{"builds of a missing project", []string{"builds", filepath.Join(dir, "nope")}, exitRuntime, "no such file"},
		{"too many args", []string{"build", "a", "b"}, exitUsage, "accepts at most 1 arg"},
		{"bad output", []string{"build", "-o", "yaml", dir}, exitUsage, "--output must be text or json"},
		{"not a directory", []string{"build", filepath.Join(dir, "lush.yaml")}, exitRuntime, "not a directory"},
		{"missing directory", []string{"build", filepath.Join(dir, "nope")}, exitRuntime, "no such file"},
		{"build errors", []string{"build", "--offline", "../../examples/errors/models"}, exitFailed, "build failed: 2 errors"},
		{"eval without principal", []string{"policy", "eval", dir, "--agent", "researcher"}, exitUsage, "--principal is required"},
		{"eval bad args", []string{"policy", "eval", dir, "--principal", "user:a", "--args", "{"}, exitUsage, "--args is not JSON"},
		{"eval bad action", []string{"policy", "eval", dir, "--principal", "user:a", "--action", "tools/nuke"}, exitUsage, "--action"},
		{"eval unknown build", []string{"policy", "eval", dir, "--principal", "user:a", "--build", "ffffffff"}, exitUsage, "no build ffffffff"},
		{"eval deny is success", []string{"policy", "eval", dir, "--principal", "user:a", "--agent", "notifier"}, exitOK, "decision: DENY"},
		{"eval fail-on-deny", []string{"policy", "eval", dir, "--principal", "user:a", "--agent", "notifier", "--fail-on-deny"}, exitFailed, "decision: DENY"},
		{"eval broken project", []string{"policy", "eval", "../../examples/errors/acl", "--principal", "user:a"}, exitFailed, "the project does not build"},
		{"threshold range", []string{"policy", "test", "--threshold", "120", dir}, exitUsage, "--threshold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lushctl(t, "", tt.args...)
			if r.code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tt.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout+r.stderr, tt.want) {
				t.Errorf("output lacks %q\nstdout: %s\nstderr: %s", tt.want, r.stdout, r.stderr)
			}
		})
	}
}

func TestPolicyEvalInputFile(t *testing.T) {
	dir := quickstartCopy(t)
	in := `{"action":"tools/call","principal":{"id":"serviceaccount:digest-bot","groups":[]},"agent":"orchestrator",
	  "tool":{"ref":"mcp://npx/@modelcontextprotocol/server-filesystem","name":"write_file"},"arguments":{"path":"drafts/x.md"}}`
	r := lushctl(t, in, "policy", "eval", dir, "--input", "-", "-o", "json")
	var out struct {
		Decision struct {
			Outcome string   `json:"outcome"`
			Rules   []string `json:"rules"`
		} `json:"decision"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Decision.Outcome != "stub" {
		t.Fatalf("eval --input: %+v (%v)", r, err)
	}
	// A misspelt field in the input document is a usage error that names it.
	r = lushctl(t, `{"principle":{"id":"user:a"}}`, "policy", "eval", dir, "--input", "-")
	if r.code != exitUsage || !strings.Contains(r.stderr, `unknown field "principle"`) {
		t.Errorf("misspelt input: %+v", r)
	}
	// --explain full prints OPA's trace.
	r = lushctl(t, in, "policy", "eval", dir, "--input", "-", "--explain", "full")
	if r.code != 0 || !strings.Contains(r.stdout, "trace:") || !strings.Contains(r.stdout, "data.lush.authz.decision") {
		t.Errorf("explain: %s", r.stdout)
	}
}

func TestPolicyTestFailures(t *testing.T) {
	dir := quickstartCopy(t)
	if r := lushctl(t, "", "policy", "test", dir); r.code != 0 || !strings.Contains(r.stdout, "PASS: 12/12") {
		t.Fatalf("quickstart tests: %+v", r)
	}
	// A failing test fails the command and names the test and the failing expression.
	bad := "package lush.policies.drafts_extra_test\n\nimport data.lush.policies.drafts\n\n" +
		"test_wrong if {\n\tcount(drafts.deny) == 5 with input as {\"action\": \"tools/call\"}\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "policies", "extra_test.rego"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	r := lushctl(t, "", "policy", "test", dir)
	if r.code != exitFailed || !strings.Contains(r.stdout, "FAIL  lush.policies.drafts_extra_test.test_wrong") || !strings.Contains(r.stdout, "failed at policies/extra_test.rego:6: count(drafts.deny) == 5") {
		t.Errorf("failing test: %+v", r)
	}
	// --run selects tests; a pattern that matches nothing fails.
	if r := lushctl(t, "", "policy", "test", "--run", "test_move", dir); r.code != 0 || !strings.Contains(r.stdout, "PASS: 1/1") {
		t.Errorf("--run: %+v", r)
	}
	if r := lushctl(t, "", "policy", "test", "--run", "no_such_test", dir); r.code != exitFailed {
		t.Errorf("--run without match: %+v", r)
	}
	os.Remove(filepath.Join(dir, "policies", "extra_test.rego"))
	// Coverage below the threshold fails: drop the tests that cover the move_file branch.
	src, _ := os.ReadFile(filepath.Join(dir, "policies", "drafts_test.rego"))
	trimmed := strings.Split(string(src), "test_move_checks_both_paths")[0] + "x if true\n"
	os.WriteFile(filepath.Join(dir, "policies", "drafts_test.rego"), []byte(trimmed), 0o644)
	r = lushctl(t, "", "policy", "test", "--threshold", "100", "-o", "json", dir)
	var rep struct {
		Coverage float64 `json:"coverage"`
		OK       bool    `json:"ok"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.OK || rep.Coverage >= 100 || r.code != exitFailed {
		t.Errorf("threshold: %+v %+v", r, rep)
	}
	// A test file that does not parse is reported with its position.
	os.WriteFile(filepath.Join(dir, "policies", "broken_test.rego"), []byte("package lush.policies.broken_test\n\ntest_x if {\n"), 0o644)
	if r := lushctl(t, "", "policy", "test", dir); r.code != exitFailed || !strings.Contains(r.stderr, "policies/broken_test.rego:") {
		t.Errorf("broken test file: %+v", r)
	}
}

func TestSkillsLock(t *testing.T) {
	dir := quickstartCopy(t)
	os.Remove(filepath.Join(dir, "skills.lock"))
	if r := lushctl(t, "", "build", "--offline", dir); r.code != exitFailed || !strings.Contains(r.stderr, "run lushctl skills lock") {
		t.Fatalf("build without lock: %+v", r)
	}
	if r := lushctl(t, "", "skills", "lock", dir); r.code != 0 || !strings.Contains(r.stdout, "skills.sh/lush/concise-writing@1.0 sha256:") {
		t.Fatalf("skills lock: %+v", r)
	}
	if r := lushctl(t, "", "build", "--offline", dir); r.code != 0 {
		t.Errorf("build after lock: %+v", r)
	}
}
