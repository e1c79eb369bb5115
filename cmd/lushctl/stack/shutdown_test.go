package stack_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lush-agents/lush/internal/mcphttp"
)

// openStream opens an MCP stream of the stack as alice: the standalone GET stream of a
// streamable HTTP session at an /mcp path, or a legacy SSE stream at an /sse path. It returns
// the stream's body once the server has started it.
func (h *harness) openStream(path string) io.ReadCloser {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.st.URL()+path, nil)
	req.Header.Set("X-API-Key", aliceKey)
	req.Header.Set("Accept", "text/event-stream")
	if strings.HasSuffix(path, "/mcp") {
		init, _ := http.NewRequest(http.MethodPost, h.st.URL()+path,
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`))
		init.Header.Set("X-API-Key", aliceKey)
		init.Header.Set("Content-Type", "application/json")
		init.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(init)
		if err != nil {
			h.t.Fatal(err)
		}
		resp.Body.Close()
		req.Header.Set(mcphttp.HeaderSession, resp.Header.Get(mcphttp.HeaderSession))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		h.t.Fatalf("GET %s: %s", path, resp.Status)
	}
	return resp.Body
}

// A client holding a stream open does not hold up a graceful stop: the gateway's and agentd's
// streams end when the stack shuts down, and Shutdown reports a clean stop (it once waited for
// its whole deadline and reported it exceeded).
func TestShutdownEndsStreams(t *testing.T) {
	h := start(t, harnessOpts{})
	var streams []io.ReadCloser
	for _, path := range []string{"/gateway/agents/researcher/mcp", "/gateway/agents/researcher/sse", "/agents/researcher/mcp"} {
		streams = append(streams, h.openStream(path))
	}
	if err := h.stop(); err != nil {
		t.Fatalf("Shutdown with streams open = %v, want a clean stop", err)
	}
	for _, s := range streams {
		if _, err := io.ReadAll(s); err != nil {
			t.Errorf("a stream did not end cleanly: %v", err)
		}
		s.Close()
	}
}
