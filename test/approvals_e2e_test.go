package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// approvalProject: an agent whose one tool is destructive (so it needs a person's approval by
// default); alice runs the agent, sam holds the approve role.
func approvalProject(t *testing.T, wait string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"lush.yaml": "project: approvals-e2e\nroles:\n  approve: [user:sam]\ntool_grants:\n  - tool: tools/purge\n    grants:\n      - {principal: group:eng, access: write}\n",
		"agents/janitor/spec.yaml": "name: janitor\nmodel: gemini-2.5-flash\ndescription: Cleans up.\ntools:\n  - name: tools/purge\n    access: write\n" +
			"acl:\n  - principal: group:eng\n    role: execute\n",
		"tools/purge/tool.yaml": "description: Purges the cache.\ncommand: ./run\naccess: write\nrisk: destructive\n",
		"scripts/janitor.yaml":  "turns:\n  - calls: [{name: purge, args: {scope: \"all caches\"}}]\n  - text: \"Purge: {{result}}\"\n",
		"gateway.yaml": "approvals:\n  wait: " + wait + "\n  poll: 50ms\nauth:\n  api_keys:\n" +
			"    - {name: alice, sha256: " + sha256hex("alice-key-0123456789") + ", principal: user:alice, groups: [group:eng]}\n" +
			"    - {name: sam, sha256: " + sha256hex("sam-key-01234567890") + ", principal: user:sam}\n",
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "tools/purge/run"), []byte("#!/bin/sh\necho purged\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serveApprovals starts lushctl serve on the project's kept build and returns its URL.
func serveApprovals(t *testing.T, dir, hash string) (string, *proc) {
	t.Helper()
	port := freePort(t)
	p := startProc(t, []string{fmt.Sprintf("PORT=%d", port), "LUSH_LISTEN_HOST=127.0.0.1", "LUSH_PROJECT=" + dir, "LUSH_BUILD=" + hash[:12],
		"LUSH_CONFIG=" + filepath.Join(dir, "gateway.yaml"), "LUSH_MODEL_PROVIDER=scripted", "TRACE_BACKEND=none", "LUSH_LIVE_WRITES=all"},
		lushctlBin, "serve")
	waitFor(t, p, "lush: build "+hash[:12], 60*time.Second)
	return fmt.Sprintf("http://127.0.0.1:%d", port), p
}

// approvalsCLI runs lushctl approvals against url as the principal of token.
func approvalsCLI(t *testing.T, url, token string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(lushctlBin, append(append([]string{"approvals"}, args...), "--url", url, "--token", token)...)
	out, _ := cmd.CombinedOutput()
	return string(out), cmd.ProcessState.ExitCode()
}

// A destructive call waits at the gateway of lushctl serve until sam approves it with lushctl
// approvals; an approval given after the gateway restarted still lets the repeated call run,
// once.
func TestApprovalsCommand(t *testing.T) {
	dir := approvalProject(t, "1m")
	out, err := exec.Command(lushctlBin, "build", "-q", "--offline", dir).Output()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	hash := strings.TrimSpace(string(out))
	base, p := serveApprovals(t, dir, hash)

	type chat struct {
		code int
		res  map[string]any
	}
	done := make(chan chat, 1)
	go func() {
		code, res := chatHTTP(t, base+"/agents/janitor/chat", "alice-key-0123456789", "clean up")
		done <- chat{code, res}
	}()
	var id string
	deadline := time.Now().Add(20 * time.Second)
	for id == "" && time.Now().Before(deadline) {
		list, code := approvalsCLI(t, base, "sam-key-01234567890", "list", "-o", "json")
		var page struct {
			Approvals []struct {
				ID        string          `json:"id"`
				Principal string          `json:"principal"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"approvals"`
		}
		if code != 0 || json.Unmarshal([]byte(list), &page) != nil {
			t.Fatalf("approvals list: exit %d\n%s", code, list)
		}
		if len(page.Approvals) == 1 {
			id = page.Approvals[0].ID
			if page.Approvals[0].Principal != "user:alice" || !strings.Contains(string(page.Approvals[0].Arguments), "all caches") {
				t.Errorf("pending approval: %s", list)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if id == "" {
		t.Fatalf("no pending approval:\n%s", p.out.String())
	}
	if text, code := approvalsCLI(t, base, "sam-key-01234567890", "list"); code != 0 || !strings.Contains(text, id) || !strings.Contains(text, "tools/purge") {
		t.Errorf("approvals list (text): exit %d\n%s", code, text)
	}
	if text, code := approvalsCLI(t, base, "alice-key-0123456789", "approve", id); code != 1 || !strings.Contains(text, "approve role") {
		t.Errorf("alice approving: exit %d\n%s", code, text)
	}
	if text, code := approvalsCLI(t, base, "sam-key-01234567890", "approve", id, "--reason", "ticket OPS-7"); code != 0 || !strings.Contains(text, "approved") {
		t.Fatalf("sam approving: exit %d\n%s", code, text)
	}
	select {
	case c := <-done:
		if c.code != 200 || !strings.Contains(fmt.Sprint(c.res["response"]), "purged") {
			t.Fatalf("the approved chat: %d %v", c.code, c.res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the approved call did not finish")
	}
	if text, code := approvalsCLI(t, base, "sam-key-01234567890", "show", id); code != 0 || !strings.Contains(text, "consumed") ||
		!strings.Contains(text, "ticket OPS-7") || !strings.Contains(text, "ran as") {
		t.Errorf("approvals show: exit %d\n%s", code, text)
	}
	if text, code := approvalsCLI(t, base, "sam-key-01234567890", "deny", id); code != 1 || !strings.Contains(text, "already") {
		t.Errorf("deciding twice: exit %d\n%s", code, text)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("serve exited %d", code)
	}

	// The wait ends undecided; the gateway restarts; sam approves; the repeated call runs.
	cfg := filepath.Join(dir, "gateway.yaml")
	data, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(data), "wait: 1m", "wait: 300ms", 1)), 0o644)
	base, p = serveApprovals(t, dir, hash)
	code, res := chatHTTP(t, base+"/agents/janitor/chat", "alice-key-0123456789", "clean up")
	if code != 200 || !strings.Contains(fmt.Sprint(res), "repeat exactly the same call") {
		t.Fatalf("a call that gave up waiting: %d %v", code, res)
	}
	list, _ := approvalsCLI(t, base, "sam-key-01234567890", "list", "-o", "json")
	var page struct {
		Approvals []struct{ ID string } `json:"approvals"`
	}
	json.Unmarshal([]byte(list), &page)
	if len(page.Approvals) != 1 {
		t.Fatalf("pending after the wait: %s", list)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	base, p = serveApprovals(t, dir, hash)
	defer p.stop(t)
	if text, code := approvalsCLI(t, base, "sam-key-01234567890", "approve", page.Approvals[0].ID); code != 0 {
		t.Fatalf("approving after a restart: exit %d\n%s", code, text)
	}
	code, res = chatHTTP(t, base+"/agents/janitor/chat", "alice-key-0123456789", "clean up")
	if code != 200 || !strings.Contains(fmt.Sprint(res["response"]), "purged") {
		t.Fatalf("the repeated call after the restart: %d %v", code, res)
	}
	q, err := exec.Command(lushctlBin, "audit", "query", "--log", filepath.Join(dir, ".lush", "decisions.db"), "--action", "approval/decide", "-o", "json").Output()
	if err != nil || strings.Count(string(q), `"principal":"user:sam"`) < 2 || !strings.Contains(string(q), "ticket OPS-7") {
		t.Errorf("approval decisions in the log: %v\n%s", err, q)
	}
}
