package extauthz_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// noop is the baseline: an authorization server that allows everything at once. What it costs is
// the gRPC hop itself, which every ext_authz server pays.
type noop struct {
	authv3.UnimplementedAuthorizationServer
}

func (noop) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(code.Code_OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}}}, nil
}

func startNoop(b *testing.B) authv3.AuthorizationClient {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	authv3.RegisterAuthorizationServer(srv, noop{})
	go srv.Serve(ln)
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return authv3.NewAuthorizationClient(conn)
}

// argPolicy is a project policy that reads every call's arguments, as security teams write them
// (test/perf's paths.rego): each call with new arguments misses the decision cache.
const argPolicy = `package lush.policies.paths

deny contains "search may not name a path under /etc/" if {
	input.action == "tools/call"
	startswith(input.arguments.query, "/etc/")
}
`

// benchClient is a client of the baseline server ("direct") or of Lush's ("lush", and
// "lush+arg-policy" with argPolicy, where every benchmark call is a cache miss).
func benchClient(b *testing.B, target string) authv3.AuthorizationClient {
	switch target {
	case "direct":
		return startNoop(b)
	case "lush+arg-policy":
		return start(b, harnessOpts{policies: map[string]string{"paths.rego": argPolicy}}).client
	}
	return start(b, harnessOpts{}).client
}

// callBody is the i-th benchmark call: a read, with its own arguments.
func callBody(i int64) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":{"query":"standup %d"}}}`, i, i)
}

// BenchmarkCheckAtRate sends Check at a fixed rate (open loop: a request is sent at its
// scheduled time whether or not earlier ones have been answered, so a stall shows in the tail
// instead of slowing the generator down) for a fixed time, to
// the baseline server and to Lush: an allowed tools/call from an API-key caller, with the
// credential lookup and the decision committed to the SQLite decision log before the answer.
// The calls cycle through 1,000 different arguments. Reported: p50, p99 and p99.9 in microseconds.
//
//	go test ./mesh/extauthz -run '^$' -bench CheckAtRate -benchtime 1x -count 6
func BenchmarkCheckAtRate(b *testing.B) {
	const rate, duration = 2000, 10 * time.Second
	for _, target := range []string{"direct", "lush"} {
		b.Run(fmt.Sprintf("%s/rps=%d", target, rate), func(b *testing.B) {
			client := benchClient(b, target)
			base := load(b, "call_read_apikey")
			for range b.N {
				lat := openLoop(b, client, base, rate, duration)
				report(b, lat)
			}
		})
	}
}

// openLoop sends rate requests a second for d and returns their latencies, sorted.
func openLoop(b *testing.B, client authv3.AuthorizationClient, base *authv3.CheckRequest, rate int, d time.Duration) []time.Duration {
	n := int(d.Seconds() * float64(rate))
	// 1,000 distinct calls, built beforehand so that the generator allocates little while it runs.
	reqs := make([]*authv3.CheckRequest, 1000)
	for i := range reqs {
		reqs[i] = proto.Clone(base).(*authv3.CheckRequest)
		reqs[i].Attributes.Request.Http.RawBody = callBody(int64(i))
	}
	lat := make([]time.Duration, n)
	interval := time.Second / time.Duration(rate)
	var wg sync.WaitGroup
	var failed sync.Once
	b.ResetTimer()
	start := time.Now()
	for i := range n {
		// Pace by the schedule. Timers on this VM fire on 1 ms ticks (twice the interval), so a
		// wake-up sends the requests that are due together: about two per tick. (Spinning for
		// finer pacing starves the servers of the two vCPUs: far worse tails.)
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			resp, err := client.Check(context.Background(), reqs[i%len(reqs)])
			lat[i] = time.Since(sent)
			if err != nil || resp.GetOkResponse() == nil {
				failed.Do(func() { b.Errorf("Check %d: %v %v", i, err, resp.GetDeniedResponse().GetBody()) })
			}
		}()
	}
	if late := time.Since(start) - d; late > d/20 {
		b.Errorf("the generator fell %s behind its schedule: the figures are not at %d requests/s", late, rate)
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	return lat
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(b *testing.B, lat []time.Duration) {
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(0.999), "p99.9-µs")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkCheck is the closed-loop cost of one Check over gRPC (8 concurrent callers per CPU),
// to the baseline server and to Lush, with the same request as BenchmarkCheckAtRate; with
// the argument policy every call misses the decision cache.
//
//	go test ./mesh/extauthz -run '^$' -bench 'Check$' -benchmem -count 6
func BenchmarkCheck(b *testing.B) {
	for _, target := range []string{"direct", "lush", "lush+arg-policy"} {
		b.Run(target, func(b *testing.B) {
			client := benchClient(b, target)
			base := load(b, "call_read_apikey")
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					r := proto.Clone(base).(*authv3.CheckRequest)
					r.Attributes.Request.Http.RawBody = callBody(i)
					resp, err := client.Check(context.Background(), r)
					if err != nil || resp.GetOkResponse() == nil {
						b.Fatalf("Check: %v %v", err, resp)
					}
				}
			})
			// The process's CPU per Check (client and server; not the wall time, which other
			// processes on the machine change).
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkCheckHeadersOrBody is the cost of one Check of an MCP 2026 tools/call that no policy
// reads the arguments of (list_notes, a read), decided from its body as the sidecar sends it
// (with small arguments, and with 16 KiB of them), and from its Mcp-Method and Mcp-Name headers
// alone, as on a route that does not buffer bodies. 8 concurrent callers per CPU.
//
//	go test ./mesh/extauthz -run '^$' -bench CheckHeadersOrBody -benchmem -count 6
func BenchmarkCheckHeadersOrBody(b *testing.B) {
	headers := modernHeaders("tools/call", "list_notes")
	big := strings.Repeat("x", 16<<10)
	for _, tc := range []struct {
		name string
		body func(i int64) []byte // nil: headers only
	}{
		{"from=body", func(i int64) []byte {
			return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_notes","arguments":{"folder":"standup %d"},%s}}`, i, i, meta2026)
		}},
		{"from=body-16KiB", func(i int64) []byte {
			return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_notes","arguments":{"folder":"%s %d"},%s}}`, i, big, i, meta2026)
		}},
		{"from=headers", nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			client := start(b, harnessOpts{}).client
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					var body string
					if tc.body != nil {
						body = string(tc.body(i))
					}
					resp, err := client.Check(context.Background(), mcpPost(headers, body))
					if err != nil || resp.GetOkResponse() == nil {
						b.Fatalf("Check: %v %v", err, resp)
					}
				}
			})
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
