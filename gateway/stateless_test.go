package gateway_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	if caps, _ := json.Marshal(result["capabilities"]); strings.Contains(string(caps), "listChanged") {
		t.Errorf("discover offers list-change notifications, which stateless clients cannot get: %s", caps)
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
