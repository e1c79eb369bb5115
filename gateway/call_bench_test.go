package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lush-agents/lush/gateway"
)

// BenchmarkGatewayCall sends tools/calls from one caller, and from 16 callers per core (whose
// decisions the log commits in batches), straight to the gateway's handler (no client
// connection: an httptest recorder), through authentication, the decision (cached after
// the first), the decision log on SQLite, tracing and the forward to the upstream echo server over
// loopback HTTP. Its allocs/op and cpu-µs/op are the gateway's own per-call cost plus the upstream's,
// which does not change with the gateway: the figure to compare before and after a change to the
// gateway's hot path.
//
//	go test ./gateway -run '^$' -bench BenchmarkGatewayCall -benchmem -count 6
func BenchmarkGatewayCall(b *testing.B) {
	b.Run("callers=1", func(b *testing.B) { benchGatewayCall(b, 0) })
	b.Run("callers=16xcores", func(b *testing.B) { benchGatewayCall(b, 16) })
}

// benchGatewayCall runs BenchmarkGatewayCall with parallelism callers per core, or one caller for 0.
func benchGatewayCall(b *testing.B, parallelism int) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	defer tp.Shutdown(context.Background())
	h := start(b, gateway.Config{}, func(o *gateway.Options) { o.Tracer = tp })
	handler := h.gw.Handler()
	hdr := map[string]string{"X-API-Key": aliceKey}
	resp, _ := h.post("assistant", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`, hdr)
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		b.Fatal("no session")
	}
	body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tests__echo","arguments":{"text":"ping"}}}`
	one := func() {
		req := httptest.NewRequest(http.MethodPost, h.srv.URL+"/agents/assistant/mcp", strings.NewReader(body))
		req.RemoteAddr = "127.0.0.1:40000"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		req.Header.Set("X-API-Key", aliceKey)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `ping`) || strings.Contains(w.Body.String(), `"isError":true`) {
			b.Errorf("%d %s", w.Code, w.Body.String())
		}
	}
	one()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	if parallelism == 0 {
		for range b.N {
			one()
		}
	} else {
		b.SetParallelism(parallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				one()
			}
		})
	}
	// The process's CPU time per call (gateway, decision log, upstream; not the wall time, which
	// another process on the machine changes): what a change to the hot path saves.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
