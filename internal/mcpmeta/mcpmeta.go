// Package mcpmeta adds to an MCP request what its protocol version asks a client to send with it:
// from 2026-07-28 on, the protocol version, client info and capabilities in params._meta and the
// Mcp-Method / Mcp-Name (and Mcp-Param-*) headers. Lush's clients that send raw JSON-RPC requests
// (the gateway to its upstreams, agentd to the gateway) stamp them with it.
package mcpmeta

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
)

// Stamp makes a request for a server speaking protocol version: from 2026-07-28 on, every
// request carries the protocol version, client info and client capabilities in params._meta
// (keeping what _meta already holds, the progress token included) and mirrors its method and
// name in the Mcp-Method / Mcp-Name headers (and tool arguments annotated x-mcp-header in
// Mcp-Param-* headers, when tool is its definition). The transport adds Mcp-Protocol-Version
// itself. For older versions params are returned untouched and the header is nil.
func Stamp(version string, info mcp.Implementation, caps mcp.ClientCapabilities, method string, params json.RawMessage, tool *mcp.Tool) (json.RawMessage, http.Header, error) {
	if !mcp.IsModernProtocol(version) {
		return params, nil, nil
	}
	fields := map[string]json.RawMessage{}
	if len(params) > 0 && string(params) != "null" {
		if err := json.Unmarshal(params, &fields); err != nil {
			return nil, nil, fmt.Errorf("%s: params must be a JSON object: %w", method, err)
		}
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := fields["_meta"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, nil, fmt.Errorf("%s: params._meta must be a JSON object: %w", method, err)
		}
	}
	meta[mcp.MetaKeyProtocolVersion], _ = json.Marshal(version)
	meta[mcp.MetaKeyClientInfo], _ = json.Marshal(info)
	meta[mcp.MetaKeyClientCapabilities], _ = json.Marshal(caps)
	fields["_meta"], _ = json.Marshal(meta)
	stamped, err := json.Marshal(fields)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: encode params: %w", method, err)
	}
	header := http.Header{}
	for k, v := range mcp.StandardHeaders(version, mcp.MCPMethod(method), stamped) {
		header.Set(k, v)
	}
	if tool != nil && method == string(mcp.MethodToolsCall) {
		for k, v := range mcp.GenerateParamHeaders(tool, stamped) {
			header.Set(k, v)
		}
	}
	return stamped, header, nil
}
