package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lush-agents/lush/gateway"
)

// BenchmarkGatewayOverhead calls an echo tool over streamable HTTP on loopback, directly, through
// a bare reverse proxy (net/http/httputil, no policy: the cost of any extra HTTP hop on this
// machine) and through the gateway (authentication, policy decision, decision log on SQLite,
// tracing with a batch span processor, proxying), in the same run, with 64 concurrent clients,
// each with its own MCP session, and with one client (the latency of a call on an idle gateway,
// without queueing). It reports each path's p50 and p99, the latency the gateway adds, and
// throughput as a share of direct. Clients, proxy, gateway and upstream share the machine's cores.
//
//	go test ./gateway -run '^$' -bench GatewayOverhead -benchtime 20000x -count 6
func BenchmarkGatewayOverhead(b *testing.B) {
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchOverhead(b, clients) })
	}
}

func benchOverhead(b *testing.B, clients int) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	defer tp.Shutdown(context.Background())
	h := start(b, gateway.Config{}, func(o *gateway.Options) { o.Tracer = tp })
	upstreamURL := h.url
	target, err := url.Parse(upstreamURL)
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
	rp.FlushInterval = -1 // stream event-stream responses as the gateway does
	proxy := httptest.NewServer(rp)
	defer proxy.Close()

	connect := func(url string, headers map[string]string) *client.Client {
		// Each client is its own user, with its own connections.
		hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		c, err := client.NewStreamableHttpClient(url, transport.WithHTTPHeaders(headers), transport.WithHTTPBasicClient(hc))
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Initialize(context.Background(), mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25"}}); err != nil {
			b.Fatal(err)
		}
		return c
	}
	run := func(url, tool string, headers map[string]string) ([]time.Duration, time.Duration) {
		cs := make([]*client.Client, clients)
		for i := range cs {
			cs[i] = connect(url, headers)
			defer cs[i].Close()
		}
		// warm up every session
		for _, c := range cs {
			call(b, c, tool)
		}
		var next atomic.Int64
		lat := make([]time.Duration, b.N)
		var wg sync.WaitGroup
		start := time.Now()
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(b.N) {
						return
					}
					t0 := time.Now()
					call(b, c, tool)
					lat[i] = time.Since(t0)
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		slices.Sort(lat)
		return lat, elapsed
	}

	b.ResetTimer()
	direct, directTime := run(upstreamURL, "echo", nil)
	_, proxyTime := run(proxy.URL+target.Path, "echo", nil)
	through, gwTime := run(h.srv.URL+"/agents/assistant/mcp", "tests__echo", map[string]string{"X-API-Key": aliceKey})
	b.StopTimer()

	pct := func(l []time.Duration, p float64) float64 { return float64(l[int(float64(len(l)-1)*p)].Microseconds()) }
	b.ReportMetric(pct(direct, 0.5), "direct-p50-µs")
	b.ReportMetric(pct(direct, 0.99), "direct-p99-µs")
	b.ReportMetric(pct(through, 0.5), "gateway-p50-µs")
	b.ReportMetric(pct(through, 0.99), "gateway-p99-µs")
	b.ReportMetric(pct(through, 0.5)-pct(direct, 0.5), "added-p50-µs")
	b.ReportMetric(pct(through, 0.99)-pct(direct, 0.99), "added-p99-µs")
	b.ReportMetric(float64(directTime)/float64(gwTime), "throughput-share")
	b.ReportMetric(float64(directTime)/float64(proxyTime), "bare-proxy-share")
	b.ReportMetric(float64(b.N)/gwTime.Seconds(), "gateway-calls/s")
	b.ReportMetric(float64(b.N)/directTime.Seconds(), "direct-calls/s")
}

// discardExporter drops spans: the benchmark pays for recording and batching them, as a gateway
// exporting traces does, without an OTLP collector.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

func call(b *testing.B, c *client.Client, tool string) {
	res, err := c.CallTool(context.Background(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "ping"}}})
	if err != nil {
		b.Fatal(err)
	}
	if res.IsError {
		b.Fatal(fmt.Sprint(res.Content))
	}
}
