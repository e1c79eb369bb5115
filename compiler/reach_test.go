package compiler_test

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/examples/notes/notes"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/test/mcpserver"
)

// reachProject writes a one-agent project that uses server ref with the given lush.yaml extra.
func reachProject(t *testing.T, ref, access, only, lushExtra string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "lush.yaml", "project: reach\n"+lushExtra)
	entry := "  - server: " + ref + "\n    access: " + access + "\n"
	if only != "" {
		entry += "    tools: [" + only + "]\n"
	}
	writeFile(t, dir, "agents/a/spec.yaml", "name: a\nmodel: gemini-2.5-flash\ndescription: d\ntools:\n"+entry+
		"acl:\n  - principal: group:engineering\n    role: execute\n")
	return dir
}

func buildOnline(t *testing.T, dir string, opts ...compiler.Option) *compiler.Result {
	t.Helper()
	res, err := compiler.Build(context.Background(), dir, append([]compiler.Option{compiler.ReachTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func codes(res *compiler.Result) map[string]diag.Diagnostic {
	out := map[string]diag.Diagnostic{}
	for _, d := range res.Diagnostics {
		out[d.Code] = d
	}
	return out
}

func TestReachStreamableHTTP(t *testing.T) {
	url := mcpserver.StartHTTP(t.Cleanup)
	servers := "servers:\n  mcp://tools.internal/mcp:\n    url: " + url + "\n"
	classes := "tool_classes:\n  mcp://tools.internal/mcp:\n    echo: read\n    env: read\n"

	// Narrowed to tools the server offers: the build succeeds.
	res := buildOnline(t, reachProject(t, "mcp://tools.internal/mcp", "read", "echo, env", servers+classes))
	if !res.OK() {
		t.Fatalf("build failed:\n%s", render(res.Diagnostics))
	}

	// A misspelt tool name is an error with a suggestion.
	res = buildOnline(t, reachProject(t, "mcp://tools.internal/mcp", "read", "ecoh", servers))
	d, ok := codes(res)["unknown-server-tool"]
	if res.OK() || !ok || d.Suggestion != `did you mean "echo"?` {
		t.Errorf("misspelt tool: %s", render(res.Diagnostics))
	}

	// Read access to the whole server with nothing classified: a warning that names the tools and
	// the server's read-only hints.
	res = buildOnline(t, reachProject(t, "mcp://tools.internal/mcp", "read", "", servers))
	d, ok = codes(res)["unclassified-tools"]
	if !res.OK() || !ok || !strings.Contains(d.Message, "echo, env, fail, sleep, write_note") || !strings.Contains(d.Suggestion, "marks echo, env read-only") {
		t.Errorf("unclassified tools: %s", render(res.Diagnostics))
	}

	// Classifying a tool the server does not have is a warning.
	res = buildOnline(t, reachProject(t, "mcp://tools.internal/mcp", "write", "", servers+"tool_classes:\n  mcp://tools.internal/mcp:\n    delete_all: write\n"))
	if _, ok := codes(res)["unknown-server-tool"]; !ok || !res.OK() {
		t.Errorf("class for a missing tool: %s", render(res.Diagnostics))
	}
}

func TestReachSSE(t *testing.T) {
	url := mcpserver.StartSSE(t.Cleanup)
	res := buildOnline(t, reachProject(t, "mcp://legacy.internal/sse", "write", "echo", "servers:\n  mcp://legacy.internal/sse:\n    url: "+url+"\n    transport: sse\n"))
	if !res.OK() {
		t.Fatalf("build over SSE failed:\n%s", render(res.Diagnostics))
	}
}

func TestReachStdio(t *testing.T) {
	dir := reachProject(t, "mcp://stdio/bin/test-server", "write", "echo, write_note", "")
	writeFile(t, dir, "bin/test-server", mcpserver.StdioScript())
	if err := os.Chmod(filepath.Join(dir, "bin/test-server"), 0o755); err != nil {
		t.Fatal(err)
	}
	if res := buildOnline(t, dir); !res.OK() {
		t.Fatalf("build over stdio failed:\n%s", render(res.Diagnostics))
	}
	// A command that does not exist.
	dir = reachProject(t, "mcp://stdio/bin/missing", "write", "", "")
	res := buildOnline(t, dir)
	if d, ok := codes(res)["server-unreachable"]; !ok || !strings.Contains(d.Message, "bin/missing does not exist in the project") {
		t.Errorf("missing command: %s", render(res.Diagnostics))
	}
}

func TestReachFailures(t *testing.T) {
	// A listener that accepts and never answers: the check times out.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dir := reachProject(t, "mcp://silent.internal/mcp", "read", "", "servers:\n  mcp://silent.internal/mcp:\n    url: http://"+ln.Addr().String()+"/mcp\n")
	start := time.Now()
	res := buildOnline(t, dir, compiler.ReachTimeout(500*time.Millisecond))
	if d, ok := codes(res)["server-unreachable"]; !ok || !strings.Contains(d.Message, "no answer within 500ms") {
		t.Errorf("silent server: %s", render(res.Diagnostics))
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("the timeout did not stop the check (took %s)", time.Since(start))
	}
	// --offline skips the check entirely.
	res = buildOnline(t, dir, compiler.Offline(true))
	if !res.OK() {
		t.Errorf("offline build failed:\n%s", render(res.Diagnostics))
	}
}

// TestReachNpmFilesystem checks the real npm filesystem server, installed by the Makefile into a
// project-local prefix (LUSH_NODE_PREFIX), without npx or the network.
func TestReachNpmFilesystem(t *testing.T) {
	prefix := os.Getenv("LUSH_NODE_PREFIX")
	if prefix == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("LUSH_NODE_PREFIX is not set in CI: run the tests with make test")
		}
		t.Skip("LUSH_NODE_PREFIX not set (make test sets it)")
	}
	res := buildOnline(t, quickstart, compiler.NodePrefixes(prefix), compiler.ReachTimeout(30*time.Second))
	for _, d := range res.Diagnostics {
		if strings.Contains(d.Message, "server-filesystem") {
			t.Errorf("filesystem server: %s", d)
		}
	}
}

// TestReachServerThatNeedsACredential: a server that answers 401 is not "unreachable". Without
// an mcp_credentials declaration the build warns that calls will fail; with one it passes.
func TestReachServerThatNeedsACredential(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("bot some-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ns, err := notes.New(notes.Options{TokensFile: tokens, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ns.Handler())
	t.Cleanup(func() { ns.Close(); srv.Close() })
	servers := "servers:\n  mcp://notes.internal/mcp:\n    url: " + srv.URL + "/mcp\ntool_classes:\n  mcp://notes.internal/mcp:\n    whoami: read\n"

	res := buildOnline(t, reachProject(t, "mcp://notes.internal/mcp", "read", "", servers))
	d, ok := codes(res)["credential-needed"]
	if !res.OK() || !ok || d.Severity != diag.Warning || !strings.Contains(d.Message, "asks for a credential (401 Unauthorized)") {
		t.Fatalf("undeclared: %s", render(res.Diagnostics))
	}
	if _, unreachable := codes(res)["server-unreachable"]; unreachable {
		t.Error("a server that asks for a credential was reported unreachable")
	}

	declared := servers + "mcp_credentials:\n  mcp://notes.internal/mcp:\n    group:engineering: {type: bearer}\n"
	res = buildOnline(t, reachProject(t, "mcp://notes.internal/mcp", "read", "", declared))
	if _, ok := codes(res)["credential-needed"]; ok || !res.OK() {
		t.Fatalf("declared: %s", render(res.Diagnostics))
	}

	bad := servers + "mcp_credentials:\n  mcp://notes.internal/mcp:\n    group:engineering: {type: bearer, vault: \"secret/data/{who}\"}\n"
	res = buildOnline(t, reachProject(t, "mcp://notes.internal/mcp", "read", "", bad), compiler.Offline(true))
	if d, ok := codes(res)["credential-vault-path"]; ok == res.OK() || !strings.Contains(d.Message, "unknown variable {who}") || d.Pos.Line == 0 {
		t.Fatalf("bad vault template: %s", render(res.Diagnostics))
	}
}
