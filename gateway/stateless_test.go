package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/test/mcpserver"
)

// statelessMeta is the _meta of a 2026-07-28 request.
const statelessMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`

// A 2026-07-28 client needs no initialize and no session: server/discover answers what the
// endpoint speaks (initialize's capabilities and server, with the versions), tools are listed
// and called by requests that carry their own version and client, and a tool whose input schema
// mirrors an argument in an Mcp-Param-* header is called only when the header agrees with the
// argument.
func TestStatelessClient(t *testing.T) {
	url, _ := mcpserver.StartRecordedHTTP(t.Cleanup)
	h := &harness{t: t, url: url}
	h.dir = project(t, url, "  - tool: tools/region\n    grants:\n      - {principal: group:eng, access: read}\n")
	writeFile(t, filepath.Join(h.dir, "tools/region/tool.yaml"), `description: Says the region.
command: ./run
access: read
input_schema:
  type: object
  properties:
    region: {type: string, x-mcp-header: Region}
`, 0o644)
	writeFile(t, filepath.Join(h.dir, "tools/region/run"), "#!/bin/sh\necho region tool ran\n", 0o755)
	spec := filepath.Join(h.dir, "agents/assistant/spec.yaml")
	b, _ := os.ReadFile(spec)
	writeFile(t, spec, strings.Replace(string(b), "  - name: tools/hello\n", "  - name: tools/hello\n    access: read\n  - name: tools/region\n", 1), 0o644)
	h.serve(gateway.Config{})

	headers := func(method, name string, extra ...string) map[string]string {
		hdr := map[string]string{"X-API-Key": aliceKey, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
		if name != "" {
			hdr["Mcp-Name"] = name
		}
		for i := 0; i+1 < len(extra); i += 2 {
			hdr[extra[i]] = extra[i+1]
		}
		return hdr
	}
	resp, out := h.post("assistant", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{`+statelessMeta+`}}`, headers("server/discover", ""))
	result, _ := out["result"].(map[string]any)
	raw, _ := json.Marshal(out)
	versions, _ := json.Marshal(result["supportedVersions"])
	info, _ := result["_meta"].(map[string]any)[mcphttp.MetaServerInfo].(map[string]any)
	if resp.StatusCode != http.StatusOK || string(versions) != `["2026-07-28","2025-11-25","2025-06-18","2025-03-26"]` ||
		result["resultType"] != "complete" || result["capabilities"] == nil || info["name"] != "lush/assistant" ||
		result["cacheScope"] != "public" || result["ttlMs"] == nil || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("server/discover: %s %s", resp.Status, raw)
	}
	if caps, _ := json.Marshal(result["capabilities"]); strings.Contains(string(caps), "subscribe") {
		t.Errorf("discover offers resource subscriptions, which stateless clients cannot get: %s", caps)
	}

	resp, out = h.post("assistant", `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{`+statelessMeta+`}}`, headers("tools/list", ""))
	raw, _ = json.Marshal(out)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"name":"tests__echo"`) || !strings.Contains(string(raw), `"x-mcp-header":"Region"`) {
		t.Fatalf("tools/list: %s %s", resp.Status, raw)
	}
	resp, out = h.post("assistant", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"tests__echo","arguments":{"text":"hi"},`+statelessMeta+`}}`, headers("tools/call", "tests__echo"))
	raw, _ = json.Marshal(out)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), "hi") || out["error"] != nil {
		t.Fatalf("tools/call: %s %s", resp.Status, raw)
	}

	call := `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"region","arguments":{"region":"eu"},` + statelessMeta + `}}`
	for _, tt := range []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"the header agrees", headers("tools/call", "region", "Mcp-Param-Region", "eu"), http.StatusOK},
		{"the header in Base64", headers("tools/call", "region", "Mcp-Param-Region", "=?base64?ZXU=?="), http.StatusOK},
		{"no header", headers("tools/call", "region"), http.StatusBadRequest},
		{"another value", headers("tools/call", "region", "Mcp-Param-Region", "us"), http.StatusBadRequest},
		{"Mcp-Name disagrees", headers("tools/call", "hello", "Mcp-Param-Region", "eu"), http.StatusBadRequest},
	} {
		resp, out := h.post("assistant", call, tt.hdr)
		raw, _ := json.Marshal(out)
		ran := strings.Contains(string(raw), "region tool ran")
		if resp.StatusCode != tt.status || ran != (tt.status == http.StatusOK) {
			t.Errorf("%s: %s %s", tt.name, resp.Status, raw)
		}
		if tt.status == http.StatusBadRequest && !strings.Contains(string(raw), "-32020") {
			t.Errorf("%s: not a HeaderMismatch error: %s", tt.name, raw)
		}
	}

	// The principal is the request's own: another caller's request is decided as theirs.
	resp, out = h.post("assistant", `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{`+statelessMeta+`}}`, map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a stateless request without credentials: %s %v", resp.Status, out)
	}
}

// sessions.stream_after and poll_after reach the transport: a long call of a 2025-11-25 session
// is answered on a primed, resumable stream, and its result reaches the client, on the stream or
// (when the gateway ended the stream first) on the GET that resumes it.
func TestResumableCallStream(t *testing.T) {
	url, _ := mcpserver.StartRecordedHTTP(t.Cleanup)
	h := &harness{t: t, url: url}
	h.dir = project(t, url, "")
	h.serve(gateway.Config{Sessions: gateway.SessionsConfig{StreamAfter: time.Millisecond, PollAfter: time.Millisecond}})
	resp, _ := h.post("assistant", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, map[string]string{"X-API-Key": aliceKey})
	sid := resp.Header.Get("Mcp-Session-Id")
	hdr := map[string]string{"X-API-Key": aliceKey, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
	stream := h.send("assistant", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tests__sleep","arguments":{"ms":300}}}`), hdr)
	if ct := stream.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("a long call is answered %s %q", stream.Status, ct)
	}
	events := sseLines(stream.Body)
	if len(events) == 0 || events[0].data != "" || events[0].id == "" || events[0].retry == "" {
		t.Fatalf("the stream does not start with a priming event: %+v", events)
	}
	last := events[len(events)-1]
	if !strings.Contains(last.data, `"id":2`) {
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/agents/assistant/mcp", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", last.id)
		resumed, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		more := sseLines(resumed.Body)
		if len(more) == 0 {
			t.Fatalf("the resumption of %s carried nothing: %s", last.id, resumed.Status)
		}
		last = more[len(more)-1]
	}
	if !strings.Contains(last.data, `"id":2`) || !strings.Contains(last.data, `"result"`) {
		t.Errorf("the call's result did not reach the client: %+v", last)
	}
}

type sseLine struct{ id, retry, data string }

// sseLines reads a stream's events until it ends.
func sseLines(body io.ReadCloser) []sseLine {
	defer body.Close()
	var out []sseLine
	var e sseLine
	seen := false
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && seen:
			out, e, seen = append(out, e), sseLine{}, false
		case strings.HasPrefix(line, "id: "):
			e.id, seen = strings.TrimPrefix(line, "id: "), true
		case strings.HasPrefix(line, "retry: "):
			e.retry, seen = strings.TrimPrefix(line, "retry: "), true
		case strings.HasPrefix(line, "data: "):
			e.data, seen = strings.TrimPrefix(line, "data: "), true
		}
	}
	return out
}

// mcp-go's client at 2026-07-28 talks to the gateway statelessly: it discovers the endpoint
// (no session), lists tools and calls one, and a tool's error
// comes back as a result.
func TestMCPGoStatelessClient(t *testing.T) {
	h := start(t, gateway.Config{})
	c, err := client.NewStreamableHttpClient(h.srv.URL+"/agents/assistant/mcp", transport.WithHTTPHeaders(map[string]string{"X-API-Key": aliceKey}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: mcp.LATEST_PROTOCOL_VERSION,
		ClientInfo: mcp.Implementation{Name: "gateway-test", Version: "1"}}})
	if err != nil || res.ProtocolVersion != "2026-07-28" || res.Capabilities.Tools == nil {
		t.Fatalf("discover: %+v %v", res, err)
	}
	if names := toolNames(t, c); !slices.Contains(names, "tests__echo") {
		t.Fatalf("tools %v", names)
	}
	if got := text(callTool(t, c, "tests__echo", map[string]any{"text": "stateless"})); !strings.Contains(got, "stateless") {
		t.Errorf("echo: %q", got)
	}
	if res := callTool(t, c, "tests__fail", map[string]any{}); !res.IsError {
		t.Errorf("a failing tool: %+v", res)
	}
}
