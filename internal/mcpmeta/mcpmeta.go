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
	if id, ok := taskName(method, stamped); ok { // SEP-2663: a task's methods name their task
		header.Set(mcp.HeaderName, id)
	}
	if tool != nil && method == string(mcp.MethodToolsCall) {
		for k, v := range mcp.GenerateParamHeaders(tool, stamped) {
			header.Set(k, v)
		}
	}
	return stamped, header, nil
}

// WithLogLevel asks, from 2026-07-28 on, for the log messages (notifications/message) of a
// request at level and above, unless params' _meta names a level already: that version sends
// none without one (earlier versions send them until logging/setLevel says otherwise).
func WithLogLevel(version string, params json.RawMessage, level mcp.LoggingLevel) (json.RawMessage, error) {
	if !mcp.IsModernProtocol(version) {
		return params, nil
	}
	fields := map[string]json.RawMessage{}
	if len(params) > 0 && string(params) != "null" {
		if err := json.Unmarshal(params, &fields); err != nil {
			return nil, fmt.Errorf("params must be a JSON object: %w", err)
		}
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := fields["_meta"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, fmt.Errorf("params._meta must be a JSON object: %w", err)
		}
	}
	if _, ok := meta[mcp.MetaKeyLogLevel]; ok {
		return params, nil
	}
	meta[mcp.MetaKeyLogLevel], _ = json.Marshal(level)
	fields["_meta"], _ = json.Marshal(meta)
	return json.Marshal(fields)
}

// taskName is the Mcp-Name header of a tasks extension method (tasks/get, tasks/update,
// tasks/cancel): its taskId, encoded as header values are.
func taskName(method string, params json.RawMessage) (string, bool) {
	if method != "tasks/get" && method != "tasks/update" && method != "tasks/cancel" {
		return "", false
	}
	var p struct {
		TaskID string `json:"taskId"`
	}
	if json.Unmarshal(params, &p) != nil || p.TaskID == "" {
		return "", false
	}
	return mcp.EncodeHeaderValue(p.TaskID)
}
