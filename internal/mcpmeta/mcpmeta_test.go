package mcpmeta_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/internal/mcpmeta"
)

func TestStamp(t *testing.T) {
	info := mcp.Implementation{Name: "lush", Version: "1"}
	caps := mcp.ClientCapabilities{Sampling: &mcp.SamplingCapability{}}
	tool := &mcp.Tool{Name: "deploy", RawInputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`)}
	for _, tc := range []struct {
		name, version, method, params string
		tool                          *mcp.Tool
		wantMeta                      bool
		wantHeaders                   map[string]string
		wantErr                       string
	}{
		{name: "legacy is untouched", version: "2025-11-25", method: "tools/call", params: `{"name":"x"}`},
		{name: "call", version: "2026-07-28", method: "tools/call", params: `{"name":"echo","arguments":{},"_meta":{"progressToken":"p1"}}`,
			wantMeta: true, wantHeaders: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "echo"}},
		{name: "no params", version: "2026-07-28", method: "tools/list", wantMeta: true, wantHeaders: map[string]string{"Mcp-Method": "tools/list"}},
		{name: "resource", version: "2026-07-28", method: "resources/read", params: `{"uri":"test://a"}`, wantMeta: true,
			wantHeaders: map[string]string{"Mcp-Method": "resources/read", "Mcp-Name": "test://a"}},
		{name: "x-mcp-header", version: "2026-07-28", method: "tools/call", params: `{"name":"deploy","arguments":{"region":"eu"}}`, tool: tool,
			wantMeta: true, wantHeaders: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "deploy", "Mcp-Param-Region": "eu"}},
		{name: "params not an object", version: "2026-07-28", method: "tools/call", params: `[1]`, wantErr: "tools/call: params must be a JSON object"},
		{name: "_meta not an object", version: "2026-07-28", method: "tools/call", params: `{"_meta":1}`, wantErr: "params._meta must be a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, header, err := mcpmeta.Stamp(tc.version, info, caps, tc.method, json.RawMessage(tc.params), tc.tool)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.wantMeta {
				if string(out) != tc.params || header != nil {
					t.Errorf("stamped %s %v", out, header)
				}
				return
			}
			var p struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			}
			if err := json.Unmarshal(out, &p); err != nil {
				t.Fatal(err)
			}
			if string(p.Meta[mcp.MetaKeyProtocolVersion]) != `"2026-07-28"` || !strings.Contains(string(p.Meta[mcp.MetaKeyClientInfo]), `"lush"`) ||
				!strings.Contains(string(p.Meta[mcp.MetaKeyClientCapabilities]), `"sampling"`) {
				t.Errorf("_meta = %s", out)
			}
			if strings.Contains(tc.params, "progressToken") && string(p.Meta["progressToken"]) != `"p1"` {
				t.Errorf("the progress token was lost: %s", out)
			}
			if len(header) != len(tc.wantHeaders) {
				t.Errorf("headers = %v, want %v", header, tc.wantHeaders)
			}
			for k, v := range tc.wantHeaders {
				if header.Get(k) != v {
					t.Errorf("%s = %q, want %q", k, header.Get(k), v)
				}
			}
		})
	}
}
