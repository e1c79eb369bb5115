package upstream

import (
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
