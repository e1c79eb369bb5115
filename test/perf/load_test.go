package perf

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// target is one way to reach the echo tool.
type target struct {
	name     string
	endpoint string            // the MCP endpoint
	headers  map[string]string // sent with every request (the gateway's API key)
	tool     string            // the echo tool's name there
	pid      int               // the process whose CPU is charged to the hop (0: none, direct)
	echoPid  int               // the echo server's process
}

// result is what a load run measured.
type result struct {
	calls   int
	elapsed time.Duration
	lat     []time.Duration // sorted
	cpu     time.Duration   // CPU of the target's process during the run
	echoCPU time.Duration   // CPU of the echo server's process during the run
	failed  int             // calls that failed or were refused (not in lat); fail closed shows here
	first   string          // the first failure
}

// fail counts a failed call, keeping the first one's message.
func (r *result) fail(msg string) {
	if len(msg) > 400 {
		msg = msg[:400] + "…"
	}
	if r.failed == 0 {
		r.first = msg
	}
	r.failed++
}

func (r result) perSecond() float64 { return float64(r.calls) / r.elapsed.Seconds() }

func (r result) cpuPerCall() time.Duration {
	if r.calls == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.calls)
}

// quantile is the q-quantile of sorted latencies.
func quantile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	return lat[min(len(lat)-1, int(q*float64(len(lat))))]
}

// seq numbers the arguments of every call of the run: each call echoes a text no call before it
// sent, so a policy that reads the arguments can never take its decision from the cache.
var seq atomic.Int64

func echoArgs() map[string]any { return map[string]any{"text": fmt.Sprintf("note %d", seq.Add(1))} }

// connect opens an MCP session to tg with its own HTTP connections, as a separate user would.
func connect(ctx context.Context, tg target) (*client.Client, error) {
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	c, err := client.NewStreamableHttpClient(tg.endpoint, transport.WithHTTPHeaders(tg.headers), transport.WithHTTPBasicClient(hc))
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", tg.name, err)
	}
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("start a session with %s: %w", tg.name, err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "lush-perf", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return nil, fmt.Errorf("initialize with %s: %w", tg.name, err)
	}
	return c, nil
}

func callEcho(ctx context.Context, c *client.Client, tool string) error {
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = tool, echoArgs()
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("the tool answered an error: %v", res.Content)
	}
	return nil
}

// closedLoop runs clients MCP clients against tg, each with its own session, calling the echo
// tool in a loop for d (each call waits for the previous one's answer), and measures the calls,
// their latencies and the CPU time of tg's process.
func closedLoop(ctx context.Context, t testing.TB, tg target, clients int, d time.Duration) result {
	t.Helper()
	cs := make([]*client.Client, clients)
	for i := range cs {
		c, err := connect(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
		// Warm the session (and the decision cache for the policies that do not read arguments).
		if err := callEcho(ctx, c, tg.tool); err != nil {
			t.Fatalf("%s: warm-up call: %v", tg.name, err)
		}
	}
	lats := make([][]time.Duration, clients)
	fails := make([]result, clients)
	cpu0, echo0 := cpuOf(t, tg.pid), cpuOf(t, tg.echoPid)
	begin := time.Now()
	deadline := begin.Add(d)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := callEcho(ctx, c, tg.tool); err != nil {
					fails[i].fail(err.Error())
					continue
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	r := result{elapsed: time.Since(begin), cpu: cpuOf(t, tg.pid) - cpu0, echoCPU: cpuOf(t, tg.echoPid) - echo0}
	for i := range cs {
		r.lat = append(r.lat, lats[i]...)
		if fails[i].failed > 0 {
			r.failed += fails[i].failed
			if r.first == "" {
				r.first = fails[i].first
			}
		}
	}
	if r.failed > 0 {
		t.Logf("%s, %d clients: %d calls failed; the first: %s", tg.name, clients, r.failed, r.first)
	}
	slices.Sort(r.lat)
	r.calls = len(r.lat)
	return r
}

func cpuOf(t testing.TB, pid int) time.Duration {
	t.Helper()
	if pid == 0 {
		return 0
	}
	c, err := cpuTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// authzTarget is an ext_authz server to drive.
type authzTarget struct {
	name string
	addr string
	pid  int
}

// checkRequest is the CheckRequest an Envoy sidecar in front of the echo server sends for a
// tools/call of echo by alice (API key), as in test/mesh_e2e_test.go's sidecar: headers, raw
// body, source address. i numbers its arguments.
func checkRequest(i int) *authv3.CheckRequest {
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"note %d"}}}`, i, i)
	const path = "/agents/bench/tools/echo/mcp"
	hdr := map[string]string{":path": path, ":method": "POST", ":authority": "bench.mesh.local:10000", ":scheme": "http",
		"content-type": "application/json", "accept": "application/json, text/event-stream",
		"mcp-protocol-version": "2025-11-25", "x-api-key": apiKey, "content-length": fmt.Sprint(len(body))}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "POST", Path: path, Host: "bench.mesh.local:10000", Scheme: "http", Protocol: "HTTP/1.1",
			Headers: hdr, RawBody: body, Size: int64(len(body))}},
	}}
}

// authzClient connects to an ext_authz server over one gRPC connection, as an Envoy worker does.
func authzClient(t testing.TB, addr string) authv3.AuthorizationClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return authv3.NewAuthorizationClient(conn)
}

// openLoop sends Check to tg at rate requests a second for d, each at its scheduled time whether
// or not earlier ones were answered (open loop: a stall shows in the tail instead of slowing the
// generator down). Each request has arguments no earlier one had. Every answer must allow.
func openLoop(ctx context.Context, t testing.TB, tg authzTarget, rate int, d time.Duration) result {
	t.Helper()
	c := authzClient(t, tg.addr)
	if resp, err := c.Check(ctx, checkRequest(-1)); err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("%s: warm-up Check: %v %v", tg.name, err, resp.GetDeniedResponse())
	}
	n := max(1, int(d.Seconds()*float64(rate)))
	reqs := make([]*authv3.CheckRequest, n) // built beforehand: the generator allocates little while it runs
	base := int(seq.Add(int64(n)))
	for i := range reqs {
		reqs[i] = checkRequest(base + i)
	}
	lat := make([]time.Duration, n)
	interval := time.Second / time.Duration(rate)
	var wg sync.WaitGroup
	ok := make([]bool, n)
	msgs := make([]string, n)
	cpu0 := cpuOf(t, tg.pid)
	begin := time.Now()
	for i := range n {
		// Timers here fire on ~1 ms ticks: a wake-up sends every request that is due (about two
		// per tick at 2,000/s); spinning for finer pacing would starve the servers.
		if wait := time.Until(begin.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Go(func() {
			sent := time.Now()
			resp, err := c.Check(ctx, reqs[i])
			lat[i] = time.Since(sent)
			if ok[i] = err == nil && resp.GetOkResponse() != nil; !ok[i] {
				msgs[i] = fmt.Sprintf("Check %d: %v %v", i, err, resp.GetDeniedResponse().GetBody())
			}
		})
	}
	behind := time.Since(begin) - d
	wg.Wait()
	r := result{elapsed: time.Since(begin), cpu: cpuOf(t, tg.pid) - cpu0}
	for i := range n {
		if ok[i] {
			r.lat = append(r.lat, lat[i])
		} else {
			r.fail(msgs[i])
		}
	}
	r.calls = len(r.lat)
	if r.failed > 0 {
		t.Logf("%s: %d of %d Checks were not allowed; the first: %s", tg.name, r.failed, n, r.first)
	}
	if behind > d/20 && d >= time.Second {
		t.Logf("WARNING: the generator fell %s behind its schedule against %s: not quite %d requests/s", behind, tg.name, rate)
	}
	slices.Sort(r.lat)
	return r
}
