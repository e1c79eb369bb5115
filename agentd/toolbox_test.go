package agentd

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/lush-agents/lush/internal/identity"
)

// Tool names the gateway lists are offered to models under names they accept, unique, and
// mapped back to the gateway's names.
func TestToolNames(t *testing.T) {
	b := &toolbox{byName: map[string]string{}}
	long := strings.Repeat("x", 80)
	for _, name := range []string{"read_file", "fs/read file", "fs_read_file", "9lives", long, long + "y", "ok.name-1"} {
		b.add(mcp.Tool{Name: name})
	}
	want := map[string]string{
		"read_file": "read_file", "fs_read_file": "fs/read file", "fs_read_file_2": "fs_read_file",
		"t_9lives": "9lives", long[:64]: long, long[:62] + "_2": long + "y", "ok.name-1": "ok.name-1",
	}
	if len(b.byName) != len(want) {
		t.Fatalf("names %v", b.byName)
	}
	for offered, real := range want {
		if b.byName[offered] != real {
			t.Errorf("%q -> %q, want %q (all: %v)", offered, b.byName[offered], real, b.byName)
		}
	}
	for _, tool := range b.tools {
		if len(tool.Name) > 64 || invalidName.MatchString(tool.Name) {
			t.Errorf("offered name %q is not valid", tool.Name)
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
