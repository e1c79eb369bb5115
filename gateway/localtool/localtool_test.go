package localtool

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
)

func tool(t *testing.T, script string, timeout time.Duration) (string, *manifest.Tool) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tools", "t"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tools", "t", "run"), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, &manifest.Tool{Ref: "tools/t", Kind: "local", TimeoutMS: timeout.Milliseconds(),
		Local: &manifest.LocalTool{Dir: "tools/t", Command: []string{"./run"}}}
}

func run(t *testing.T, script string, timeout time.Duration) map[string]any {
	t.Helper()
	dir, tl := tool(t, script, timeout)
	raw, err := Run(context.Background(), dir, tl, Request{Tool: "tools/t", Arguments: json.RawMessage(`{"x":1}`), Call: Call{ID: "c1", Agent: "a", Principal: "user:p"}})
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	return res
}

func text(res map[string]any) string {
	c, _ := res["content"].([]any)
	if len(c) == 0 {
		return ""
	}
	m, _ := c[0].(map[string]any)
	s, _ := m["text"].(string)
	return s
}

func TestRun(t *testing.T) {
	// The request arrives on stdin; a JSON result passes through.
	res := run(t, `read line; printf '{"content":[{"type":"text","text":"%s"}],"structuredContent":{"ok":true}}' "$(echo "$line" | tr '"' "'")"`, time.Second)
	if !strings.Contains(text(res), `'arguments':{'x':1}`) || !strings.Contains(text(res), `'principal':'user:p'`) || res["structuredContent"] == nil {
		t.Errorf("json result = %v", res)
	}
	// Plain text output becomes text content.
	if res := run(t, "echo hello", time.Second); text(res) != "hello" || res["isError"] != nil {
		t.Errorf("text result = %v", res)
	}
	// A failure is a tool error carrying the end of stderr.
	if res := run(t, "echo 'no such city' >&2; exit 2", time.Second); res["isError"] != true || !strings.Contains(text(res), "exited with status 2") || !strings.Contains(text(res), "no such city") {
		t.Errorf("failure = %v", res)
	}
	// The environment is minimal: no credentials from Lush's own.
	t.Setenv("VAULT_TOKEN", "s.secret")
	if res := run(t, "env", time.Second); strings.Contains(text(res), "s.secret") {
		t.Errorf("the tool sees Lush's environment: %v", text(res))
	}
}

func TestTimeoutKillsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	start := time.Now()
	res := run(t, "sleep 30 & echo $! > "+pidFile+"; wait", 300*time.Millisecond)
	if res["isError"] != true || !strings.Contains(text(res), "timed out after 300ms") {
		t.Fatalf("timeout = %v", res)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("timeout took %s", time.Since(start))
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	// Killed processes may linger as zombies until init reaps them; only a running one counts.
	pid := strings.TrimSpace(string(data))
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Error("the tool's child process survived the timeout")
}

func TestOutputLimit(t *testing.T) {
	res := run(t, "head -c 2000000 /dev/zero | tr '\\0' 'a'", 5*time.Second)
	if res["isError"] != true || !strings.Contains(text(res), "more than") {
		t.Errorf("oversized output = %v", text(res)[:min(100, len(text(res)))])
	}
}
