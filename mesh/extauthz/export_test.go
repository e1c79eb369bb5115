package extauthz

import (
	"context"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// CheckInline decides req directly, without the admission: the reference of the differential
// test of the stream workers and the admission.
func (s *Server) CheckInline(ctx context.Context, req *authv3.CheckRequest) *authv3.CheckResponse {
	return s.check(ctx, req)
}
