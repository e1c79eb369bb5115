package agentd

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/internal/identity"
)

// The rules of the providers (openai.toolNames, anthropic.toolNames, model.defaultNames).
var (
	openaiNames    = model.NameRule{Max: 64, Punct: "_-"}
	anthropicNames = model.NameRule{Max: 128, Punct: "_-"}
	geminiNames    = model.NameRule{Max: 64, Punct: "_.-", LetterFirst: true}
)

// Tool names the gateway lists are offered to models under names their provider accepts: valid
// names kept, refused characters made '_', long names cut with a hash of the real name, clashes
// resolved with a hash (the name the gateway uses as it is keeps it), the same names whatever
// the listing order.
func TestOfferNames(t *testing.T) {
	long := strings.Repeat("x", 80)
	tests := []struct {
		name  string
		rule  model.NameRule
		names []string
		want  []string
	}{
		{"valid names are kept", openaiNames, []string{"read_file", "write-note", "9lives"}, []string{"read_file", "write-note", "9lives"}},
		{"dots on openai", openaiNames, []string{"notes.search", "notes.get"}, []string{"notes_search", "notes_get"}},
		{"dots on gemini are kept", geminiNames, []string{"notes.search"}, []string{"notes.search"}},
		{"a digit first on gemini", geminiNames, []string{"9lives"}, []string{"t_9lives"}},
		{"spaces, slashes and non-ASCII", anthropicNames, []string{"fs/read file", "café"}, []string{"fs_read_file", "caf_"}},
		{"too long", openaiNames, []string{long}, []string{long[:55] + "_" + hash8(long)}},
		{"long is fine on anthropic", anthropicNames, []string{long}, []string{long}},
		{"two too long", openaiNames, []string{long, long + "y"}, []string{long[:55] + "_" + hash8(long), long[:55] + "_" + hash8(long+"y")}},
		{"a clash: the valid name keeps it", openaiNames, []string{"notes.search", "notes_search"}, []string{"notes_search_" + hash8("notes.search"), "notes_search"}},
		{"a clash of two mapped names", openaiNames, []string{"a.b", "a/b"}, []string{"a_b_" + hash8("a.b"), "a_b_" + hash8("a/b")}},
		{"a hashed name that is taken", openaiNames, []string{"a.b", "a_b", "a_b_" + hash8("a.b")}, []string{"a_b_" + hash16("a.b"), "a_b", "a_b_" + hash8("a.b")}},
		{"listed twice", openaiNames, []string{"echo", "echo"}, []string{"echo", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := offerNames(tt.rule, tt.names)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("offerNames(%q) = %q, want %q", tt.names, got, tt.want)
			}
			seen := map[string]bool{}
			for _, n := range got {
				if n == "" {
					continue
				}
				if !tt.rule.Valid(n) || seen[n] {
					t.Errorf("offered name %q is invalid or not unique", n)
				}
				seen[n] = true
			}
			// The same tools in another order get the same names.
			rev := slices.Clone(tt.names)
			slices.Reverse(rev)
			back := offerNames(tt.rule, rev)
			slices.Reverse(back)
			if tt.name != "listed twice" && !slices.Equal(back, got) {
				t.Errorf("in reverse order: %q, want %q", back, got)
			}
		})
	}
}

func hash8(s string) string  { return nameHash(s, 8) }
func hash16(s string) string { return nameHash(s, 16) }

// A call of an offered name reaches the gateway as the gateway's name; a name that was not
// offered (the gateway's own, here) is an unknown_tool result the model reads, and reaches
// nothing.
func TestToolboxCallsTheRealName(t *testing.T) {
	var got []string
	srv := server.NewMCPServer("gateway", "1", server.WithToolCapabilities(false))
	for _, name := range []string{"notes.search", "notes_search"} {
		srv.AddTool(mcp.NewTool(name), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			got = append(got, req.Params.Name)
			return mcp.NewToolResultText("found by " + req.Params.Name), nil
		})
	}
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	tr, err := transport.NewStreamableHTTP(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	cl := newGatewayClient(tr)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info := mcp.Implementation{Name: "lush-agentd/a", Version: "test"}
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ClientInfo: info, Capabilities: agentCapabilities()}}); err != nil {
		t.Fatal(err)
	}
	list, err := cl.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b := &toolbox{s: &Server{tracer: noop.NewTracerProvider().Tracer("")}, agent: "a", cl: cl, info: info}
	b.offer(openaiNames, list.Tools)
	var offered []string
	for _, tool := range b.tools {
		offered = append(offered, tool.Name)
	}
	mapped := "notes_search_" + hash8("notes.search")
	if want := []string{mapped, "notes_search"}; !slices.Equal(slices.Sorted(slices.Values(offered)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("offered %q, want %q", offered, want)
	}

	tests := []struct {
		call       string
		wantStatus string
		wantMCP    string // the name that reached the gateway, "" for none
	}{
		{mapped, "ok", "notes.search"},
		{"notes_search", "ok", "notes_search"},
		{"notes.search", "unknown_tool", ""},
	}
	for _, tt := range tests {
		got = nil
		tc, out := b.call(ctx, &model.ToolCall{ID: "c1", Name: tt.call, Args: map[string]any{}})
		if tc.Status != tt.wantStatus || out.Name != tt.call || out.ID != "c1" {
			t.Errorf("%s: status %q, result %+v", tt.call, tc.Status, out)
		}
		switch {
		case tt.wantMCP == "" && len(got) != 0:
			t.Errorf("%s reached the gateway as %q", tt.call, got)
		case tt.wantMCP != "" && !slices.Equal(got, []string{tt.wantMCP}):
			t.Errorf("%s reached the gateway as %q, want %q", tt.call, got, tt.wantMCP)
		}
		if tt.wantMCP != "" && tt.wantMCP != tt.call && tc.MCPName != tt.wantMCP {
			t.Errorf("%s: the record's mcp_name is %q", tt.call, tc.MCPName)
		}
		if tt.wantStatus == "unknown_tool" {
			e, _ := out.Output["error"].(map[string]any)
			if !out.IsError || e["code"] != "unknown_tool" || !strings.Contains(e["message"].(string), mapped) {
				t.Errorf("%s: %+v, want an unknown_tool error listing the offered names", tt.call, out.Output)
			}
		}
	}
}

// A delegation token is reused while it has more than a minute left, and signed anew after.
func TestTokenRenewal(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	d := identity.Delegation{Principal: "user:alice", Agent: "a", Chain: []string{"a"}}
	long := &tokenSource{signer: identity.NewSigner(key, ""), d: d}
	long.d.TTL = 5 * time.Minute
	t1, err1 := long.token()
	t2, err2 := long.token()
	if err1 != nil || err2 != nil || t1 != t2 {
		t.Errorf("a fresh token was not reused: %v %v", err1, err2)
	}
	short := &tokenSource{signer: identity.NewSigner(key, ""), d: d}
	short.d.TTL = 30 * time.Second // always within a minute of expiring
	t1, _ = short.token()
	t2, _ = short.token()
	if t1 == "" || t1 == t2 {
		t.Error("a token about to expire was reused")
	}
}

// An agent has no person at hand: a tool's elicitation is declined, at 2026-07-28 (an
// input_required result, answered and sent again) and before (an elicitation/create request
// during the call), and a request for sampling ends the call with an error.
func TestCallToolAnswersForAnAgent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions []string // the gateway's; all when empty
		protocol string
	}{
		{"2026-07-28", nil, mcp.ProtocolVersion20260728},
		{"2025-11-25", []string{mcp.ProtocolVersion20251125}, mcp.ProtocolVersion20251125},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := server.NewMCPServer("gateway", "1", server.WithToolCapabilities(false))
			srv.AddTool(mcp.NewTool("confirm"), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if res := server.ElicitationResponse(req.Params.InputResponses, "ok"); res != nil {
					return mcp.NewToolResultText("answer: " + string(res.Action)), nil
				}
				return server.NewInputRequestBuilder("s").Elicit("ok", mcp.ElicitationParams{Message: "Proceed?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}}}).ToolResult(), nil
			})
			srv.AddTool(mcp.NewTool("summarize"), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if server.SamplingResponse(req.Params.InputResponses, "sum") != nil {
					return mcp.NewToolResultText("sampled"), nil
				}
				return server.NewInputRequestBuilder("s").Sample("sum", mcp.CreateMessageParams{MaxTokens: 5,
					Messages: []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent("hi")}}}).ToolResult(), nil
			})
			hs := httptest.NewServer(server.NewStreamableHTTPServer(srv, server.WithStreamableHTTPProtocolVersions(tc.versions...)))
			t.Cleanup(func() {
				hs.CloseClientConnections()
				hs.Close()
			})
			tr, err := transport.NewStreamableHTTP(hs.URL)
			if err != nil {
				t.Fatal(err)
			}
			cl := newGatewayClient(tr)
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			info := mcp.Implementation{Name: "lush-agentd/a", Version: "test"}
			if err := cl.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := cl.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ClientInfo: info, Capabilities: agentCapabilities()}}); err != nil {
				t.Fatal(err)
			}
			if cl.ProtocolVersion() != tc.protocol {
				t.Fatalf("protocol %q, want %q", cl.ProtocolVersion(), tc.protocol)
			}
			var ids atomic.Int64
			resp, err := callTool(ctx, cl, info, &ids, "confirm", map[string]any{})
			if err != nil || resp.Error != nil || !strings.Contains(string(resp.Result), "answer: decline") {
				t.Errorf("confirm: %v %+v", err, resp)
			}
			if tc.protocol != mcp.ProtocolVersion20260728 {
				return // mcp-go's server sends a sampling request before 2026-07-28 on the GET stream, which agentd does not open
			}
			resp, err = callTool(ctx, cl, info, &ids, "summarize", map[string]any{})
			if err == nil || !strings.Contains(err.Error(), "asked for sampling/createMessage, which an agent does not answer") {
				t.Errorf("a sampling request: %v %+v", err, resp)
			}
		})
	}
}
