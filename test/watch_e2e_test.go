package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGatewayWatchReloads runs `lushctl gateway --watch`: a policy added to the project takes
// effect without a restart, a policy that does not compile is reported while the last good build
// keeps serving, and fixing it deploys again.
func TestGatewayWatchReloads(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string, mode os.FileMode) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("lush.yaml", "project: watched\ntool_grants:\n  - tool: tools/hello\n    grants:\n      - {principal: group:eng, access: read}\n", 0o644)
	write("agents/assistant/spec.yaml", "name: assistant\nmodel: gemini-2.5-flash\ndescription: Says hello.\ntools:\n  - name: tools/hello\n    access: read\nacl:\n  - principal: group:eng\n    role: execute\n", 0o644)
	write("tools/hello/tool.yaml", "description: Says hello.\ncommand: ./run\naccess: read\n", 0o644)
	write("tools/hello/run", "#!/bin/sh\necho hello from a local tool\n", 0o755)

	base, gw := startGateway(t, dir, "--dev", "--dev-group", "group:eng", "--watch")
	c := goClient(t, base+"/agents/assistant/mcp")
	if text, isErr := call(t, c, "hello", nil); isErr || !strings.Contains(text, "hello from a local tool") {
		t.Fatalf("before the change: %q", text)
	}
	// eventually calls until the answer satisfies ok.
	eventually := func(what string, ok func(text string, isErr bool) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			text, isErr := call(t, c, "hello", nil)
			if ok(text, isErr) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: last answer %q\ngateway output:\n%s", what, text, gw.out.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	write("policies/block.rego", "package lush.policies.block\n\ndeny contains \"hello is switched off\" if input.tool.ref == \"tools/hello\"\n", 0o644)
	eventually("the new policy denies", func(text string, isErr bool) bool { return isErr && strings.Contains(text, "hello is switched off") })

	// A broken policy: reported with its location; the last good build (which denies) keeps serving.
	write("policies/block.rego", "package lush.policies.block\n\ndeny contains \"x\" if {\n", 0o644)
	waitFor(t, gw, "policies/block.rego:", 20*time.Second)
	waitFor(t, gw, "the current build keeps serving", 5*time.Second)
	if text, isErr := call(t, c, "hello", nil); !isErr || !strings.Contains(text, "hello is switched off") {
		t.Fatalf("after a broken edit: %q", text)
	}

	os.Remove(filepath.Join(dir, "policies/block.rego"))
	eventually("removing the policy allows again", func(text string, isErr bool) bool { return !isErr && strings.Contains(text, "hello from a local tool") })
}
