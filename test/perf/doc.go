// Package perf is the hot path's measuring harness (issue 21): it runs the real `lushctl
// gateway` as its own process, with its ext_authz server, next to an mcp-go echo server, a bare
// net/http/httputil reverse proxy and a no-op ext_authz server (helper processes), drives them with
// closed-loop mcp-go clients and an open-loop gRPC Check generator, and prices one decision of
// the compiled bundle against a plain RBAC Rego policy with OPA's rego package, all in one run.
// Everything is in its tests: `make bench-gateway` runs the measurement, `go test ./test/perf -run
// Smoke` a sub-second version of it so that the harness cannot rot. LUSH_PERF_PROFILE=<dir> also
// writes each gateway's CPU and allocation profiles of its ext_authz run (profile_test.go). No
// program links it.
package perf
