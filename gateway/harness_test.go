package gateway_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/test/mcpserver"
	"github.com/lush-agents/lush/test/projecttest"
	"github.com/lush-agents/lush/test/syncbuf"
)

func TestMain(m *testing.M) {
	mcpserver.ServeStdioIfRequested()
	os.Exit(m.Run())
}

// API keys of the test principals.
const (
	aliceKey = "alice-key-0123456789"   // user:alice, group:eng: read on the server, write on write_note
	bobKey   = "bob-key-0123456789"     // user:bob: no grants
	botKey   = "bot-key-0123456789abcd" // serviceaccount:bot: write on everything
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// project writes a Lush project whose agent "assistant" uses the test server at url (remote) and
// the stdio test server, and returns its directory.
func project(t testing.TB, url string, lushExtra string) string {
	t.Helper()
	dir := t.TempDir()
	write := func(rel, content string, mode os.FileMode) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("bin/server", mcpserver.StdioScript(), 0o755)
	write("tools/hello/tool.yaml", "description: Says hello.\ncommand: ./run\naccess: read\n", 0o644)
	write("tools/hello/run", "#!/bin/sh\necho hello from a local tool\n", 0o755)
	write("agents/assistant/spec.yaml", `name: assistant
model: gemini-2.5-flash
description: Helps.
tools:
  - server: mcp://tests.internal/mcp
    access: write
  - server: mcp://stdio/bin/server
    access: write
    tools: [echo, crash, sleep]
  - name: tools/hello
    access: read
acl:
  - principal: group:eng
    role: execute
  - principal: user:bob
    role: execute
  - principal: serviceaccount:bot
    role: execute
`, 0o644)
	write("lush.yaml", `project: gw-test
service_accounts: [bot]
servers:
  mcp://tests.internal/mcp:
    url: `+url+`
tool_classes:
  mcp://tests.internal/mcp:
    echo: read
    env: read
    sleep: read
    fail: read
    write_note: {access: write, risk: write}
  mcp://stdio/bin/server:
    echo: read
    sleep: read
    crash: read
tool_grants:
  - tool: mcp://tests.internal/mcp
    grants:
      - {principal: group:eng, access: read}
      - {principal: user:alice, access: write, tools: [write_note]}
      - {principal: serviceaccount:bot, access: write}
  - tool: mcp://stdio/bin/server
    grants:
      - {principal: group:eng, access: read}
  - tool: tools/hello
    grants:
      - {principal: group:eng, access: read}
`+lushExtra, 0o644)
	return dir
}

type harness struct {
	t       testing.TB
	dir     string
	url     string // the recorded upstream test server
	gw      *gateway.Gateway
	srv     *httptest.Server
	log     *decisionlog.Log
	logPath string
	rec     *mcpserver.Recorder
	spans   *tracetestRecorder
	metrics *telemetry.Metrics
	logs    *syncbuf.Buffer // the gateway's own log output
}

// start builds the project, opens a decision log and serves a gateway over it. The options
// change the gateway's Options after the harness has filled them in.
func start(t testing.TB, cfg gateway.Config, opts ...func(*gateway.Options)) *harness {
	t.Helper()
	url, rec := mcpserver.StartRecordedHTTP(t.Cleanup)
	h := &harness{t: t, rec: rec, url: url}
	h.dir = project(t, url, "")
	h.serve(cfg, opts...)
	return h
}

// serve builds h.dir, opens a decision log and serves a gateway over it.
func (h *harness) serve(cfg gateway.Config, opts ...func(*gateway.Options)) {
	t := h.t
	t.Helper()
	if cfg.Limits.DecisionTimeout == 0 {
		cfg.Limits.DecisionTimeout = projecttest.DecisionTimeout
	}
	h.logPath = filepath.Join(t.TempDir(), "decisions.db")
	ctx := context.Background()
	var err error
	if h.log, err = decisionlog.Open(ctx, h.logPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.log.Close() })
	if cfg.Auth.APIKeys == nil {
		cfg.Auth.APIKeys = []identity.APIKeyConfig{
			{Name: "alice", SHA256: sha(aliceKey), Principal: "user:alice", Groups: []string{"group:eng"}},
			{Name: "bob", SHA256: sha(bobKey), Principal: "user:bob"},
			{Name: "bot", SHA256: sha(botKey), Principal: "serviceaccount:bot"},
		}
	}
	auth, err := identity.New(ctx, cfg.Auth)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	cfg.Upstreams.BackoffInitial, cfg.Upstreams.BackoffMax = 50*time.Millisecond, 200*time.Millisecond
	h.spans = newSpanRecorder()
	h.metrics = telemetry.NewMetrics()
	h.logs = &syncbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	gopts := gateway.Options{ProjectDir: h.dir, Policy: enforce.NewPolicy(enforce.Config{Log: h.log, Metrics: h.metrics}), Auth: auth, Metrics: h.metrics, Tracer: h.spans.provider, Logger: logger}
	for _, opt := range opts {
		opt(&gopts)
	}
	h.gw, err = gateway.New(cfg, gopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.gw.Close)
	h.deploy(h.dir)
	h.srv = httptest.NewServer(h.gw.Handler())
	t.Cleanup(h.srv.Close)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := h.gw.WaitUpstreams(wctx); err != nil {
		t.Fatal(err)
	}
}

// deploy builds dir and deploys it.
func (h *harness) deploy(dir string) string {
	h.t.Helper()
	res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
	if err != nil || !res.OK() {
		h.t.Fatalf("build: %v %v", err, res.Diagnostics)
	}
	if err := h.gw.Deploy(context.Background(), res.Manifest, res.Hash, res.Bundle); err != nil {
		h.t.Fatal(err)
	}
	return res.Hash
}

// client connects an MCP client to an agent as the principal of key.
func (h *harness) client(agent, key string, opts ...transport.StreamableHTTPCOption) *client.Client {
	h.t.Helper()
	headers := map[string]string{}
	if key != "" {
		headers["X-API-Key"] = key
	}
	c, err := client.NewStreamableHttpClient(h.srv.URL+"/agents/"+agent+"/mcp", append(opts, transport.WithHTTPHeaders(headers))...)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		h.t.Fatal(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25",
		ClientInfo: mcp.Implementation{Name: "gateway-test", Version: "1"}}}); err != nil {
		h.t.Fatalf("initialize: %v", err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

func toolNames(t testing.TB, c *client.Client) []string {
	t.Helper()
	res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

func callTool(t testing.TB, c *client.Client, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := c.CallTool(context.Background(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: name, Arguments: args}})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// events reads the decision log.
func (h *harness) events(f decisionlog.Filter) []decisionlog.Record {
	h.t.Helper()
	// Completions are queued after the answer; wait until they are committed.
	if err := h.log.Sync(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	r, err := decisionlog.OpenReader(h.logPath)
	if err != nil {
		h.t.Fatal(err)
	}
	defer r.Close()
	f.Oldest = true
	if f.Limit == 0 {
		f.Limit = 1000
	}
	recs, err := r.Query(context.Background(), f)
	if err != nil {
		h.t.Fatal(err)
	}
	return recs
}

// post sends a raw HTTP request to an agent endpoint and decodes the JSON answer.
func (h *harness) post(agent, body string, hdr map[string]string) (*http.Response, map[string]any) {
	h.t.Helper()
	resp := h.send(agent, strings.NewReader(body), hdr)
	defer resp.Body.Close()
	var out map[string]any
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		json.NewDecoder(resp.Body).Decode(&out)
		return resp, out
	}
	// A long call is answered on an SSE stream (sessions.stream_after): its answer is the
	// stream's response, the last event that has an id and no method.
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		var m map[string]any
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &m) == nil && m["id"] != nil && m["method"] == nil {
			out = m
		}
	}
	return resp, out
}

// send posts body to an agent endpoint as a JSON-RPC client does, with hdr; the caller closes the
// answer's body.
func (h *harness) send(agent string, body io.Reader, hdr map[string]string) *http.Response {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/agents/"+agent+"/mcp", body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp
}
