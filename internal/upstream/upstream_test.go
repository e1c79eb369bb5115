package upstream_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/test/mcpserver"
)

func TestMain(m *testing.M) {
	mcpserver.ServeStdioIfRequested()
	serveAskStdioIfRequested()
	os.Exit(m.Run())
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func TestResolveNpxFromPrefix(t *testing.T) {
	prefix := t.TempDir()
	pkg := filepath.Join(prefix, "node_modules", "@acme", "mcp-thing")
	write(t, filepath.Join(pkg, "package.json"), `{"name":"@acme/mcp-thing","version":"1.2.3","bin":{"mcp-thing":"dist/index.js","other":"x.js"}}`, 0o644)
	r := &upstream.Resolver{ProjectDir: "/project", NodePrefixes: []string{prefix}}
	if _, err := os.Stat("/usr/bin/node"); err != nil {
		if _, err := os.Stat("/usr/local/bin/node"); err != nil {
			t.Skip("node is not installed")
		}
	}
	for _, spec := range []string{"@acme/mcp-thing", "@acme/mcp-thing@1.2.3"} {
		c, err := r.Command(&manifest.Stdio{Launcher: "npx", Package: spec, Args: []string{"./data"}})
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(c.Path) != "node" || c.Args[0] != filepath.Join(pkg, "dist/index.js") || c.Args[1] != "./data" || c.Dir != "/project" {
			t.Errorf("%s: command = %+v", spec, c)
		}
	}
	// A pinned version that is not the installed one falls back to npx.
	c, err := r.Command(&manifest.Stdio{Launcher: "npx", Package: "@acme/mcp-thing@2.0.0"})
	if err != nil {
		t.Skip("npx not installed")
	}
	if filepath.Base(c.Path) != "npx" || c.Args[0] != "-y" || c.Args[1] != "@acme/mcp-thing@2.0.0" {
		t.Errorf("version mismatch: command = %+v", c)
	}
}

func TestResolveStdioCommand(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "bin", "server"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(dir, "bin", "plain"), "#!/bin/sh\n", 0o644)
	r := &upstream.Resolver{ProjectDir: dir}
	if c, err := r.Command(&manifest.Stdio{Launcher: "stdio", Package: "bin/server"}); err != nil || c.Path != filepath.Join(dir, "bin", "server") {
		t.Errorf("project command: %+v, %v", c, err)
	}
	if _, err := r.Command(&manifest.Stdio{Launcher: "stdio", Package: "bin/plain"}); err == nil || !strings.Contains(err.Error(), "chmod +x") {
		t.Errorf("non-executable: %v", err)
	}
	if _, err := r.Command(&manifest.Stdio{Launcher: "stdio", Package: "bin/none"}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing: %v", err)
	}
	if c, err := r.Command(&manifest.Stdio{Launcher: "stdio", Package: "sh"}); err != nil || !strings.HasSuffix(c.Path, "/sh") {
		t.Errorf("PATH command: %+v, %v", c, err)
	}
}

// TestStdioEnvironmentIsMinimal: a stdio server sees only its declared variables and a few
// needed to find programs, never Lush's own environment, which holds credentials.
func TestStdioEnvironmentIsMinimal(t *testing.T) {
	t.Setenv("VAULT_TOKEN", "s.super-secret-token")
	t.Setenv("GOOGLE_API_KEY", "AIza-secret")
	dir := t.TempDir()
	write(t, filepath.Join(dir, "server"), mcpserver.StdioScript(), 0o755)
	tool := &manifest.Tool{Ref: "mcp://stdio/server", Kind: "mcp", Stdio: &manifest.Stdio{Launcher: "stdio", Package: "server",
		Env: []manifest.EnvVar{{Name: "GREETING", Value: "hello"}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, init, err := upstream.Dial(ctx, tool, upstream.DialOptions{Resolver: &upstream.Resolver{ProjectDir: dir}, Env: []string{"INJECTED=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if init.ServerInfo.Name != "lush-test-server" {
		t.Errorf("server = %+v", init.ServerInfo)
	}
	res, err := c.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "env"}})
	if err != nil {
		t.Fatal(err)
	}
	env := res.Content[0].(mcp.TextContent).Text
	for _, secret := range []string{"super-secret-token", "AIza-secret", "VAULT_TOKEN", "GOOGLE_API_KEY"} {
		if strings.Contains(env, secret) {
			t.Errorf("the stdio server sees %q:\n%s", secret, env)
		}
	}
	for _, want := range []string{"GREETING=hello", "INJECTED=1", "PATH="} {
		if !strings.Contains(env, want) {
			t.Errorf("the stdio server's environment lacks %s:\n%s", want, env)
		}
	}
	tools, err := upstream.ListAllTools(ctx, c)
	if err != nil || len(tools) != len(mcpserver.ToolNames) {
		t.Errorf("tools = %v, %v", tools, err)
	}
}

// TestDialSSEOutlivesItsContext: an SSE server's event stream belongs to the connection, not to
// the context Dial was given (which a caller typically cancels once the handshake is done).
func TestDialSSEOutlivesItsContext(t *testing.T) {
	url := mcpserver.StartSSE(t.Cleanup)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c, _, err := upstream.Dial(ctx, &manifest.Tool{Ref: "mcp://legacy.internal/sse", Remote: &manifest.Remote{URL: url, Transport: "sse"}}, upstream.DialOptions{})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(100 * time.Millisecond)
	res, err := c.CallTool(context.Background(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "still here"}}})
	if err != nil || res.IsError {
		t.Fatalf("call after the dial context ended: %v %+v", err, res)
	}

	// A handshake that cannot finish ends with its context.
	dead, cancelDead := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelDead()
	blackhole := httptestBlackhole(t)
	if _, _, err := upstream.Dial(dead, &manifest.Tool{Ref: "mcp://hang.internal/sse", Remote: &manifest.Remote{URL: blackhole, Transport: "sse"}}, upstream.DialOptions{}); err == nil {
		t.Fatal("dial of a server that never sends its endpoint succeeded")
	}
}

// httptestBlackhole serves an event stream that never sends anything.
func httptestBlackhole(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL + "/sse"
}
