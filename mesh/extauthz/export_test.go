package extauthz

import (
	"context"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// CheckInline decides req on the calling goroutine, as Check did before it had workers: the
// reference of the differential test of the workers.
func (s *Server) CheckInline(ctx context.Context, req *authv3.CheckRequest) *authv3.CheckResponse {
	return s.check(ctx, req)
}
