package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/test/mcpserver"
)

type tracetestRecorder struct {
	rec      *tracetest.SpanRecorder
	provider *sdktrace.TracerProvider
}

func newSpanRecorder() *tracetestRecorder {
	rec := tracetest.NewSpanRecorder()
	return &tracetestRecorder{rec: rec, provider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}
}

func TestToolsListIsFilteredByPolicy(t *testing.T) {
	h := start(t, gateway.Config{})
	alice := toolNames(t, h.client("assistant", aliceKey))
	// alice reads everything of both servers (same names collide, so they get prefixes), writes
	// write_note, and reads the local tool; she may not call the server's other write tools.
	for _, want := range []string{"hello", "tests__echo", "server__echo", "write_note", "server__sleep", "tests__sleep", "env"} {
		if !slices.Contains(alice, want) {
			t.Errorf("alice's tools %v lack %s", alice, want)
		}
	}
	// crash is read on the stdio server (visible) but unclassified, so a write, on the remote one.
	if !slices.Contains(alice, "server__crash") || slices.Contains(alice, "tests__crash") {
		t.Errorf("alice's crash tools: %v", alice)
	}
	// bob may execute the agent but holds no grant: he sees no tool at all.
	if bob := toolNames(t, h.client("assistant", bobKey)); len(bob) != 0 {
		t.Errorf("bob sees %v", bob)
	}
	// Each per-tool decision is in the log, with action tools/list.
	if recs := h.events(decisionlog.Filter{Principal: "user:bob", Action: "tools/list"}); len(recs) == 0 || recs[0].Event.Outcome != "deny" {
		t.Errorf("bob's list decisions = %d", len(recs))
	}
}

func TestCallAllowedStubbedLiveAndDenied(t *testing.T) {
	h := start(t, gateway.Config{})
	alice := h.client("assistant", aliceKey)

	// An allowed read passes through to the upstream and back.
	res := callTool(t, alice, "tests__echo", map[string]any{"text": "hello"})
	if res.IsError || text(res) != "hello" {
		t.Fatalf("echo = %+v", res)
	}
	// A write with live writes off is stubbed: clearly marked, and the upstream never sees it.
	res = callTool(t, alice, "write_note", map[string]any{"text": "draft"})
	if res.IsError || !strings.HasPrefix(text(res), "[stub] write_note was NOT executed") || !strings.Contains(text(res), `{"text":"draft"}`) {
		t.Fatalf("stub = %s", text(res))
	}
	if sc, _ := res.StructuredContent.(map[string]any); sc["lush_stub"] == nil {
		t.Errorf("stub structured content = %v", res.StructuredContent)
	}
	if calls := h.rec.Calls(); slices.Contains(calls, "write_note") {
		t.Errorf("a stubbed write reached the upstream: %v", calls)
	}
	// bob holds no grant: denied, with the reason and the decision id, and nothing reaches the upstream.
	bob := h.client("assistant", bobKey)
	res = callTool(t, bob, "tests__echo", map[string]any{"text": "x"})
	if !res.IsError || !strings.Contains(text(res), "Lush denied this call: principal user:bob holds no grant") || !strings.Contains(text(res), "(decision ") {
		t.Fatalf("bob's call = %s", text(res))
	}
	if n := strings.Count(strings.Join(h.rec.Calls(), ","), "echo"); n != 1 {
		t.Errorf("upstream saw %d echo calls, want 1", n)
	}
	// The local tool runs.
	if res := callTool(t, alice, "hello", nil); res.IsError || text(res) != "hello from a local tool" {
		t.Errorf("local tool = %+v", res)
	}
	// An unknown tool is a readable denial (TestUnknownToolIsDecided).
	if res := callTool(t, alice, "nope", nil); !res.IsError || !strings.Contains(text(res), `agent "assistant" has no tool "nope"`) {
		t.Errorf("unknown tool = %s", text(res))
	}

	// The decision log has one event per decision, each with what happened.
	recs := h.events(decisionlog.Filter{Action: "tools/call"})
	var outcomes []string
	for _, r := range recs {
		o := r.Event.Outcome
		if r.Completion != nil {
			o += "/" + r.Completion.Status
		}
		outcomes = append(outcomes, r.Event.Principal+":"+r.Event.ToolName+":"+o)
	}
	want := []string{"user:alice:echo:allow/ok", "user:alice:write_note:stub/stubbed", "user:bob:echo:deny", "user:alice::allow/ok", "user:alice:nope:deny"}
	if !slices.Equal(outcomes, want) {
		t.Errorf("logged calls = %v\nwant %v", outcomes, want)
	}
	for _, r := range recs {
		if r.Event.Revision != h.gw.Revision() || r.Event.DecisionID == "" || r.Event.Point != "mcp-gateway" {
			t.Errorf("event = %+v", r.Event)
		}
	}
}

func TestLiveWrites(t *testing.T) {
	h := start(t, gateway.Config{LiveWrites: gateway.LiveWrites{Tools: []string{"mcp://tests.internal/mcp"}}})
	res := callTool(t, h.client("assistant", aliceKey), "write_note", map[string]any{"text": "for real"})
	if res.IsError || text(res) != "wrote: for real" {
		t.Fatalf("live write = %+v", res)
	}
	if !slices.Contains(h.rec.Calls(), "write_note") {
		t.Error("the live write did not reach the upstream")
	}
	// A write carries its arguments and the upstream's response in the log.
	recs := h.events(decisionlog.Filter{ToolName: "write_note"})
	if len(recs) != 1 || recs[0].Completion == nil || !strings.Contains(string(recs[0].Completion.Response), "wrote: for real") ||
		!strings.Contains(string(recs[0].Event.Input), `"for real"`) {
		t.Fatalf("write audit = %+v", recs)
	}
}

func TestDecisionLogUnwritableDenies(t *testing.T) {
	h := start(t, gateway.Config{LiveWrites: gateway.LiveWrites{All: true}})
	alice := h.client("assistant", aliceKey)
	h.log.Close() // the log can no longer be written
	res := callTool(t, alice, "write_note", map[string]any{"text": "must not run"})
	if !res.IsError || !strings.Contains(text(res), "decision log cannot be written") {
		t.Fatalf("call with a broken log = %s", text(res))
	}
	if slices.Contains(h.rec.Calls(), "write_note") {
		t.Error("a call ran although its decision could not be logged")
	}
}

func TestProgressAndCancellation(t *testing.T) {
	h := start(t, gateway.Config{})
	alice := h.client("assistant", aliceKey)
	var mu sync.Mutex
	var progress []float64
	alice.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			mu.Lock()
			p, _ := n.Params.AdditionalFields["progress"].(float64)
			tok := n.Params.AdditionalFields["progressToken"]
			if tok == "mine" {
				progress = append(progress, p)
			}
			mu.Unlock()
		}
	})
	req := mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "tests__sleep", Arguments: map[string]any{"ms": 200}}}
	req.Params.Meta = &mcp.Meta{ProgressToken: "mine"}
	if _, err := alice.CallTool(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if !slices.Equal(progress, []float64{1, 2, 3, 4}) {
		t.Errorf("progress relayed = %v", progress)
	}
	mu.Unlock()

	// Cancelling the client's request cancels the upstream call; the log says so.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := alice.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "tests__sleep", Arguments: map[string]any{"ms": 10000}}})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("cancelled call: %v after %s", err, time.Since(start))
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		recs := h.events(decisionlog.Filter{ToolName: "sleep"})
		if len(recs) == 2 && recs[1].Completion != nil {
			if recs[1].Completion.Status != "cancelled" {
				t.Errorf("cancelled call logged as %q", recs[1].Completion.Status)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Error("the cancelled call has no completion in the log")
}

func TestUpstreamCrashMidCall(t *testing.T) {
	h := start(t, gateway.Config{})
	alice := h.client("assistant", aliceKey)
	res := callTool(t, alice, "server__crash", nil)
	if !res.IsError || !strings.Contains(text(res), "temporarily unavailable") {
		t.Fatalf("crash mid-call = %s", text(res))
	}
	// The other upstream keeps serving meanwhile, and the crashed one comes back.
	if res := callTool(t, alice, "tests__echo", map[string]any{"text": "still here"}); res.IsError {
		t.Errorf("other upstream: %s", text(res))
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if res := callTool(t, alice, "server__echo", map[string]any{"text": "back"}); !res.IsError && text(res) == "back" {
			if st := h.gw.Upstreams()["mcp://stdio/bin/server"]; st.Restarts != 1 {
				t.Errorf("restarts = %d", st.Restarts)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Error("the crashed upstream did not come back")
}

func TestReload(t *testing.T) {
	h := start(t, gateway.Config{})
	alice := h.client("assistant", aliceKey)
	first := h.gw.Revision()
	if res := callTool(t, alice, "tests__echo", map[string]any{"text": "a"}); res.IsError {
		t.Fatal(text(res))
	}
	// A bundle that does not load is refused; the current build keeps serving.
	if err := h.gw.Deploy(context.Background(), nil, strings.Repeat("a", 64), []byte("not a bundle")); err == nil {
		t.Fatal("a bad bundle was deployed")
	}
	if h.gw.Revision() != first {
		t.Fatal("a refused deploy changed the revision")
	}
	if res := callTool(t, alice, "tests__echo", map[string]any{"text": "b"}); res.IsError {
		t.Fatalf("after a refused deploy: %s", text(res))
	}
	// A new build that takes alice's read grant away applies to the next call, same session.
	lush := h.dir + "/lush.yaml"
	raw, err := os.ReadFile(lush)
	if err != nil {
		t.Fatal(err)
	}
	data := strings.Replace(string(raw), "      - {principal: group:eng, access: read}\n      - {principal: user:alice, access: write", "      - {principal: user:alice, access: write", 1)
	if err := os.WriteFile(lush, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	second := h.deploy(h.dir)
	if second == first {
		t.Fatal("the edit did not change the build")
	}
	res := callTool(t, alice, "tests__echo", map[string]any{"text": "c"})
	if !res.IsError || !strings.Contains(text(res), "holds no grant") {
		t.Fatalf("after the new build: %s", text(res))
	}
	recs := h.events(decisionlog.Filter{ToolName: "echo", Principal: "user:alice"})
	if len(recs) < 3 || recs[0].Event.Revision != first || recs[len(recs)-1].Event.Revision != second {
		t.Errorf("revisions in the log: %v", revisions(recs))
	}
}

func revisions(recs []decisionlog.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Event.Revision[:8])
	}
	return out
}

func TestHTTPEdgeCases(t *testing.T) {
	h := start(t, gateway.Config{})
	key := map[string]string{"X-API-Key": aliceKey}
	tests := []struct {
		name   string
		agent  string
		body   string
		hdr    map[string]string
		status int
		want   string
	}{
		{"no credentials", "assistant", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil, 401, "missing_credentials"},
		{"wrong key", "assistant", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"X-API-Key": "nope"}, 401, "unknown_api_key"},
		{"forged delegation token", "assistant", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Authorization": "Bearer eyJhbGciOiJFZERTQSIsInR5cCI6Imx1c2gtZGVsZWdhdGlvbitqd3QifQ.eyJzdWIiOiJ1c2VyOm1hbGxvcnkifQ.c2ln"}, 401, ""},
		{"unknown agent", "ghost", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, key, 404, `no agent "ghost"`},
		{"not JSON", "assistant", `{"jsonrpc":`, key, 400, "not valid JSON"},
		{"batch", "assistant", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, key, 400, "batches are not supported"},
		{"no session", "assistant", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, key, 400, "missing Mcp-Session-Id"},
		{"bad session", "assistant", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, map[string]string{"X-API-Key": aliceKey, "Mcp-Session-Id": "lush1.forged.sig"}, 404, "not one this gateway issued"},
		{"wrong version", "assistant", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"X-API-Key": aliceKey, "Mcp-Protocol-Version": "1999-01-01"}, 400, ""},
		{"rebinding", "assistant", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"X-API-Key": aliceKey, "Origin": "http://evil.example.com"}, 403, "not allowed"},
		{"oversized", "assistant", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", 5<<20) + `"}}`, key, 413, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := h.post(tt.agent, tt.body, tt.hdr)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d: %v", resp.StatusCode, tt.status, body)
			}
			msg, _ := body["error"].(map[string]any)["message"].(string)
			if tt.want != "" && !strings.Contains(msg, tt.want) {
				t.Errorf("message %q lacks %q", msg, tt.want)
			}
			if resp.StatusCode == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// A session is bound to its principal: bob cannot use alice's session id, and is not told it
	// exists.
	resp, _ := h.post("assistant", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","clientInfo":{"name":"x","version":"1"},"capabilities":{}}}`, key)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d", resp.StatusCode)
	}
	resp, body := h.post("assistant", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, map[string]string{"X-API-Key": bobKey, "Mcp-Session-Id": sid})
	if resp.StatusCode != 404 || !strings.Contains(body["error"].(map[string]any)["message"].(string), "unknown session") {
		t.Errorf("bob with alice's session: %d %v", resp.StatusCode, body)
	}
}

func TestResourcesAndPrompts(t *testing.T) {
	h := start(t, gateway.Config{})
	alice := h.client("assistant", aliceKey)
	ctx := context.Background()
	res, err := alice.ListResources(ctx, mcp.ListResourcesRequest{})
	if err != nil || len(res.Resources) != 1 || res.Resources[0].URI != "test://readme" {
		t.Fatalf("resources = %+v, %v", res, err)
	}
	read, err := alice.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: "test://readme"}})
	if err != nil || read.Contents[0].(mcp.TextResourceContents).Text != "read me" {
		t.Fatalf("read = %+v, %v", read, err)
	}
	prompts, err := alice.ListPrompts(ctx, mcp.ListPromptsRequest{})
	if err != nil || len(prompts.Prompts) != 1 || prompts.Prompts[0].Name != "greet" {
		t.Fatalf("prompts = %+v, %v", prompts, err)
	}
	got, err := alice.GetPrompt(ctx, mcp.GetPromptRequest{Params: mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"who": "Ada"}}})
	if err != nil || got.Messages[0].Content.(mcp.TextContent).Text != "Hello, Ada" {
		t.Fatalf("prompt = %+v, %v", got, err)
	}
	// bob holds no grant: no resources, and reading by URI is refused.
	bob := h.client("assistant", bobKey)
	if res, err := bob.ListResources(ctx, mcp.ListResourcesRequest{}); err != nil || len(res.Resources) != 0 {
		t.Errorf("bob's resources = %+v, %v", res, err)
	}
	if _, err := bob.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: "test://readme"}}); err == nil {
		t.Error("bob read a resource")
	}
}

func TestMetricsAndTraces(t *testing.T) {
	h := start(t, gateway.Config{})
	alice := h.client("assistant", aliceKey)
	callTool(t, alice, "tests__echo", map[string]any{"text": "m"})
	resp, err := http.Get(h.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`lush_decisions_total{access="read",action="tools/call",agent="assistant",outcome="allow",point="mcp-gateway",tool="mcp://tests.internal/mcp"} 1`,
		"lush_decision_duration_seconds_bucket", "lush_upstream_duration_seconds_bucket", `lush_upstream_up{tool="mcp://stdio/bin/server"} 1`,
		"lush_bundle_revision_info{revision=\"" + h.gw.Revision() + "\"} 1",
		`lush_agent_tool_declared{access="write",agent="assistant",tool="mcp://tests.internal/mcp"} 1`, `lush_agent_tool_declared{access="read",agent="assistant",tool="tools/hello"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(string(body), "user:alice") {
		t.Error("a principal appears in metric labels")
	}
	spans := h.spans.rec.Ended()
	var found bool
	for _, s := range spans {
		if s.Name() == "tools/call tests__echo" {
			found = true
			attrs := map[string]string{}
			for _, a := range s.Attributes() {
				attrs[string(a.Key)] = a.Value.String()
			}
			if attrs["lush.decision"] != "allow" || attrs["lush.access"] != "read" || attrs["lush.tool"] != "mcp://tests.internal/mcp" || attrs["lush.status"] != "ok" {
				t.Errorf("span attributes = %v", attrs)
			}
		}
	}
	if !found {
		t.Errorf("no tool call span among %d", len(spans))
	}
}

func TestTraceParentIsHonoured(t *testing.T) {
	h := start(t, gateway.Config{})
	resp, _ := h.post("assistant", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","clientInfo":{"name":"x","version":"1"},"capabilities":{}}}`,
		map[string]string{"X-API-Key": aliceKey})
	sid := resp.Header.Get("Mcp-Session-Id")
	h.post("assistant", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tests__echo","arguments":{"text":"t"}}}`,
		map[string]string{"X-API-Key": aliceKey, "Mcp-Session-Id": sid, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	for _, s := range h.spans.rec.Ended() {
		if s.Name() == "tools/call tests__echo" {
			if s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("span trace %s parent %s", s.SpanContext().TraceID(), s.Parent().SpanID())
			}
			recs := h.events(decisionlog.Filter{ToolName: "echo"})
			if len(recs) == 0 || recs[0].Event.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Errorf("event trace id = %v", recs)
			}
			return
		}
	}
	t.Error("no span for the traced call")
}

// TestSSEUpstream serves a tool of an upstream that speaks the older HTTP+SSE transport
// (transport: sse in lush.yaml) next to the other upstreams of the agent.
func TestSSEUpstream(t *testing.T) {
	h := start(t, gateway.Config{})
	sseURL := mcpserver.StartSSE(t.Cleanup)
	edit := func(rel, anchor, add string) {
		p := filepath.Join(h.dir, rel)
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), anchor) {
			t.Fatalf("edit %s: %v", rel, err)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), anchor, anchor+add, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("lush.yaml", "servers:\n", "  mcp://legacy.internal/sse:\n    url: "+sseURL+"\n    transport: sse\n")
	edit("lush.yaml", "tool_classes:\n", "  mcp://legacy.internal/sse:\n    echo: read\n")
	edit("lush.yaml", "tool_grants:\n", "  - tool: mcp://legacy.internal/sse\n    grants:\n      - {principal: group:eng, access: read}\n")
	edit("agents/assistant/spec.yaml", "tools:\n", "  - server: mcp://legacy.internal/sse\n    access: read\n    tools: [echo]\n")
	h.deploy(h.dir)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.gw.WaitUpstreams(ctx); err != nil {
		t.Fatal(err)
	}
	alice := h.client("assistant", aliceKey)
	var name string
	for _, n := range toolNames(t, alice) {
		if strings.HasSuffix(n, "__echo") && n != "tests__echo" && n != "server__echo" {
			name = n
		}
	}
	if name == "" {
		t.Fatalf("no echo tool of the SSE server in %v", toolNames(t, alice))
	}
	if res := callTool(t, alice, name, map[string]any{"text": "over sse"}); res.IsError || text(res) != "over sse" {
		t.Fatalf("%s = %+v", name, res)
	}
	recs := h.events(decisionlog.Filter{Tool: "mcp://legacy.internal/sse", Action: "tools/call"})
	if len(recs) != 1 || recs[0].Completion == nil || recs[0].Completion.Status != decisionlog.StatusOK {
		t.Errorf("log: %+v", recs)
	}
}

// TestUnknownToolIsDecided: a call of a name the agent has no tool by is decided and logged as a
// denial (lush.capability.unknown_tool), and its answer is the same whether the name is a tool of
// another agent, a tool of the agent's own server that its allowlist leaves out, or no tool at
// all, and whoever asks. What is logged of a long name is bounded.
func TestUnknownToolIsDecided(t *testing.T) {
	url, rec := mcpserver.StartRecordedHTTP(t.Cleanup)
	h := &harness{t: t, rec: rec, url: url}
	h.dir = project(t, url, "  - tool: tools/publish\n    grants:\n      - {principal: group:eng, access: read}\n")
	write := func(rel, content string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(h.dir, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h.dir, rel), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	// publish is a tool of the publisher only; the assistant's remote server is narrowed, so its
	// fail is left out.
	write("tools/publish/tool.yaml", "description: Publishes.\ncommand: ./run\naccess: read\n", 0o644)
	write("tools/publish/run", "#!/bin/sh\necho published\n", 0o755)
	write("agents/publisher/spec.yaml", "name: publisher\nmodel: gemini-2.5-flash\ndescription: Publishes.\ntools:\n"+
		"  - name: tools/publish\n    access: read\nacl:\n  - principal: group:eng\n    role: execute\n", 0o644)
	spec, err := os.ReadFile(filepath.Join(h.dir, "agents/assistant/spec.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	narrowed := strings.Replace(string(spec), "  - server: mcp://tests.internal/mcp\n    access: write\n",
		"  - server: mcp://tests.internal/mcp\n    access: write\n    tools: [echo, env, sleep]\n", 1)
	write("agents/assistant/spec.yaml", narrowed, 0o644)
	h.serve(gateway.Config{})
	alice, bob := h.client("assistant", aliceKey), h.client("assistant", bobKey)
	if res := callTool(t, h.client("publisher", aliceKey), "publish", nil); res.IsError {
		t.Fatalf("publish as the publisher: %s", text(res))
	}

	// The answers are the same but for the name and the decision id.
	answer := func(res *mcp.CallToolResult, name string) string {
		t.Helper()
		b, _ := json.Marshal(res)
		s := strings.ReplaceAll(string(b), `\"`+name+`\"`, `\"NAME\"`)
		var id string
		if res.Meta != nil {
			meta, _ := res.Meta.AdditionalFields["dev.lush/decision"].(map[string]any)
			id, _ = meta["id"].(string)
		}
		if id == "" || !res.IsError {
			t.Fatalf("%s: not a denial with a decision: %s", name, b)
		}
		return strings.ReplaceAll(s, id, "ID")
	}
	probes := []struct {
		what, name string
		client     *client.Client
	}{
		{"a tool of another agent", "publish", alice},
		{"a tool of the agent's server its allowlist leaves out", "fail", alice},
		{"no tool", "nope", alice},
		{"no tool, asked by a caller without grants", "nope", bob},
	}
	var first string
	for _, p := range probes {
		got := answer(callTool(t, p.client, p.name, map[string]any{"text": "x"}), p.name)
		if first == "" {
			first = got
			if !strings.Contains(got, `agent \"assistant\" has no tool \"NAME\" that you may call`) || !strings.Contains(got, "lush.capability.unknown_tool") {
				t.Fatalf("the answer: %s", got)
			}
		} else if got != first {
			t.Errorf("%s: the answer\n%s\ndiffers from\n%s", p.what, got, first)
		}
	}
	long := strings.Repeat("x", 10000)
	if res := callTool(t, alice, long, nil); !res.IsError || len(text(res)) > 1000 {
		t.Errorf("a long name: %d bytes %s", len(text(res)), text(res)[:min(len(text(res)), 300)])
	}

	// Each probe is a denial in the log, by its own rule, with the name (bounded).
	var logged []string
	for _, r := range h.events(decisionlog.Filter{Action: "tools/call", Outcome: "deny"}) {
		if !slices.Equal(r.Event.Rules, []string{"lush.capability.unknown_tool"}) || r.Event.Tool != "" || r.Completion != nil {
			t.Errorf("probe %s: rules %v, tool %q, completion %+v", r.Event.ToolName, r.Event.Rules, r.Event.Tool, r.Completion)
		}
		if len(r.Event.Input) > 2000 || len(r.Event.Result) > 2000 {
			t.Errorf("probe %.20s…: input %d bytes, result %d bytes", r.Event.ToolName, len(r.Event.Input), len(r.Event.Result))
		}
		logged = append(logged, r.Event.Principal+":"+r.Event.ToolName)
	}
	want := []string{"user:alice:publish", "user:alice:fail", "user:alice:nope", "user:bob:nope", "user:alice:" + long[:128] + "…"}
	if !slices.Equal(logged, want) {
		t.Errorf("logged probes = %.300v\nwant %.300v", logged, want)
	}
	if calls := h.rec.Calls(); slices.Contains(calls, "fail") {
		t.Errorf("a probe reached the upstream: %v", calls)
	}
}
