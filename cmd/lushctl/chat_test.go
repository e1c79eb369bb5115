package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// writeFiles writes files (path → content) into a new temporary directory and returns it; files
// under tools/ whose name is "run" are executable.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if filepath.Base(p) == "run" {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// helloProject is a project whose agent assistant may call the local tool hello, with scripted
// model turns.
func helloProject(t *testing.T, script string) string {
	return writeFiles(t, map[string]string{
		"lush.yaml": "project: chat\ntool_grants:\n  - tool: tools/hello\n    grants:\n      - {principal: user:alice, access: read}\n",
		"agents/assistant/spec.yaml": "name: assistant\nmodel: gemini-2.5-flash\ndescription: Says hello.\ntools:\n  - name: tools/hello\n    access: read\n" +
			"acl:\n  - {principal: user:alice, role: execute}\n",
		"tools/hello/tool.yaml":  "description: Says hello.\ncommand: ./run\naccess: read\n",
		"tools/hello/run":        "#!/bin/sh\necho hello\n",
		"scripts/assistant.yaml": script,
	})
}

// A tool call's line starts on a line of its own, also right after text the model streamed.
func TestChatToolLineAfterStreamedText(t *testing.T) {
	tests := []struct {
		name, script string
		want         *regexp.Regexp
	}{
		{"text then a call", "turns:\n  - text: Let me look.\n    calls: [{name: hello, args: {}}]\n  - text: It said {{result}}\n",
			regexp.MustCompile(`^Let me look\.\n  → hello \(tools/hello, read\): ok \d+ms decision [0-9a-f-]+\nIt said hello\n$`)},
		{"a call, then the answer", "turns:\n  - calls: [{name: hello, args: {}}]\n  - text: It said {{result}}\n",
			regexp.MustCompile(`^  → hello \(tools/hello, read\): ok \d+ms decision [0-9a-f-]+\nIt said hello\n$`)},
		{"an answer ending its line", "turns:\n  - text: \"Hello.\\n\"\n",
			regexp.MustCompile(`^Hello\.\n$`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := helloProject(t, tt.script)
			r := lushctl(t, "hi", "chat", "assistant", dir, "--provider", "scripted", "--as", "user:alice")
			if r.code != 0 || !tt.want.MatchString(r.stdout) {
				t.Errorf("exit %d, stdout:\n%q\nwant it to match %s\nstderr: %s", r.code, r.stdout, tt.want, r.stderr)
			}
		})
	}
}
