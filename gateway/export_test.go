package gateway

import (
	"context"

	"github.com/lush-agents/lush/internal/mcphttp"
)

// ServeMCP answers req as an agent endpoint does, with the caller in ctx: for tests of requests
// a test builds itself (a 2026-07-28 request, with its capabilities in _meta).
func ServeMCP(ctx context.Context, g *Gateway, req *mcphttp.Request) (any, error) {
	return (*handler)(g).Serve(ctx, req)
}
