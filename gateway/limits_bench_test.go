package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// nestedArguments are tools/call arguments {"items": [...]} whose list holds n arrays, each
// nested depth levels deep ([[[…]]]): the outside tester's 3.8 MiB body is nestedArguments(500,
// 4000).
func nestedArguments(n, depth int) string {
	one := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	return `{"items":[` + strings.Repeat(one+",", n-1) + one + `]}`
}

// flatArguments are tools/call arguments {"items": "aaa…"} of size bytes: one string.
func flatArguments(size int) string {
	const frame = `{"items":""}`
	return `{"items":"` + strings.Repeat("a", size-len(frame)) + `"}`
}

// toolsCall is the JSON-RPC body of a tools/call of tool with the arguments args (JSON).
func toolsCall(tool, args string) string {
	return `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`
}

// session initializes an MCP session at the assistant's endpoint as key's principal, and
// returns the headers of a request in it.
func (h *harness) session(key string) map[string]string {
	h.t.Helper()
	resp, _ := h.post("assistant", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","clientInfo":{"name":"raw","version":"1"},"capabilities":{}}}`,
		map[string]string{"X-API-Key": key})
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		h.t.Fatalf("initialize: status %d, no session id", resp.StatusCode)
	}
	return map[string]string{"X-API-Key": key, "Mcp-Session-Id": sid}
}

// BenchmarkNestedArguments sends the outside tester's tools/call, whose arguments hold 3.8 MiB of
// nested arrays (500 × 4000 levels), through the gateway's whole pipeline over HTTP as bob (who
// holds no grant), and, in the same run, a flat body of the same size (one string): what a call
// of that size costs. Each op is one call and its answer; B/op and allocs/op count the gateway,
// the test server and the client together; logged-input-bytes is the size of the policy input
// the call's decision-log event records. With the default limits (limits.arguments), both are
// refused for their size.
//
//	go test ./gateway -run '^$' -bench NestedArguments -benchmem -count 6 -benchtime 4x
func BenchmarkNestedArguments(b *testing.B) {
	nested := nestedArguments(500, 4000)
	flat := flatArguments(len(nested))
	cfg := gateway.Config{MaxBodyBytes: 8 << 20}
	for _, tc := range []struct{ name, args string }{{"flat", flat}, {"nested", nested}} {
		b.Run("args="+tc.name, func(b *testing.B) { benchCall(b, cfg, tc.args) })
	}
}

// BenchmarkArgumentLimits measures the other sides of the argument limits. With
// limits.arguments.max_bytes raised to 8 MiB, the tester's nested 3.8 MiB arguments are refused
// for their depth by the scan of their bytes, and a flat body of the same size is decided (and
// logged) in full. With the defaults, the calls closest to the limits that are still decided:
// 99,999 values, and 1 MiB in one string.
//
//	go test ./gateway -run '^$' -bench ArgumentLimits -benchmem -count 6 -benchtime 4x
func BenchmarkArgumentLimits(b *testing.B) {
	nested := nestedArguments(500, 4000)
	roomy := gateway.Config{MaxBodyBytes: 8 << 20, Limits: gateway.LimitsConfig{Arguments: jsonlimit.Limits{MaxBytes: 8 << 20}}}
	for _, tc := range []struct {
		name string
		cfg  gateway.Config
		args string
	}{
		{"nested-3.8MiB,max_bytes=8MiB", roomy, nested},
		{"flat-3.8MiB,max_bytes=8MiB", roomy, flatArguments(len(nested))},
		{"99999-values", gateway.Config{}, echoWithValues(jsonlimit.DefaultMaxNodes - 1)},
		{"1MiB-string", gateway.Config{}, echoOfSize(jsonlimit.DefaultMaxBytes)},
	} {
		b.Run("args="+tc.name, func(b *testing.B) { benchCall(b, tc.cfg, tc.args) })
	}
}

// benchCall sends a tools/call of tests__echo with args (JSON) as bob through a gateway with cfg,
// b.N times, and reports the size of the policy input logged for the last one.
func benchCall(b *testing.B, cfg gateway.Config, args string) {
	h := start(b, cfg)
	hdr := h.session(bobKey)
	body := []byte(toolsCall("tests__echo", args))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h.postBytes("assistant", body, hdr)
	}
	b.StopTimer()
	recs := h.events(decisionlog.Filter{Principal: "user:bob", Action: "tools/call"})
	if len(recs) == 0 {
		b.Fatal("no decision logged")
	}
	b.ReportMetric(float64(len(recs[len(recs)-1].Event.Input)), "logged-input-bytes")
}

// postBytes sends a raw JSON-RPC body to an agent endpoint and reads the whole answer. It fails
// the test unless the gateway answers 200.
func (h *harness) postBytes(agent string, body []byte, hdr map[string]string) []byte {
	h.t.Helper()
	resp := h.send(agent, bytes.NewReader(body), hdr)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		h.t.Fatalf("status %d: %s %v", resp.StatusCode, out, err)
	}
	return out
}
