package upstream

import (
	"context"
	"encoding/json"
	"maps"

	"github.com/mark3labs/mcp-go/mcp"
)

// capabilitiesKey is the context key of WithClientCapabilities and WithClientExtensions.
type capabilitiesKey struct{}

// clientCapabilities is what a context says of the client its requests are made for.
type clientCapabilities struct {
	declared   json.RawMessage // the client's capabilities, as it declared them
	client     bool            // declared is set: the requests are made for a client
	extensions map[string]any  // the extensions Lush declares for these requests
}

// WithClientCapabilities returns a context whose requests to a server speaking 2026-07-28
// declare the capabilities of the client they are made for (params._meta carries them on every
// request of that version): declared, the client's capabilities as it declared them (a JSON
// object; nil or malformed is none), intersected with what Lush forwards to a client
// (ForwardedCapabilities). A server then learns that a client lacks a capability, and answers
// MissingRequiredClientCapability (-32021) rather than asking for what cannot be answered.
// Requests in a context without it are Lush's own (health checks, list refreshes) and declare
// ForwardedCapabilities. The client's extensions are not forwarded: Lush declares an extension
// it handles with WithClientExtensions.
func WithClientCapabilities(ctx context.Context, declared json.RawMessage) context.Context {
	cc := clientCapabilitiesOf(ctx)
	cc.declared, cc.client = declared, true
	return context.WithValue(ctx, capabilitiesKey{}, &cc)
}

// WithClientExtensions returns a context whose requests to a server speaking 2026-07-28 declare
// these client extensions (capabilities.extensions) too: the gateway declares an extension (the
// tasks extension) for exactly the requests whose own client declared it, so that a server uses
// it only with clients that can follow.
func WithClientExtensions(ctx context.Context, extensions map[string]any) context.Context {
	cc := clientCapabilitiesOf(ctx)
	merged := maps.Clone(cc.extensions)
	if merged == nil {
		merged = make(map[string]any, len(extensions))
	}
	maps.Copy(merged, extensions)
	cc.extensions = merged
	return context.WithValue(ctx, capabilitiesKey{}, &cc)
}

// clientCapabilitiesOf is a copy of what ctx says of its client.
func clientCapabilitiesOf(ctx context.Context) clientCapabilities {
	if cc, ok := ctx.Value(capabilitiesKey{}).(*clientCapabilities); ok {
		return *cc
	}
	return clientCapabilities{}
}

// requestCapabilities are the client capabilities a request within ctx declares.
func requestCapabilities(ctx context.Context) mcp.ClientCapabilities {
	cc := clientCapabilitiesOf(ctx)
	caps := ForwardedCapabilities()
	if cc.client {
		caps = forwardable(cc.declared)
	}
	if len(cc.extensions) > 0 {
		caps.Extensions = cc.extensions
	}
	return caps
}
