package gateway

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/mcphttp"
)

// A list filtered for the caller is private, and may be reused for the shortest TTL its servers
// gave: not at all when one gave none, or when it holds entries of no server.
func TestListHints(t *testing.T) {
	ttls := map[string]time.Duration{"mcp://a": time.Minute, "mcp://b": 5 * time.Second, "mcp://zero": 0}
	ttlOf := func(ref string) (time.Duration, bool) { d, ok := ttls[ref]; return d, ok }
	for _, tc := range []struct {
		name string
		refs []string
		want time.Duration
	}{
		{"one server", []string{"mcp://a"}, time.Minute},
		{"the shortest", []string{"mcp://a", "mcp://b", "mcp://a"}, 5 * time.Second},
		{"a server without TTL", []string{"mcp://a", "mcp://none"}, 0},
		{"a local tool", []string{"mcp://a", ""}, 0},
		{"a TTL of 0", []string{"mcp://zero", "mcp://a"}, 0},
		{"nothing listed", nil, 0},
	} {
		if got := shortestTTL(tc.refs, ttlOf); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		protocol string
		want     string
	}{
		{"2025-11-25", `{"tools":[]}`},
		{"2026-07-28", `{"cacheScope":"private","tools":[],"ttlMs":0}`},
	} {
		c := &call{req: &mcphttp.Request{Protocol: tc.protocol}}
		got, _ := json.Marshal(c.listHints(map[string]any{"tools": []any{}}, "tools/list", []string{""}))
		if string(got) != tc.want {
			t.Errorf("%s: %s, want %s", tc.protocol, got, tc.want)
		}
	}
}

// A resources/read result is private whatever its server said, with the server's TTL when valid.
func TestReadHints(t *testing.T) {
	for _, tc := range []struct {
		name, protocol, result, want string
	}{
		{"the server's TTL, made private", "2026-07-28", `{"contents":[],"ttlMs":5000,"cacheScope":"public"}`, `{"cacheScope":"private","contents":[],"ttlMs":5000}`},
		{"no hints", "2026-07-28", `{"contents":[]}`, `{"cacheScope":"private","contents":[],"ttlMs":0}`},
		{"a negative TTL", "2026-07-28", `{"contents":[],"ttlMs":-1}`, `{"cacheScope":"private","contents":[],"ttlMs":0}`},
		{"a fractional TTL", "2026-07-28", `{"contents":[],"ttlMs":1.5}`, `{"cacheScope":"private","contents":[],"ttlMs":0}`},
		{"not an object", "2026-07-28", `[1]`, `[1]`},
		{"an older version", "2025-11-25", `{"contents":[],"ttlMs":5}`, `{"contents":[],"ttlMs":5}`},
	} {
		c := &call{req: &mcphttp.Request{Protocol: tc.protocol}}
		got := c.readHints(json.RawMessage(tc.result))
		if string(got.(json.RawMessage)) != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
