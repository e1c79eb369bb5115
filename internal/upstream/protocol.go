package upstream

import (
	"encoding/json"

	"github.com/mark3labs/mcp-go/mcp"
)

// ForwardedCapabilities are the client capabilities Lush declares to upstream servers: what the
// gateway can forward to the client of a call (sampling, elicitation in form and URL mode, roots).
// A server hides the tools that need a capability its client lacks, so without them a client
// behind Lush would see fewer tools than one connected directly. Whether a given request reaches
// its client is decided per call (see Asker). A request a 2026-07-28 server gets for a client
// declares that client's share of them (WithClientCapabilities).
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

// forwardable is what Lush declares for a client whose capabilities are declared (a JSON
// object): the capabilities of ForwardedCapabilities the client declared too, and nothing else.
// An elicitation capability without modes is form mode (as before 2025-11-25). Malformed
// capabilities declare nothing.
func forwardable(declared json.RawMessage) mcp.ClientCapabilities {
	var c struct {
		Sampling    json.RawMessage `json:"sampling"`
		Roots       json.RawMessage `json:"roots"`
		Elicitation json.RawMessage `json:"elicitation"`
	}
	var out mcp.ClientCapabilities
	if json.Unmarshal(declared, &c) != nil {
		return out
	}
	all := ForwardedCapabilities()
	if isObject(c.Sampling) {
		out.Sampling = &mcp.SamplingCapability{}
	}
	if isObject(c.Roots) {
		var r struct {
			ListChanged bool `json:"listChanged"`
		}
		json.Unmarshal(c.Roots, &r)
		out.Roots = &struct {
			ListChanged bool `json:"listChanged,omitempty"`
		}{ListChanged: r.ListChanged && all.Roots.ListChanged}
	}
	if isObject(c.Elicitation) {
		var modes map[string]json.RawMessage
		json.Unmarshal(c.Elicitation, &modes)
		var e mcp.ElicitationCapability
		if isObject(modes["form"]) || len(modes) == 0 {
			e.Form = &struct{}{}
		}
		if isObject(modes["url"]) {
			e.URL = &struct{}{}
		}
		if e.Form != nil || e.URL != nil {
			out.Elicitation = &e
		}
	}
	return out
}

// isObject reports whether raw is a JSON object (a declared capability; null is not one).
func isObject(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '{' }
