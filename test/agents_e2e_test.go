package test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agentProject writes a project whose agent calls a local tool, with a scripted model turn file.
func agentProject(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"lush.yaml": "project: agents-e2e\ntool_grants:\n  - tool: tools/hello\n    grants:\n      - {principal: group:eng, access: read}\n",
		"agents/assistant/spec.yaml": "name: assistant\nmodel: gemini-2.5-flash\ndescription: Says hello.\ntools:\n  - name: tools/hello\n    access: read\n" +
			"acl:\n  - principal: group:eng\n    role: execute\n",
		"tools/hello/tool.yaml":  "description: Says hello.\ncommand: ./run\naccess: read\n",
		"scripts/assistant.yaml": "turns:\n  - calls: [{name: hello, args: {}}]\n  - text: \"The tool said: {{result}}\"\n",
		"gateway.yaml":           "auth:\n  api_keys:\n    - {name: alice, sha256: " + sha256hex("alice-key-0123456789") + ", principal: user:alice, groups: [group:eng]}\n",
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "tools/hello/run"), []byte("#!/bin/sh\necho hello from a local tool\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// chatHTTP posts a chat message and returns the status and the decoded body.
func chatHTTP(t *testing.T, url, key, msg string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(fmt.Sprintf(`{"message": %q}`, msg)))
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(body, &out)
	return resp.StatusCode, out
}

// `lushctl chat` with a piped message: no server to start, the answer on stdout, the tool call
// shown, the decision in the project's log.
func TestChatCommand(t *testing.T) {
	dir := agentProject(t)
	cmd := exec.Command(lushctlBin, "chat", "assistant", dir, "--provider", "scripted", "--as", "user:alice", "--group", "group:eng")
	cmd.Stdin = strings.NewReader("Say hello")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, out)
	}
	for _, want := range []string{"→ hello (tools/hello, read): ok", "The tool said: hello from a local tool"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("chat output lacks %q:\n%s", want, out)
		}
	}
	q, err := exec.Command(lushctlBin, "audit", "query", "--log", filepath.Join(dir, ".lush", "decisions.db"), "--action", "agent/invoke", "-o", "json").Output()
	if err != nil || !strings.Contains(string(q), `"principal":"user:alice"`) || !strings.Contains(string(q), `"tokens_input"`) {
		t.Errorf("audit query: %v\n%s", err, q)
	}
	// A principal without execute: refused, exit code 1.
	cmd = exec.Command(lushctlBin, "chat", "assistant", dir, "--provider", "scripted", "--as", "user:mallory")
	cmd.Stdin = strings.NewReader("Say hello")
	out, _ = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "may not execute agent") {
		t.Errorf("chat as mallory: exit %d\n%s", cmd.ProcessState.ExitCode(), out)
	}
}

// `lushctl serve`: configured by environment variables only, serves a kept build, stops cleanly
// on SIGTERM with every decision in the log and the traces in SQLite.
func TestServeCommand(t *testing.T) {
	dir := agentProject(t)
	out, err := exec.Command(lushctlBin, "build", "-q", "--offline", dir).Output()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	hash := strings.TrimSpace(string(out))
	port := freePort(t)
	p := startProc(t, []string{fmt.Sprintf("PORT=%d", port), "LUSH_LISTEN_HOST=127.0.0.1", "LUSH_PROJECT=" + dir, "LUSH_BUILD=" + hash[:12],
		"LUSH_CONFIG=" + filepath.Join(dir, "gateway.yaml"), "LUSH_MODEL_PROVIDER=scripted", "TRACE_BACKEND=sqlite", "LOG_LEVEL=info"},
		lushctlBin, "serve")
	waitFor(t, p, "lush: build "+hash[:12], 60*time.Second)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if out, err := exec.Command(lushctlBin, "health", "--url", base+"/health").CombinedOutput(); err != nil {
		t.Fatalf("health: %v %s", err, out)
	}
	if code, _ := chatHTTP(t, base+"/agents/assistant/chat", "", "hi"); code != 401 {
		t.Errorf("chat without credentials: %d, want 401", code)
	}
	code, res := chatHTTP(t, base+"/agents/assistant/chat", "alice-key-0123456789", "Say hello")
	if code != 200 || res["response"] != "The tool said: hello from a local tool" {
		t.Fatalf("chat: %d %v", code, res)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM:\n%s", code, p.out.String())
	}
	q, err := exec.Command(lushctlBin, "audit", "query", "--log", filepath.Join(dir, ".lush", "decisions.db"), "--decision-id", res["invocation_id"].(string), "-o", "json").Output()
	if err != nil || !strings.Contains(string(q), `"status":"ok"`) || !strings.Contains(string(q), `"environment":"production"`) {
		t.Errorf("the invocation's decision: %v\n%s", err, q)
	}
	if info, err := os.Stat(filepath.Join(dir, ".lush", "traces.db")); err != nil || info.Size() == 0 {
		t.Errorf("no trace database: %v", err)
	}

	// Misconfiguration is a usage error naming the variable.
	cmd := exec.Command(lushctlBin, "serve")
	cmd.Env = append(os.Environ(), "LUSH_PROJECT="+dir, "LUSH_CONFIG="+filepath.Join(dir, "gateway.yaml"), "TRACE_BACKEND=jaeger")
	out, _ = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "TRACE_BACKEND") {
		t.Errorf("bad TRACE_BACKEND: exit %d %s", cmd.ProcessState.ExitCode(), out)
	}
}

// `lushctl run`: the dev stack; an edit that breaks the project is reported with file:line and
// the last good build keeps serving; the fixed project is picked up; traces are kept in memory.
func TestRunCommandRebuilds(t *testing.T) {
	dir := agentProject(t)
	ready := filepath.Join(t.TempDir(), "ready")
	p := startProc(t, nil, lushctlBin, "run", dir, "--listen", "127.0.0.1:0", "--ready-file", ready, "--provider", "scripted",
		"--dev-principal", "user:alice", "--dev-group", "group:eng")
	deadline := time.Now().Add(60 * time.Second)
	var base string
	for base == "" && time.Now().Before(deadline) {
		if addr, err := os.ReadFile(ready); err == nil && len(addr) > 0 {
			base = "http://" + string(addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if base == "" {
		t.Fatalf("run did not start:\n%s", p.out.String())
	}
	chat := func() (int, map[string]any) { return chatHTTP(t, base+"/agents/assistant/chat", "", "Say hello") }
	if code, res := chat(); code != 200 || res["status"] != "ok" {
		t.Fatalf("chat: %d %v", code, res)
	}
	// The trace of that invocation, from the in-memory store.
	resp, err := http.Get(base + "/traces?agent=assistant")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"agent": "assistant"`) && !strings.Contains(string(body), `"agent":"assistant"`) {
		t.Errorf("traces: %d %s", resp.StatusCode, body)
	}

	spec := filepath.Join(dir, "agents/assistant/spec.yaml")
	good, _ := os.ReadFile(spec)
	os.WriteFile(spec, []byte(strings.Replace(string(good), "access: read", "access: sometimes", 1)), 0o644)
	waitFor(t, p, "agents/assistant/spec.yaml:", 20*time.Second)
	if code, res := chat(); code != 200 || res["status"] != "ok" {
		t.Fatalf("after a broken edit the last good build should serve: %d %v", code, res)
	}
	os.WriteFile(spec, []byte(strings.Replace(string(good), "description: Says hello.", "description: Says hello, again.", 1)), 0o644)
	deadline = time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/agents/assistant/status")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "Says hello, again.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fixed project was not deployed: %s\n%s", body, p.out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("run exited %d on SIGTERM", code)
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
