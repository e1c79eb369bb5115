package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/mcphttp"
)

// capsServer is a 2026-07-28 MCP server with two tools: caps returns the client capabilities
// its request declared, and sample asks for sampling (input_required), refusing a request that
// did not declare sampling with MissingRequiredClientCapability (-32021, HTTP 400), as the
// specification asks of a server.
func capsServer(t *testing.T) string {
	t.Helper()
	s := server.NewMCPServer("caps", "1", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("caps", mcp.WithDescription("Says what the client declared.")), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		b, _ := json.Marshal(server.RequestProtocolInfoFromContext(ctx).ClientCapabilities)
		return mcp.NewToolResultText(string(b)), nil
	})
	s.AddTool(mcp.NewTool("sample", mcp.WithDescription("Needs sampling.")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if res := server.SamplingResponse(req.Params.InputResponses, "s"); res != nil {
			return mcp.NewToolResultText("sampled"), nil
		}
		return server.NewInputRequestBuilder("state").Sample("s", mcp.CreateMessageParams{MaxTokens: 5,
			Messages: []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent("hi")}}}).ToolResult(), nil
	})
	next := server.NewStreamableHTTPServer(s)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get(mcp.HeaderName) != "sample" {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Params struct {
				Meta struct {
					Caps mcp.ClientCapabilities `json:"io.modelcontextprotocol/clientCapabilities"`
				} `json:"_meta"`
			} `json:"params"`
		}
		json.Unmarshal(body, &req)
		if req.Params.Meta.Caps.Sampling != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{
			"code": mcphttp.CodeMissingClientCapability, "message": "Missing required client capabilities: sampling",
			"data": map[string]any{"requiredCapabilities": map[string]any{"sampling": map[string]any{}}}}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// The upstream of a call learns the capabilities of the call's client, as far as the gateway
// forwards them, and its MissingRequiredClientCapability refusal reaches the client: as that
// error (HTTP 400) for a 2026-07-28 client, as a JSON-RPC error naming the capability for an
// older one.
func TestUpstreamSeesTheClientsCapabilities(t *testing.T) {
	h := &harness{t: t}
	h.dir = askingProject(t, capsServer(t), nil)
	lush := filepath.Join(h.dir, "lush.yaml")
	b, _ := os.ReadFile(lush)
	writeFile(t, lush, strings.Replace(string(b), "    sample: read\n", "    sample: read\n    caps: read\n", 1), 0o644)
	h.serve(gateway.Config{})

	// A 2026-07-28 client: each request declares its capabilities.
	post := func(tool, caps string) (*http.Response, map[string]any) {
		meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":` + caps + `}`
		return h.post("assistant", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+tool+`","arguments":{},`+meta+`}}`,
			map[string]string{"X-API-Key": aliceKey, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool})
	}
	for _, tc := range []struct {
		name, declared, upstreamSees string
		status                       int
		want                         string // in the answer
	}{
		{"declares sampling", `{"sampling":{"tools":{}},"experimental":{"x":{}}}`, `{"sampling":{}}`, http.StatusOK, `"resultType":"input_required"`},
		{"declares elicitation only", `{"elicitation":{}}`, `{"elicitation":{"form":{}}}`, http.StatusBadRequest, `"requiredCapabilities":{"sampling":{}}`},
		{"declares nothing", `{}`, `{}`, http.StatusBadRequest, `"code":-32021`},
	} {
		t.Run("2026-07-28 client "+tc.name, func(t *testing.T) {
			_, out := post("caps", tc.declared)
			res, _ := out["result"].(map[string]any)
			content, _ := res["content"].([]any)
			if len(content) != 1 || content[0].(map[string]any)["text"] != tc.upstreamSees {
				t.Errorf("the upstream saw %v, want %s", out, tc.upstreamSees)
			}
			resp, out := post("sample", tc.declared)
			raw, _ := json.Marshal(out)
			if resp.StatusCode != tc.status || !strings.Contains(string(raw), tc.want) || out["id"] != float64(7) {
				t.Errorf("sample: %s %s, want %d with %s", resp.Status, raw, tc.status, tc.want)
			}
		})
	}

	// A 2025-11-25 client: the capabilities of its session. (mcp-go's client turns -32021 into
	// an error of its own, so the answer is read as it is sent.)
	for _, tc := range []struct {
		name         string
		opts         []client.ClientOption
		upstreamSees string
		sample       string // in the answer
	}{
		{"with sampling", []client.ClientOption{client.WithSamplingHandler(&answering{})}, `{"sampling":{}}`, `"text":"sampled"`},
		{"without", nil, `{}`, `"error":{"code":-32021,"message":"Missing required client capabilities: sampling","data":{"requiredCapabilities":{"sampling":{}}}}`},
	} {
		t.Run("2025-11-25 client "+tc.name, func(t *testing.T) {
			c := h.clientWith(false, tc.opts...)
			if got := text(callTool(t, c, "caps", nil)); got != tc.upstreamSees {
				t.Errorf("the upstream saw %s, want %s", got, tc.upstreamSees)
			}
			resp, err := c.GetTransport().SendRequest(context.Background(), transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION,
				ID: mcp.NewRequestId(int64(1)), Method: "tools/call", Params: map[string]any{"name": "sample", "arguments": map[string]any{}}})
			raw, _ := json.Marshal(resp)
			if err != nil || !strings.Contains(string(raw), tc.sample) {
				t.Errorf("sample: %s %v, want %s", raw, err, tc.sample)
			}
		})
	}
}
