package extauthz_test

import (
	"encoding/base64"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
)

// mcpPost is a POST of an MCP message to the notes server's route, by alice (API key), as Envoy
// sends it: with the body, or (body "") without it, as on a route that does not buffer bodies.
func mcpPost(headers map[string]string, body string) *authv3.CheckRequest {
	hdr := map[string]string{":method": "POST", ":path": "/agents/assistant/tools/notes/mcp", "authorization": "Bearer " + aliceKey,
		"content-type": "application/json", "accept": "application/json, text/event-stream"}
	for k, v := range headers {
		hdr[k] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/agents/assistant/tools/notes/mcp", Headers: hdr, RawBody: []byte(body)}}}}
}

// modernHeaders are the headers of an MCP 2026-07-28 request of method naming name ("" for none).
func modernHeaders(method, name string) map[string]string {
	h := map[string]string{"mcp-protocol-version": "2026-07-28", "mcp-method": method}
	if name != "" {
		h["mcp-name"] = name
	}
	return h
}

const meta2026 = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}`

// TestMCPHeaders: MCP 2026 requests are decided from their Mcp-Method and Mcp-Name headers when
// the sidecar sends no body and nothing in the decision reads the arguments; headers that
// disagree with the body, or that a 2026 request lacks, are refused with HeaderMismatch
// (-32020); older requests keep being decided from their bodies.
func TestMCPHeaders(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	h := start(t, harnessOpts{logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))})
	lushLog := func() string {
		mu.Lock()
		defer mu.Unlock()
		return logged.String()
	}
	b64 := func(s string) string { return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?=" }
	tests := []struct {
		name    string
		headers map[string]string
		body    string
		allowed bool
		outcome string // of the logged decision; "" when nothing is decided
		tool    string // the decided tool name
		// decisions are the actions logged, when more than the one decision of outcome
		decisions []string
		status    int
		rpc       float64
		msg       string
	}{
		// Headers alone.
		{name: "read call, headers only", headers: modernHeaders("tools/call", "list_notes"), allowed: true, outcome: "allow", tool: "list_notes"},
		{name: "base64 name, headers only", headers: modernHeaders("tools/call", b64("list_notes")), allowed: true, outcome: "allow", tool: "list_notes"},
		{name: "server/discover, headers only", headers: modernHeaders("server/discover", ""), allowed: true, outcome: "allow"},
		{name: "subscriptions/listen, headers only", headers: modernHeaders("subscriptions/listen", ""), allowed: true, outcome: "allow"},
		{name: "completion, headers only: decided as both prompts/get and resources/read", headers: modernHeaders("completion/complete", ""),
			allowed: true, outcome: "allow", decisions: []string{"prompts/get", "resources/read"}},
		{name: "completion, headers only, denied as prompts/get", headers: map[string]string{"mcp-protocol-version": "2026-07-28",
			"mcp-method": "completion/complete", "authorization": "Bearer " + bobKey}, outcome: "deny", status: 403, rpc: -32001, decisions: []string{"prompts/get"}},
		{name: "read call denied, headers only", headers: map[string]string{"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call",
			"mcp-name": "list_notes", "authorization": "Bearer " + bobKey}, outcome: "deny", tool: "list_notes", status: 403, rpc: -32001},
		{name: "a policy reads the arguments", headers: modernHeaders("tools/call", "search"), status: 400, rpc: -32600, msg: "a policy reads the arguments"},
		{name: "a write needs its arguments", headers: modernHeaders("tools/call", "write_note"), status: 400, rpc: -32600, msg: "is a write"},
		{name: "unknown tools are writes", headers: modernHeaders("tools/call", "drop_all"), status: 400, rpc: -32600, msg: "is a write"},
		{name: "2026 without Mcp-Method", headers: map[string]string{"mcp-protocol-version": "2026-07-28", "mcp-name": "list_notes"},
			status: 400, rpc: -32020, msg: "needs the Mcp-Method header"},
		{name: "2026 call without Mcp-Name", headers: modernHeaders("tools/call", ""), status: 400, rpc: -32020, msg: "needs the Mcp-Name header"},
		{name: "a known method in another case, headers only", headers: modernHeaders("TOOLS/LIST", ""), status: 400, rpc: -32020, msg: "case-sensitive"},
		{name: "bad base64 name", headers: modernHeaders("tools/call", "=?base64?***?="), status: 400, rpc: -32020, msg: "not valid base64"},
		{name: "2025-11-25 headers only", headers: map[string]string{"mcp-protocol-version": "2025-11-25", "mcp-method": "tools/call", "mcp-name": "list_notes"},
			status: 400, rpc: -32600, msg: "is decided from its body"},
		{name: "a version that is no date, headers only", headers: map[string]string{"mcp-protocol-version": "9999", "mcp-method": "tools/list"},
			status: 400, rpc: -32600, msg: "is decided from its body"},
		{name: "no version, headers only", headers: map[string]string{"mcp-method": "tools/list"}, status: 400, rpc: -32600, msg: "no MCP-Protocol-Version header"},

		// Headers and body.
		{name: "2026 body and headers agree", headers: modernHeaders("tools/call", "search"),
			body:    `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"q"},` + meta2026 + `}}`,
			allowed: true, outcome: "allow", tool: "search"},
		{name: "2026 base64 name agrees", headers: modernHeaders("tools/call", b64("search")),
			body:    `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search",` + meta2026 + `}}`,
			allowed: true, outcome: "allow", tool: "search"},
		{name: "method disagrees", headers: modernHeaders("tools/list", ""),
			body:   `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search",` + meta2026 + `}}`,
			status: 400, rpc: -32020, msg: `Mcp-Method header says "tools/list" but the message's method is "tools/call"`},
		{name: "name disagrees", headers: modernHeaders("tools/call", "list_notes"),
			body:   `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"write_note",` + meta2026 + `}}`,
			status: 400, rpc: -32020, msg: `Mcp-Name header says "list_notes" but the message's params.name is "write_note"`},
		{name: "2026 body without headers", body: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"search",` + meta2026 + `}}`,
			status: 400, rpc: -32020, msg: "needs the Mcp-Method header"},
		{name: "2026 body without Mcp-Name", headers: map[string]string{"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call"},
			body:   `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"search",` + meta2026 + `}}`,
			status: 400, rpc: -32020, msg: "needs the Mcp-Name header"},
		{name: "version header disagrees with _meta", headers: map[string]string{"mcp-protocol-version": "2025-11-25", "mcp-method": "tools/call", "mcp-name": "search"},
			body:   `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"search",` + meta2026 + `}}`,
			status: 400, rpc: -32020, msg: "MCP-Protocol-Version header says"},
		{name: "old client, no headers", headers: map[string]string{"mcp-protocol-version": "2025-06-18"},
			body:    `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search","arguments":{"query":"q"}}}`,
			allowed: true, outcome: "allow", tool: "search"},
		{name: "2026 unknown method: 404", headers: modernHeaders("tools/frobnicate", ""),
			body:   `{"jsonrpc":"2.0","id":9,"method":"tools/frobnicate","params":{` + meta2026 + `}}`,
			status: 404, rpc: -32601, msg: "cannot be authorized through the mesh"},
		{name: "2026 unknown method from headers: 404", headers: modernHeaders("tools/frobnicate", ""),
			status: 404, rpc: -32601, msg: "cannot be authorized through the mesh"},
		{name: "old unknown method: 400", body: `{"jsonrpc":"2.0","id":10,"method":"tools/frobnicate"}`,
			status: 400, rpc: -32601, msg: "cannot be authorized through the mesh"},
		{name: "old client's policy still reads the arguments", headers: map[string]string{"mcp-protocol-version": "2025-06-18"},
			body:    `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"search","arguments":{"boom":"not a number"}}}`,
			outcome: "error", tool: "search", status: 503, rpc: -32603},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(h.events())
			warningsBefore := strings.Count(lushLog(), "ext_authz: refused a request whose MCP headers")
			a := read(t, h.check(mcpPost(tc.headers, tc.body)))
			if a.allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (status %d, body %v)", a.allowed, tc.allowed, a.status, a.body)
			}
			if !tc.allowed {
				rpc, msg, _ := a.rpcError()
				if a.status != tc.status || rpc != tc.rpc || !strings.Contains(msg, tc.msg) {
					t.Errorf("answer %d, JSON-RPC %v %q; want %d, %v, containing %q", a.status, rpc, msg, tc.status, tc.rpc, tc.msg)
				}
				if tc.status == 400 && a.grpc != code.Code_INVALID_ARGUMENT {
					t.Errorf("gRPC status %v, want INVALID_ARGUMENT", a.grpc)
				}
				// A header mismatch is a warning in Lush's log, with the reason.
				warnings := strings.Count(lushLog(), "ext_authz: refused a request whose MCP headers")
				if warned := warnings > warningsBefore && strings.Contains(lushLog(), strconv.Quote(msg)); warned != (rpc == -32020) || warnings > warningsBefore+1 {
					t.Errorf("warned in Lush's log: %v, want %v (log:\n%s)", warned, rpc == -32020, lushLog())
				}
			}
			evs := h.events()[before:]
			if tc.outcome == "" {
				if len(evs) != 0 {
					t.Fatalf("%d decisions logged for a refused request", len(evs))
				}
				return
			}
			if tc.decisions != nil {
				var actions []string
				for _, e := range evs {
					actions = append(actions, e.Event.Action)
				}
				if !slices.Equal(actions, tc.decisions) {
					t.Fatalf("decisions logged: %v, want %v", actions, tc.decisions)
				}
				evs = evs[len(evs)-1:]
			}
			if len(evs) != 1 {
				t.Fatalf("%d decisions logged, want 1", len(evs))
			}
			ev := evs[0].Event
			if ev.Outcome != tc.outcome || ev.ToolName != tc.tool {
				t.Errorf("logged %s of tool %q, want %s of %q", ev.Outcome, ev.ToolName, tc.outcome, tc.tool)
			}
		})
	}
}

// lockedWriter serializes writes to w, for a log read while the server writes it.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
