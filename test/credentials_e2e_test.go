package test

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCredentialsFullRun runs the processes a laptop user runs: the notes server (bearer tokens),
// `lushctl gateway` with debug logging, `lushctl auth add` fed from stdin, calls through the
// gateway, `lushctl audit query` and `lushctl auth list`. The token reaches the notes server, and
// no output of the run holds it: not the gateway's stdout or stderr, the decision log's files,
// the audit output, the metrics, the health answer, the client's answers, or the notes server's log.
func TestCredentialsFullRun(t *testing.T) {
	const token = "e2e-bob-notes-token-6c1d9a2f"
	dir := t.TempDir()
	notesBin := filepath.Join(dir, "notes")
	if out, err := exec.Command("go", "build", "-o", notesBin, "../examples/notes").CombinedOutput(); err != nil {
		t.Fatalf("build notes: %v\n%s", err, out)
	}
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("bob "+token+"\n"), 0o600)
	notes := startProc(t, nil, notesBin, "--addr", "127.0.0.1:0", "--tokens-file", tokens)
	waitFor(t, notes, "serving http", 10*time.Second)
	url := regexp.MustCompile(`http://[^ ]+/mcp`).FindString(notes.out.String())

	project := filepath.Join(dir, "project")
	write := func(rel, content string) {
		p := filepath.Join(project, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("agents/scribe/spec.yaml", "name: scribe\nmodel: gemini-2.5-flash\ndescription: Keeps notes.\ntools:\n  - server: mcp://notes.example.com/mcp\n    access: write\nacl:\n  - {principal: group:eng, role: execute}\n")
	write("lush.yaml", `project: e2e
servers:
  mcp://notes.example.com/mcp:
    url: `+url+`
tool_classes:
  mcp://notes.example.com/mcp:
    search_notes: read
    whoami: read
    post_note: write
tool_grants:
  - tool: mcp://notes.example.com/mcp
    grants:
      - {principal: group:eng, access: write}
mcp_credentials:
  mcp://notes.example.com/mcp:
    group:eng: {type: bearer}
`)
	base, gw := startGateway(t, project, "--dev", "--dev-principal", "user:bob", "--dev-group", "group:eng",
		"--log-level", "debug", "--live-writes=mcp://notes.example.com/mcp")
	c := goClient(t, base+"/agents/scribe/mcp")

	answers := []string{}
	text, isErr := call(t, c, "whoami", nil)
	answers = append(answers, text)
	if !isErr || !strings.Contains(text, "lushctl auth add mcp://notes.example.com/mcp --principal user:bob --type bearer") {
		t.Fatalf("before auth add: %q", text)
	}

	add := exec.Command(lushctlBin, "auth", "add", "mcp://notes.example.com/mcp", "--principal", "user:bob", "-C", project)
	add.Stdin = strings.NewReader(token + "\n")
	out, err := add.CombinedOutput()
	if err != nil {
		t.Fatalf("auth add: %v\n%s", err, out)
	}
	answers = append(answers, string(out))

	text, isErr = call(t, c, "whoami", nil)
	if isErr || text != "bob" {
		t.Fatalf("after auth add: %q", text)
	}
	text, isErr = call(t, c, "post_note", map[string]any{"text": "ship it"})
	if isErr || !strings.Contains(text, "posted note") {
		t.Fatalf("post_note: %q", text)
	}
	answers = append(answers, text)

	get := func(path string) string {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	metrics, health := get("/metrics"), get("/health")
	c.Close()
	if code := gw.stop(t); code != 0 {
		t.Fatalf("gateway exit %d", code)
	}
	logPath := filepath.Join(project, ".lush", "decisions.db")
	audit := runLushctl(t, "audit", "query", "--log", logPath, "-o", "json")
	if !strings.Contains(audit, "lush.credentials.missing") || !strings.Contains(audit, "posted note") {
		t.Fatalf("the audit log lacks the denial or the write's response:\n%s", audit)
	}
	list := runLushctl(t, "auth", "list", "-C", project, "-o", "json")
	var db []string
	for _, f := range []string{logPath, logPath + "-wal"} {
		b, _ := os.ReadFile(f)
		db = append(db, string(b))
	}
	notes.stop(t)
	outputs := map[string]string{
		"gateway output": gw.out.String(), "decision log files": strings.Join(db, ""), "audit query": audit,
		"metrics": metrics, "health": health, "answers": strings.Join(answers, "\n"), "auth list": list,
		"notes server log": notes.out.String(),
	}
	for where, out := range outputs {
		if strings.Contains(out, token) {
			t.Errorf("the %s holds the token", where)
		}
	}
	if !strings.Contains(gw.out.String(), "deployed build") {
		t.Error("the gateway's log output was not captured, so the scan proves nothing")
	}
}
