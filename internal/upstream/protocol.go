package upstream

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
)

// ForwardedCapabilities are the client capabilities Lush declares to upstream servers: what the
// gateway can forward to the client of a call (sampling, elicitation in form and URL mode, roots).
// A server hides the tools that need a capability its client lacks, so without them a client
// behind Lush would see fewer tools than one connected directly. Whether a given request reaches
// its client is decided per call (see Asker).
func ForwardedCapabilities() mcp.ClientCapabilities {
	caps := mcp.ClientCapabilities{
		Sampling:    &mcp.SamplingCapability{},
		Elicitation: &mcp.ElicitationCapability{Form: &struct{}{}, URL: &struct{}{}},
	}
	caps.Roots = &struct {
		ListChanged bool `json:"listChanged,omitempty"`
	}{ListChanged: true}
	return caps
}

// Stamp makes a request for an upstream speaking protocol version: from 2026-07-28 on, every
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
