package gateway_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// askingServer is an MCP server (mcp-go v1.2.1) whose tools ask the client for input: sample
// (sampling/createMessage), elicit (elicitation/create, form mode), roots (roots/list). Its
// handlers return input_required results, which mcp-go turns into requests during the call for
// clients before 2026-07-28; modern selects whether it speaks 2026-07-28. ran counts the tool
// calls that completed.
func askingServer(t *testing.T, modern bool, ran *atomic.Int32) string {
	t.Helper()
	s := server.NewMCPServer("asking", "1", server.WithToolCapabilities(false))
	s.EnableSampling()
	tool := func(name string, ask func(b *server.InputRequestBuilder), answer func(mcp.InputResponses) (string, bool)) {
		s.AddTool(mcp.NewTool(name, mcp.WithDescription("Asks the client.")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if text, ok := answer(req.Params.InputResponses); ok {
				ran.Add(1)
				return mcp.NewToolResultText(text), nil
			}
			b := server.NewInputRequestBuilder("upstream-state")
			ask(b)
			return b.ToolResult(), nil
		})
	}
	tool("sample", func(b *server.InputRequestBuilder) {
		b.Sample("s", mcp.CreateMessageParams{Messages: []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent("capital of France?")}}, MaxTokens: 50})
	}, func(r mcp.InputResponses) (string, bool) {
		res := server.SamplingResponse(r, "s")
		if res == nil {
			return "", false
		}
		var content struct{ Text string } // decoded as TextContent, or as a map (2026-07-28)
		b, _ := json.Marshal(res.Content)
		json.Unmarshal(b, &content)
		return "sampled: " + content.Text, true
	})
	tool("elicit", func(b *server.InputRequestBuilder) {
		b.Elicit("e", mcp.ElicitationParams{Message: "your name?", RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
	}, func(r mcp.InputResponses) (string, bool) {
		res := server.ElicitationResponse(r, "e")
		if res == nil {
			return "", false
		}
		content, _ := json.Marshal(res.Content)
		return "elicited: " + string(res.Action) + " " + string(content), true
	})
	tool("roots", func(b *server.InputRequestBuilder) { b.Roots("r") }, func(r mcp.InputResponses) (string, bool) {
		res := server.RootsResponse(r, "r")
		if res == nil {
			return "", false
		}
		var uris []string
		for _, root := range res.Roots {
			uris = append(uris, root.URI)
		}
		return "roots: " + strings.Join(uris, ","), true
	})
	var opts []server.StreamableHTTPOption
	if !modern {
		opts = append(opts, server.WithStreamableHTTPProtocolVersions(mcp.ProtocolVersion20251125, mcp.ProtocolVersion20250618, mcp.ProtocolVersion20250326))
	}
	srv := httptest.NewServer(server.NewStreamableHTTPServer(s, opts...))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// askingProject is a project whose agent "assistant" uses the asking server at url, with
// policy files (name -> Rego) of the project.
func askingProject(t *testing.T, url string, policies map[string]string) string {
	dir := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("agents/assistant/spec.yaml", `name: assistant
model: gemini-2.5-flash
description: Helps.
tools:
  - server: mcp://asking.internal/mcp
    access: read
acl:
  - principal: group:eng
    role: execute
  - principal: user:bob
    role: execute
`)
	for name, rego := range policies {
		write("policies/"+name+".rego", rego)
	}
	write("lush.yaml", `project: serverreq-test
servers:
  mcp://asking.internal/mcp:
    url: `+url+`
tool_classes:
  mcp://asking.internal/mcp:
    sample: read
    elicit: read
    roots: read
tool_grants:
  - tool: mcp://asking.internal/mcp
    grants:
      - {principal: group:eng, access: read}
      - {principal: user:bob, access: read}
`)
	return dir
}

// answering is a client's handlers: it samples "Paris", fills the form with name "ada" and
// lists one root; asked counts the requests it answered.
type answering struct{ asked atomic.Int32 }

func (a *answering) CreateMessage(context.Context, mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	a.asked.Add(1)
	return &mcp.CreateMessageResult{SamplingMessage: mcp.SamplingMessage{Role: mcp.RoleAssistant, Content: mcp.NewTextContent("Paris")}, Model: "test"}, nil
}

func (a *answering) Elicit(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	a.asked.Add(1)
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"name": "ada"}}}, nil
}

func (a *answering) ListRoots(context.Context, mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	a.asked.Add(1)
	return &mcp.ListRootsResult{Roots: []mcp.Root{{URI: "file:///work", Name: "work"}}}, nil
}

// answeringClient connects a client with handlers for every server request, of the era modern
// says, as alice.
func (h *harness) answeringClient(a *answering, modern bool) *client.Client {
	h.t.Helper()
	tr, err := transport.NewStreamableHTTP(h.srv.URL+"/agents/assistant/mcp", transport.WithHTTPHeaders(map[string]string{"X-API-Key": aliceKey}))
	if err != nil {
		h.t.Fatal(err)
	}
	c := client.NewClient(tr, client.WithSamplingHandler(a), client.WithElicitationHandler(a), client.WithRootsHandler(a))
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		h.t.Fatal(err)
	}
	version := mcp.ProtocolVersion20251125
	if modern {
		version = mcp.ProtocolVersion20260728
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: version,
		ClientInfo: mcp.Implementation{Name: "serverreq-test", Version: "1"}}}); err != nil {
		h.t.Fatalf("initialize: %v", err)
	}
	if got := c.ProtocolVersion(); got != version {
		h.t.Fatalf("the client speaks %s, want %s", got, version)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// serverRequestEvents returns the decisions of server requests in the log, and the decision of
// each call by id.
func serverRequestEvents(h *harness) (requests []decisionlog.Record, calls map[string]decisionlog.Record) {
	calls = map[string]decisionlog.Record{}
	for _, r := range h.events(decisionlog.Filter{}) {
		switch r.Event.Action {
		case "tools/call":
			calls[r.Event.DecisionID] = r
		case "sampling/createMessage", "elicitation/create", "roots/list":
			requests = append(requests, r)
		}
	}
	return requests, calls
}

// Every combination of client and upstream eras: the upstream's request reaches the client (as
// a request during the call before 2026-07-28, as an input_required result from 2026-07-28 on,
// bridged by the gateway where the two differ), the answer goes back, the tool completes, and
// each request is in the decision log, allowed and completed, with the call's decision as its
// parent.
func TestServerRequestsReachTheClient(t *testing.T) {
	tools := []struct{ name, method, want string }{
		{"sample", "sampling/createMessage", "sampled: Paris"},
		{"elicit", "elicitation/create", `elicited: accept {"name":"ada"}`},
		{"roots", "roots/list", "roots: file:///work"},
	}
	for _, era := range []struct {
		name                   string
		modernClient, upstream bool
	}{
		{"2025-11-25 client, 2025-11-25 upstream", false, false},
		{"2025-11-25 client, 2026-07-28 upstream", false, true},
		{"2026-07-28 client, 2025-11-25 upstream", true, false},
		{"2026-07-28 client, 2026-07-28 upstream", true, true},
	} {
		t.Run(era.name, func(t *testing.T) {
			var ran atomic.Int32
			h := &harness{t: t}
			h.dir = askingProject(t, askingServer(t, era.upstream, &ran), nil)
			h.serve(gateway.Config{})
			a := &answering{}
			c := h.answeringClient(a, era.modernClient)
			for i, tt := range tools {
				res := callTool(t, c, tt.name, nil)
				if got := text(res); res.IsError || got != tt.want {
					t.Errorf("%s: %q (error %v), want %q", tt.name, got, res.IsError, tt.want)
				}
				if int(ran.Load()) != i+1 || int(a.asked.Load()) != i+1 {
					t.Errorf("%s: %d tools completed, the client answered %d requests; want %d", tt.name, ran.Load(), a.asked.Load(), i+1)
				}
			}
			requests, calls := serverRequestEvents(h)
			var methods []string
			for _, r := range requests {
				methods = append(methods, r.Event.Action)
				parent, ok := calls[r.Event.Parent]
				if r.Event.Outcome != "allow" || !ok || parent.Event.Outcome != "allow" || r.Event.Tool != "mcp://asking.internal/mcp" ||
					r.Event.Principal != "user:alice" || r.Completion == nil || r.Completion.Status != decisionlog.StatusOK {
					t.Errorf("%s: outcome %s, parent %q (a call: %v), tool %s, principal %s, completion %+v", r.Event.Action, r.Event.Outcome,
						r.Event.Parent, ok, r.Event.Tool, r.Event.Principal, r.Completion)
				}
			}
			slices.Sort(methods)
			if want := []string{"elicitation/create", "roots/list", "sampling/createMessage"}; !slices.Equal(methods, want) {
				t.Errorf("server requests in the log: %v, want %v", methods, want)
			}
		})
	}
}

// noSampling is a project policy that denies the asking server's sampling requests.
const noSampling = `package lush.policies.no_sampling

deny contains {"rule": "test.no_sampling", "message": "no sampling for the asking server"} if {
	input.action == "sampling/createMessage"
	input.tool.ref == "mcp://asking.internal/mcp"
}
`

// A project policy that denies sampling for a server: in every combination of eras, the request
// reaches neither the client nor the tool, which does not complete; the denial is in the log,
// linked to the call; the server's other requests still reach the client.
func TestServerRequestDenied(t *testing.T) {
	for _, era := range []struct {
		name                   string
		modernClient, upstream bool
	}{
		{"2025-11-25 client, 2025-11-25 upstream", false, false},
		{"2025-11-25 client, 2026-07-28 upstream", false, true},
		{"2026-07-28 client, 2025-11-25 upstream", true, false},
		{"2026-07-28 client, 2026-07-28 upstream", true, true},
	} {
		t.Run(era.name, func(t *testing.T) {
			var ran atomic.Int32
			h := &harness{t: t}
			h.dir = askingProject(t, askingServer(t, era.upstream, &ran), map[string]string{"no_sampling": noSampling})
			h.serve(gateway.Config{})
			a := &answering{}
			c := h.answeringClient(a, era.modernClient)
			res, err := c.CallTool(context.Background(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "sample"}})
			if err == nil && !res.IsError {
				t.Errorf("sample: %q, want an error", text(res))
			}
			if ran.Load() != 0 || a.asked.Load() != 0 {
				t.Errorf("the denied sampling: the tool completed %d times, the client was asked %d times", ran.Load(), a.asked.Load())
			}
			if got := text(callTool(t, c, "roots", nil)); got != "roots: file:///work" {
				t.Errorf("roots after the denial: %q", got)
			}
			requests, calls := serverRequestEvents(h)
			denied := 0
			for _, r := range requests {
				if r.Event.Action == "sampling/createMessage" {
					denied++
					if _, ok := calls[r.Event.Parent]; r.Event.Outcome != "deny" || !slices.Contains(r.Event.Rules, "test.no_sampling") || !ok || r.Completion != nil {
						t.Errorf("the sampling decision: %s %v, parent %q (a call: %v), completion %+v", r.Event.Outcome, r.Event.Rules, r.Event.Parent, ok, r.Completion)
					}
				}
			}
			if denied != 1 {
				t.Errorf("%d sampling decisions in the log, want 1", denied)
			}
		})
	}
}

// A 2026-07-28 client in front of an older upstream gets an input_required result whose
// requestState the gateway signed for it: a tampered or forged requestState, or alice's sent by
// bob, is refused (-32602) and delivers nothing; alice's own retry with the answer completes the
// call.
func TestRequestStateBound(t *testing.T) {
	var ran atomic.Int32
	h := &harness{t: t}
	h.dir = askingProject(t, askingServer(t, false, &ran), nil)
	h.serve(gateway.Config{})
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}`
	call := func(key string, id int, extra string) map[string]any {
		t.Helper()
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"sample",%s%s}}`, id, meta, extra)
		_, out := h.post("assistant", body, map[string]string{"X-API-Key": key, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "sample"})
		return out
	}
	first := call(aliceKey, 1, "")
	result, _ := first["result"].(map[string]any)
	state, _ := result["requestState"].(string)
	requests, _ := result["inputRequests"].(map[string]any)
	if result["resultType"] != "input_required" || !strings.HasPrefix(state, "lush-x1.") || len(requests) != 1 {
		t.Fatalf("first answer: %v", first)
	}
	var qid string
	for id, q := range requests {
		if q.(map[string]any)["method"] != "sampling/createMessage" {
			t.Fatalf("input request %v", q)
		}
		qid = id
	}
	answer := `{"role":"assistant","content":{"type":"text","text":"Paris"},"model":"m"}`
	retry := func(key, state string, id int) map[string]any {
		st, _ := json.Marshal(state)
		return call(key, id, fmt.Sprintf(`,"inputResponses":{%q:%s},"requestState":%s`, qid, answer, st))
	}
	dot := strings.LastIndexByte(state, '.')
	payload, _ := base64.RawURLEncoding.DecodeString(state[len("lush-x1."):dot])
	otherPrincipal := strings.Replace(string(payload), `"p":"`, `"p":"x`, 1)
	for i, bad := range []struct{ name, key, state string }{
		{"tampered signature", aliceKey, state[:len(state)-2] + "AA"},
		{"tampered payload", aliceKey, "lush-x1." + base64.RawURLEncoding.EncodeToString([]byte(otherPrincipal)) + state[dot:]},
		{"forged", aliceKey, "lush-x1." + base64.RawURLEncoding.EncodeToString(payload) + ".forged"},
		{"another principal's", bobKey, state},
	} {
		out := retry(bad.key, bad.state, 10+i)
		e, _ := out["error"].(map[string]any)
		if e["code"] != float64(-32602) || !strings.Contains(fmt.Sprint(e["message"]), "requestState") {
			t.Errorf("%s requestState: %v, want error -32602 naming requestState", bad.name, out)
		}
	}
	if ran.Load() != 0 {
		t.Fatalf("a refused requestState delivered its answer: the tool completed")
	}
	out := retry(aliceKey, state, 20)
	result, _ = out["result"].(map[string]any)
	content, _ := json.Marshal(result["content"])
	if !strings.Contains(string(content), "sampled: Paris") || ran.Load() != 1 {
		t.Errorf("alice's retry: %v (tool completed %d times)", out, ran.Load())
	}
	if out := retry(aliceKey, state, 21); out["error"] == nil {
		t.Errorf("a requestState used again after the call ended: %v", out)
	}
}
