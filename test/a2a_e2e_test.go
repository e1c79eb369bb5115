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

// a2aClient runs test/node/a2a-client.mjs (the A2A JavaScript SDK's client, in its A2A 0.3
// compatibility mode) against an agent's base URL as the holder of key, and decodes the JSON
// lines it prints.
func a2aClient(t *testing.T, base, key string, args ...string) []map[string]any {
	t.Helper()
	tools := nodeTools(t)
	if _, err := os.Stat(filepath.Join(tools, "node_modules", "@a2a-js", "sdk")); err != nil {
		t.Fatalf("@a2a-js/sdk is missing from %s: run make node-tools", tools)
	}
	dir := t.TempDir()
	src, err := os.ReadFile("node/a2a-client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a2a-client.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(tools, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	h, _ := json.Marshal(map[string]string{"X-API-Key": key})
	out, err := exec.CommandContext(t.Context(), node22(t), append([]string{filepath.Join(dir, "a2a-client.mjs"), base, string(h)}, args...)...).Output()
	if err != nil {
		t.Fatalf("a2a-client.mjs %v: %v\n%s", args, err, out)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a2a-client.mjs printed %q", l)
		}
		lines = append(lines, m)
	}
	return lines
}

// TestA2AFromJSClient drives a Lush agent served by `lushctl serve` with the official A2A
// JavaScript SDK: a message allowed, one denied by the agent's ACL, a streamed one, and the
// task read by its creator and refused (as not found) to another principal who may run the agent.
func TestA2AFromJSClient(t *testing.T) {
	dir := agentProject(t)
	const bobKey, malloryKey = "bob-key-01234567890", "mallory-key-0123456"
	gw := "auth:\n  api_keys:\n" +
		"    - {name: alice, sha256: " + sha256hex(clientsAliceKey) + ", principal: user:alice, groups: [group:eng]}\n" +
		"    - {name: bob, sha256: " + sha256hex(bobKey) + ", principal: user:bob, groups: [group:eng]}\n" +
		"    - {name: mallory, sha256: " + sha256hex(malloryKey) + ", principal: user:mallory}\n"
	if err := os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte(gw), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(lushctlBin, "build", "-q", "--offline", dir).Output()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	hash := strings.TrimSpace(string(out))
	port := freePort(t)
	p := startProc(t, []string{fmt.Sprintf("PORT=%d", port), "LUSH_LISTEN_HOST=127.0.0.1", "LUSH_PROJECT=" + dir, "LUSH_BUILD=" + hash[:12],
		"LUSH_CONFIG=" + filepath.Join(dir, "gateway.yaml"), "LUSH_MODEL_PROVIDER=scripted", "LOG_LEVEL=info"},
		lushctlBin, "serve")
	waitFor(t, p, "lush: build "+hash[:12], 60*time.Second)
	base := fmt.Sprintf("http://127.0.0.1:%d/agents/assistant/", port)

	sent := a2aClient(t, base, clientsAliceKey, "send", "Say hello")
	task, _ := sent[0]["result"].(map[string]any)
	if task == nil || !strings.Contains(fmt.Sprint(task["artifacts"]), "The tool said: hello from a local tool") {
		t.Fatalf("alice's message: %v", sent)
	}
	id, _ := task["id"].(string)

	if got := a2aClient(t, base, malloryKey, "send", "Say hello"); !strings.Contains(fmt.Sprint(got[0]["error"]), "invalid request") {
		t.Errorf("mallory's message: %v, want a denial", got)
	}

	streamed := a2aClient(t, base, clientsAliceKey, "stream", "Say hello")
	var kinds []string
	for _, l := range streamed {
		ev, _ := l["event"].(map[string]any)
		payload, _ := ev["payload"].(map[string]any)
		kinds = append(kinds, fmt.Sprint(payload["$case"]))
	}
	if len(kinds) < 2 || kinds[0] != "task" || kinds[len(kinds)-1] != "statusUpdate" {
		t.Errorf("stream events: %v\n%v", kinds, streamed)
	}

	if got := a2aClient(t, base, clientsAliceKey, "get", id); got[0]["task"] == nil {
		t.Errorf("alice reads her task: %v", got)
	}
	if got := a2aClient(t, base, bobKey, "get", id); !strings.Contains(strings.ToLower(fmt.Sprint(got[0]["error"])), "not found") {
		t.Errorf("bob reads alice's task: %v, want task not found", got)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM:\n%s", code, p.out.String())
	}
}
