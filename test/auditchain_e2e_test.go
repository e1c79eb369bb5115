package test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStoppedGatewaySignsItsLog: `lushctl gateway` stopped with SIGTERM signs its decision log's
// last entry, so `lushctl audit verify --strict` vouches for every entry; one that is killed
// leaves the entries since its last checkpoint, which verify names and --strict fails on.
func TestStoppedGatewaySignsItsLog(t *testing.T) {
	dir := t.TempDir()
	for rel, content := range map[string]string{
		"lush.yaml":                  "project: signed\ntool_grants:\n  - tool: tools/hello\n    grants:\n      - {principal: group:eng, access: read}\n",
		"agents/assistant/spec.yaml": "name: assistant\nmodel: gemini-2.5-flash\ndescription: Says hello.\ntools:\n  - name: tools/hello\n    access: read\nacl:\n  - principal: group:eng\n    role: execute\n",
		"tools/hello/tool.yaml":      "description: Says hello.\ncommand: ./run\naccess: read\n",
		"tools/hello/run":            "#!/bin/sh\necho hello from a local tool\n",
		// No checkpoint by time while the test runs: only the count bound and the stop sign.
		"gateway.yaml": "decision_log_chain:\n  checkpoint_interval: 1h\n",
	} {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logPath, pub := filepath.Join(dir, ".lush", "decisions.db"), filepath.Join(dir, ".lush", "checkpoint.key.pub")
	verify := func() (int, string) {
		t.Helper()
		out, err := exec.Command(lushctlBin, "audit", "verify", "--strict", "--log", logPath, "--public-key", pub).CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		if exit != nil {
			return exit.ExitCode(), string(out)
		}
		return 0, string(out)
	}
	serve := func() *proc {
		base, gw := startGateway(t, dir, "--config", filepath.Join(dir, "gateway.yaml"), "--dev", "--dev-group", "group:eng")
		c := goClient(t, base+"/agents/assistant/mcp")
		for range 3 {
			if text, isErr := call(t, c, "hello", nil); isErr || !strings.Contains(text, "hello from a local tool") {
				t.Fatalf("hello: %q", text)
			}
		}
		return gw
	}

	if code := serve().stop(t); code != 0 {
		t.Fatalf("gateway exit status %d after SIGTERM", code)
	}
	if code, out := verify(); code != 0 || !strings.Contains(out, "verified: complete and unaltered up to the last checkpoint, and nothing comes after it") {
		t.Errorf("after SIGTERM: exit %d\n%s", code, out)
	}

	gw := serve()
	gw.cmd.Process.Kill()
	<-gw.done
	if code, out := verify(); code != 1 || !strings.Contains(out, "after it cannot be vouched for") || !strings.Contains(out, "--strict: ") {
		t.Errorf("after SIGKILL: exit %d\n%s", code, out)
	}
}
