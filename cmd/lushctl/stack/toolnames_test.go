package stack_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/agentd/model/anthropic"
	"github.com/lush-agents/lush/cmd/lushctl/stack"
	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/test/anthropicserver"
	"github.com/lush-agents/lush/test/projecttest"
)

// An agent that allowlists a whole MCP server whose tool is named notes.search runs on
// Anthropic, whose API refuses '.' in tool names: the model is offered notes_search (the test
// server checks names as the API does), its call of notes_search reaches the upstream as
// notes.search, and the decision log and the invocation's record name the real tool.
func TestToolNamesAcrossProviders(t *testing.T) {
	var mu sync.Mutex
	var upstream []string
	notes := server.NewMCPServer("notes", "1", server.WithToolCapabilities(false))
	notes.AddTool(mcp.NewTool("notes.search", mcp.WithDescription("Search the notes."), mcp.WithString("query", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mu.Lock()
			upstream = append(upstream, req.Params.Name)
			mu.Unlock()
			return mcp.NewToolResultText("Q3 revenue grew 12%"), nil
		})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(notes))
	t.Cleanup(hs.Close)

	dir := t.TempDir()
	for rel, content := range map[string]string{
		"agents/finder/spec.yaml": `name: finder
model: anthropic/claude-sonnet-4-5
description: Finds facts in the notes.
tools:
  - server: mcp://notes.internal/mcp
    access: read
acl:
  - {principal: group:eng, role: execute}
`,
		"lush.yaml": `project: names-test
servers:
  mcp://notes.internal/mcp:
    url: ` + hs.URL + `/mcp
tool_classes:
  mcp://notes.internal/mcp:
    notes.search: read
tool_grants:
  - tool: mcp://notes.internal/mcp
    grants:
      - {principal: group:eng, access: read}
`,
	} {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	srv := anthropicserver.New(anthropicKey)
	t.Cleanup(srv.Close)
	srv.Push(
		anthropicserver.Turn{Calls: []anthropicserver.Call{{ID: "toolu_1", Name: "notes_search", Input: map[string]any{"query": "Q3"}}}},
		anthropicserver.Turn{Text: "Q3 revenue grew 12%."},
	)
	// The production path: a router that runs the build's target (anthropic) through a factory.
	router := model.NewRouter(map[string]model.Factory{"anthropic": func(ctx context.Context, _ string, _ model.Target) (model.Model, error) {
		return anthropic.New(ctx, anthropic.Config{BaseURL: srv.URL(), MaxRetries: -1,
			Key: func(context.Context) (string, error) { return anthropicKey, nil }})
	}})

	cfg := gateway.Config{Listen: "127.0.0.1:0", DecisionLog: filepath.Join(t.TempDir(), "decisions.db"), Auth: identity.Config{APIKeys: []identity.APIKeyConfig{
		{Name: "alice", SHA256: sha(aliceKey), Principal: "user:alice", Groups: []string{"group:eng"}},
	}}}
	cfg.Limits.DecisionTimeout = projecttest.DecisionTimeout
	ctx := context.Background()
	st, err := stack.Start(ctx, stack.Config{ProjectDir: dir, Gateway: cfg, Agents: &agentd.Config{}, Model: router})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st.Shutdown(sctx)
	})
	res, err := compiler.Build(ctx, dir, compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("build: %v %v", err, res.Diagnostics)
	}
	if err := st.Deploy(ctx, res.Manifest, res.Hash, res.Bundle); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := st.Gateway.WaitUpstreams(wctx); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, st: st}

	code, out, body := h.chat("finder", aliceKey, "What about Q3?")
	if code != 200 || out.Status != "ok" || out.Response != "Q3 revenue grew 12%." {
		t.Fatalf("chat: %d %s", code, body)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests to the provider, want 2", len(reqs))
	}
	if got := reqs[0].ToolNames(); !slices.Equal(got, []string{"notes_search"}) {
		t.Errorf("the model was offered %q, want [notes_search]", got)
	}
	if results := reqs[1].LastToolResults(); len(results) != 1 || results[0].IsError || !strings.Contains(results[0].ResultText(), "grew 12%") {
		t.Errorf("the tool result the model got: %+v", results)
	}
	mu.Lock()
	if !slices.Equal(upstream, []string{"notes.search"}) {
		t.Errorf("the upstream got calls of %q, want [notes.search]", upstream)
	}
	mu.Unlock()
	if len(out.Tools) != 1 || out.Tools[0].Name != "notes_search" || out.Tools[0].MCPName != "notes.search" || out.Tools[0].Status != "ok" {
		t.Errorf("the invocation's tool calls: %+v", out.Tools)
	}
	var logged []string
	for _, r := range h.decisions() {
		if r.Event.Action == "tools/call" {
			logged = append(logged, r.Event.ToolName+"="+r.Event.Outcome)
		}
	}
	if !slices.Equal(logged, []string{"notes.search=allow"}) {
		t.Errorf("tools/call decisions %q, want [notes.search=allow]", logged)
	}
}
