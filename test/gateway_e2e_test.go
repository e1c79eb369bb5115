package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// realProject writes a project whose agent "assistant" uses the npm filesystem server (stdio,
// started by the gateway) and the npm server-everything (streamable HTTP at everything).
func realProject(t *testing.T, everything string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"data/notes.md": "The answer is 42.\n",
		"agents/assistant/spec.yaml": `name: assistant
model: gemini-2.5-flash
description: Reads notes and echoes.
tools:
  - server: mcp://npx/@modelcontextprotocol/server-filesystem
    access: write
    tools: [read_text_file, list_directory, write_file]
  - server: mcp://everything.local/mcp
    access: write
acl:
  - principal: group:eng
    role: execute
`,
		"lush.yaml": `project: e2e
servers:
  mcp://npx/@modelcontextprotocol/server-filesystem:
    args: [./data]
  mcp://everything.local/mcp:
    url: ` + everything + `
tool_classes:
  mcp://npx/@modelcontextprotocol/server-filesystem:
    read_text_file: read
    list_directory: read
  mcp://everything.local/mcp:
    echo: read
tool_grants:
  - tool: mcp://npx/@modelcontextprotocol/server-filesystem
    grants:
      - {principal: group:eng, access: write}
  - tool: mcp://everything.local/mcp
    grants:
      - {principal: group:eng, access: write}
`,
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goClient connects mcp-go's streamable HTTP client to endpoint and initializes a session; opts
// add headers or an HTTP client.
func goClient(t *testing.T, endpoint string, opts ...transport.StreamableHTTPCOption) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(endpoint, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25",
		ClientInfo: mcp.Implementation{Name: "e2e", Version: "1"}}}); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return c
}

func call(t *testing.T, c *client.Client, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := c.CallTool(context.Background(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: name, Arguments: args}})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n"), res.IsError
}

// TestGatewayWithRealServers runs lushctl gateway in front of the real npm filesystem server
// (stdio) and server-everything (streamable HTTP), with mcp-go's client and the official
// TypeScript SDK's client.
func TestGatewayWithRealServers(t *testing.T) {
	everything := startEverything(t)
	dir := realProject(t, everything)
	base, gw := startGateway(t, dir, "--dev", "--dev-principal", "user:tester", "--dev-group", "group:eng")
	endpoint := base + "/agents/assistant/mcp"

	// mcp-go client.
	c := goClient(t, endpoint)
	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"read_text_file", "write_file", "echo", "get-sum"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools %v lack %s", names, want)
		}
	}
	if text, isErr := call(t, c, "read_text_file", map[string]any{"path": filepath.Join(dir, "data/notes.md")}); isErr || !strings.Contains(text, "42") {
		t.Errorf("read through the filesystem server = %q (error %v)", text, isErr)
	}
	if text, isErr := call(t, c, "write_file", map[string]any{"path": filepath.Join(dir, "data/new.md"), "content": "x"}); isErr || !strings.HasPrefix(text, "[stub]") {
		t.Errorf("write = %q", text)
	}
	if _, err := os.Stat(filepath.Join(dir, "data/new.md")); err == nil {
		t.Error("a stubbed write created the file")
	}
	// The gateway alone also serves the approvals and budgets APIs, decided by the policy: the dev
	// principal holds neither role.
	for _, path := range []string{"/approvals", "/budgets"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `"decision_id"`) {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
	if text, isErr := call(t, c, "echo", map[string]any{"message": "through lush"}); isErr || !strings.Contains(text, "through lush") {
		t.Errorf("echo through server-everything = %q", text)
	}

	// The official TypeScript SDK's client.
	script := filepath.Join(nodeTools(t), "client.mjs")
	src, _ := os.ReadFile("node/client.mjs")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	steps, _ := json.Marshal([]map[string]any{
		{"list": true},
		{"call": "echo", "arguments": map[string]any{"message": "from the TS SDK"}},
		{"call": "write_file", "arguments": map[string]any{"path": filepath.Join(dir, "data/ts.md"), "content": "y"}},
	})
	lines := runNode(t, script, endpoint, "{}", string(steps))
	if len(lines) != 3 {
		t.Fatalf("TS SDK output: %v", lines)
	}
	if !strings.Contains(lines[0], `"read_text_file"`) || !strings.Contains(lines[1], "from the TS SDK") || !strings.Contains(lines[2], `[stub]`) {
		t.Errorf("TS SDK results:\n%s", strings.Join(lines, "\n"))
	}

	// The decision log tells the story.
	out := runLushctl(t, "audit", "query", "--log", filepath.Join(dir, ".lush/decisions.db"), "--action", "tools/call", "--oldest", "--limit", "100", "-o", "json")
	var outcomes []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec struct {
			Event struct {
				Outcome  string `json:"outcome"`
				ToolName string `json:"tool_name"`
			} `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		outcomes = append(outcomes, rec.Event.ToolName+":"+rec.Event.Outcome)
	}
	want := []string{"read_text_file:allow", "write_file:stub", "echo:allow", "echo:allow", "write_file:stub"}
	if !slices.Equal(outcomes, want) {
		t.Errorf("logged calls %v, want %v", outcomes, want)
	}
	if code := gw.stop(t); code != 0 {
		t.Errorf("gateway exit status %d after SIGTERM", code)
	}
}

func runLushctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := execOutput(lushctlBin, args...)
	if err != nil {
		t.Fatalf("lushctl %v: %v\n%s", args, err, out)
	}
	return out
}

// TestTwoGatewayProcesses: two gateway processes with one session key serve one client that
// alternates between them on every request.
func TestTwoGatewayProcesses(t *testing.T) {
	everything := startEverything(t)
	dir := realProject(t, everything)
	key := filepath.Join(t.TempDir(), "session.key")
	os.WriteFile(key, []byte("shared-session-key-0123456789-abcdefghij"), 0o600)
	config := filepath.Join(t.TempDir(), "gateway.yaml")
	os.WriteFile(config, []byte("session_key_file: "+key+"\n"), 0o644)
	hash := strings.TrimSpace(runLushctl(t, "build", "--offline", "-q", dir))
	a, _ := startGateway(t, dir, "--config", config, "--build", hash, "--dev", "--dev-group", "group:eng", "--decision-log", filepath.Join(t.TempDir(), "a.db"))
	b, _ := startGateway(t, dir, "--config", config, "--build", hash, "--dev", "--dev-group", "group:eng", "--decision-log", filepath.Join(t.TempDir(), "b.db"))
	ua, _ := url.Parse(a)
	ub, _ := url.Parse(b)
	rt := &alternate{targets: []*url.URL{ua, ub}}
	c := goClient(t, a+"/agents/assistant/mcp", transport.WithHTTPBasicClient(&http.Client{Transport: rt}))
	for i := range 4 {
		if text, isErr := call(t, c, "echo", map[string]any{"message": fmt.Sprint(i)}); isErr || !strings.Contains(text, fmt.Sprint(i)) {
			t.Fatalf("call %d: %q", i, text)
		}
	}
	if rt.counts[0].Load() < 3 || rt.counts[1].Load() < 3 {
		t.Errorf("requests per process: %d, %d", rt.counts[0].Load(), rt.counts[1].Load())
	}
}

type alternate struct {
	targets []*url.URL
	n       atomic.Int64
	counts  [2]atomic.Int64
}

func (a *alternate) RoundTrip(r *http.Request) (*http.Response, error) {
	i := int(a.n.Add(1)-1) % len(a.targets)
	a.counts[i].Add(1)
	r = r.Clone(r.Context())
	r.URL.Host, r.Host = a.targets[i].Host, a.targets[i].Host
	return http.DefaultTransport.RoundTrip(r)
}
