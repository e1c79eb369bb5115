package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/upstream"
)

// requireSampling answers a tools/call of the tool "ask" with MissingRequiredClientCapability
// (-32021, HTTP 400) when its _meta does not declare sampling, as a 2026-07-28 server does.
func requireSampling(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get(mcp.HeaderName) != "ask" {
			next.ServeHTTP(w, r)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Params struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			} `json:"params"`
		}
		body := http.MaxBytesReader(w, r.Body, 1<<20)
		if err := json.NewDecoder(body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var caps mcp.ClientCapabilities
		json.Unmarshal(req.Params.Meta[mcp.MetaKeyClientCapabilities], &caps)
		if caps.Sampling != nil {
			http.Error(w, "the test server serves only the refusal", http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{
			"code": mcp.MISSING_REQUIRED_CLIENT_CAPABILITY, "message": "Missing required client capabilities: sampling",
			"data": map[string]any{"requiredCapabilities": map[string]any{"sampling": map[string]any{}}}}})
	})
}

// A request to a 2026-07-28 server declares the capabilities of the client it is made for, as
// far as Lush forwards them (sampling, elicitation by mode, roots), with the extensions Lush
// declares; Lush's own requests declare everything Lush forwards.
func TestRequestsDeclareTheClientsCapabilities(t *testing.T) {
	tool, _ := askHTTP(t)
	s := startServer(t, tool, upstream.Options{})
	tasks := map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}
	for _, tc := range []struct {
		name string
		ctx  func(context.Context) context.Context
		want string // the capabilities the server sees
	}{
		{"Lush's own request", func(ctx context.Context) context.Context { return ctx },
			`{"roots":{"listChanged":true},"sampling":{},"elicitation":{"form":{},"url":{}}}`},
		{"a client that declares nothing", func(ctx context.Context) context.Context {
			return upstream.WithClientCapabilities(ctx, json.RawMessage(`{}`))
		}, `{}`},
		{"a client whose capabilities are unknown", func(ctx context.Context) context.Context {
			return upstream.WithClientCapabilities(ctx, nil)
		}, `{}`},
		{"malformed capabilities", func(ctx context.Context) context.Context {
			return upstream.WithClientCapabilities(ctx, json.RawMessage(`["sampling"]`))
		}, `{}`},
		{"sampling, and what Lush does not forward", func(ctx context.Context) context.Context {
			return upstream.WithClientCapabilities(ctx, json.RawMessage(`{"sampling":{"tools":{}},"experimental":{"x":{}},"extensions":{"io.example/x":{}},"tasks":{}}`))
		}, `{"sampling":{}}`},
		{"elicitation without modes is form mode", func(ctx context.Context) context.Context {
			return upstream.WithClientCapabilities(ctx, json.RawMessage(`{"elicitation":{},"roots":{}}`))
		}, `{"roots":{},"elicitation":{"form":{}}}`},
		{"elicitation in URL mode, roots that change", func(ctx context.Context) context.Context {
			return upstream.WithClientCapabilities(ctx, json.RawMessage(`{"elicitation":{"url":{}},"roots":{"listChanged":true},"sampling":null}`))
		}, `{"roots":{"listChanged":true},"elicitation":{"url":{}}}`},
		{"a mode Lush does not know only", func(ctx context.Context) context.Context {
			return upstream.WithClientCapabilities(ctx, json.RawMessage(`{"elicitation":{"telepathy":{}}}`))
		}, `{}`},
		{"an extension Lush declares, then the client's capabilities", func(ctx context.Context) context.Context {
			return upstream.WithClientCapabilities(upstream.WithClientExtensions(ctx, tasks), json.RawMessage(`{"sampling":{}}`))
		}, `{"extensions":{"io.modelcontextprotocol/tasks":{}},"sampling":{}}`},
		{"the client's capabilities, then extensions", func(ctx context.Context) context.Context {
			ctx = upstream.WithClientCapabilities(ctx, json.RawMessage(`{"roots":{}}`))
			ctx = upstream.WithClientExtensions(ctx, tasks)
			return upstream.WithClientExtensions(ctx, map[string]any{"io.example/more": map[string]any{}})
		}, `{"extensions":{"io.example/more":{},"io.modelcontextprotocol/tasks":{}},"roots":{}}`},
		{"an extension on Lush's own request", func(ctx context.Context) context.Context {
			return upstream.WithClientExtensions(ctx, tasks)
		}, `{"extensions":{"io.modelcontextprotocol/tasks":{}},"roots":{"listChanged":true},"sampling":{},"elicitation":{"form":{},"url":{}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got, err := callText(tc.ctx(ctx), s, "client", map[string]any{})
			if err != nil {
				t.Fatal(err)
			}
			var seen struct{ Capabilities json.RawMessage }
			if err := json.Unmarshal([]byte(got), &seen); err != nil {
				t.Fatalf("client: %s", got)
			}
			if string(seen.Capabilities) != tc.want {
				t.Errorf("the server sees the capabilities %s, want %s", seen.Capabilities, tc.want)
			}
		})
	}
}

// A 2026-07-28 server's MissingRequiredClientCapability error (HTTP 400) reaches the caller as
// that JSON-RPC error, its data included.
func TestMissingClientCapability(t *testing.T) {
	srv := httptest.NewServer(requireSampling(server.NewStreamableHTTPServer(askServer())))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	s := startServer(t, &manifest.Tool{Ref: "mcp://ask.internal/mcp", Kind: "mcp", Remote: &manifest.Remote{URL: srv.URL + "/mcp"}}, upstream.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := callText(upstream.WithClientCapabilities(ctx, json.RawMessage(`{"elicitation":{}}`)), s, "ask", map[string]any{"kind": "sampling", "tag": "x"})
	var rpc *upstream.RPCError
	if !errors.As(err, &rpc) || rpc.Code != mcp.MISSING_REQUIRED_CLIENT_CAPABILITY || string(rpc.Data) != `{"requiredCapabilities":{"sampling":{}}}` {
		t.Fatalf("call without sampling: %v (%#v)", err, rpc)
	}
	if !s.State().Up {
		t.Errorf("the server is down after an error answer: %+v", s.State())
	}
}
