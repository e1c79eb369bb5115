package upstream

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"
)

// extensionsKey is the context key of WithClientExtensions.
type extensionsKey struct{}

// WithClientExtensions returns a context whose requests to a server speaking 2026-07-28 declare
// these client extensions (capabilities.extensions) besides ForwardedCapabilities: the gateway
// declares an extension (the tasks extension) for exactly the requests whose own client declared
// it, so that a server uses it only with clients that can follow.
func WithClientExtensions(ctx context.Context, extensions map[string]any) context.Context {
	return context.WithValue(ctx, extensionsKey{}, extensions)
}

// requestCapabilities are the client capabilities a request within ctx declares.
func requestCapabilities(ctx context.Context) mcp.ClientCapabilities {
	caps := ForwardedCapabilities()
	if ext, _ := ctx.Value(extensionsKey{}).(map[string]any); len(ext) > 0 {
		caps.Extensions = ext
	}
	return caps
}
