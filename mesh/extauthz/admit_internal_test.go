package extauthz

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
)

// busyWorkers are workers whose Checks block until release is closed; entered says when one
// started.
func busyWorkers(t *testing.T, n int, wait time.Duration) (w *workers, entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}, 16), make(chan struct{})
	w = startWorkers(n, wait, func(context.Context, *authv3.CheckRequest) *authv3.CheckResponse {
		entered <- struct{}{}
		<-release
		return allowed(nil, nil, nil)
	})
	t.Cleanup(w.close)
	return w, entered, release
}

// TestWorkersShed: when every worker is busy, a Check waits at most the queue's wait, or until
// its caller gives up, and is then not run; the answer it gets denies, 503, with the reason.
func TestWorkersShed(t *testing.T) {
	w, entered, release := busyWorkers(t, 1, time.Hour) // the first Check waits for the worker to start
	var wg sync.WaitGroup
	var first *authv3.CheckResponse
	wg.Go(func() {
		var ok bool
		if first, ok = w.run(context.Background(), &authv3.CheckRequest{}); !ok {
			t.Error("the first Check found no free worker")
		}
	})
	<-entered // the only worker is busy now
	w.wait = time.Millisecond
	if _, ok := w.run(context.Background(), &authv3.CheckRequest{}); ok {
		t.Fatal("a Check was let in beyond the limit")
	}
	w.limit.limit.Store(3) // let them in: they wait for the one worker
	if _, ok := w.run(context.Background(), &authv3.CheckRequest{}); ok {
		t.Fatal("a Check ran although the only worker was busy past the queue's wait")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := w.run(ctx, &authv3.CheckRequest{}); ok {
		t.Fatal("a Check whose caller gave up ran")
	}
	close(release)
	wg.Wait()
	if first.GetOkResponse() == nil {
		t.Fatalf("the Check the worker ran lost its answer: %v", first)
	}
	if len(entered) != 0 {
		t.Fatalf("%d shed Checks were run", len(entered))
	}

	s := &Server{opts: Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
		RawBody: []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search"}}`)}}}}
	resp := s.overloaded(w, req)
	d := resp.GetDeniedResponse()
	if resp.GetOkResponse() != nil || d == nil || d.GetStatus().GetCode() != http.StatusServiceUnavailable || resp.GetStatus().GetCode() != int32(code.Code_UNAVAILABLE) {
		t.Fatalf("a shed Check is not denied with 503 UNAVAILABLE: %v", resp)
	}
	var body struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(d.GetBody()), &body); err != nil || string(body.ID) != "7" || !strings.Contains(body.Error.Message, "deciding as many requests as it can") {
		t.Fatalf("the denial of a shed Check does not name its request and reason: %s (%v)", d.GetBody(), err)
	}
	if w.shed.Load() != 1 {
		t.Fatalf("shed count %d, want 1", w.shed.Load())
	}
	if n := w.limit.inflight.Load(); n != 0 {
		t.Fatalf("%d Checks still counted in flight after all ended", n)
	}
}

// TestLimiter: the limit stays at its maximum while Checks are decided within the target, falls
// to what finishes within the target at the rate they finish when they are slower, never below
// its minimum, and doubles back once they are fast again. Idle time before a window, and
// windows of too few Checks, do not lower it.
func TestLimiter(t *testing.T) {
	now := time.Unix(0, 0)
	l := newLimiter(4, 128, 100*time.Millisecond)
	// window: n Checks that each took took end evenly over span, the first at its start.
	windowOver := func(n int, took, span time.Duration) {
		step := (span + time.Duration(n-2)) / time.Duration(n-1) // rounded up: the last ends at span or after
		for i := range n {
			if !l.admit() {
				t.Fatalf("Check %d of the window not let in at limit %d", i, l.limit.Load())
			}
			l.done(now.Add(time.Duration(i)*step), took)
		}
		now = now.Add(span + time.Millisecond)
	}
	window := func(n int, took time.Duration) { windowOver(n, took, limitWindow) }
	window(100, time.Millisecond)
	if got := l.limit.Load(); got != 128 {
		t.Fatalf("fast Checks: limit %d, want 128", got)
	}
	now = now.Add(time.Hour)            // idle
	window(limitSamples-1, time.Minute) // too few to judge by: they end no window
	now = now.Add(time.Hour)
	if got := l.limit.Load(); got != 128 {
		t.Fatalf("after idle and a few slow Checks: limit %d, want 128", got)
	}
	window(51, 400*time.Millisecond) // 500 a second end, each after 400 ms: 50 end in 100 ms
	if got := l.limit.Load(); got != 50 {
		t.Fatalf("slow Checks at 500/s: limit %d, want 50", got)
	}
	for range 50 {
		l.admit()
	}
	if l.admit() {
		t.Fatal("a Check let in beyond the limit")
	}
	for range 50 {
		l.cancel()
	}
	window(limitSamples, time.Second) // 70 a second: 7 within the target
	if got := l.limit.Load(); got != 7 {
		t.Fatalf("very slow Checks: limit %d, want 7", got)
	}
	windowOver(limitSamples, 3*time.Second, 350*time.Millisecond) // 20 a second: 2 within the target
	if got := l.limit.Load(); got != 4 {
		t.Fatalf("very slow Checks: limit %d, want the minimum 4", got)
	}
	window(limitSamples, time.Millisecond)
	window(limitSamples, time.Millisecond)
	if got := l.limit.Load(); got != 16 {
		t.Fatalf("fast again for two windows: limit %d, want 16", got)
	}
	for range 5 {
		window(limitSamples, time.Millisecond)
	}
	if got := l.limit.Load(); got != 128 {
		t.Fatalf("fast again: limit %d, want the maximum 128", got)
	}
	if n := l.inflight.Load(); n != 0 {
		t.Fatalf("%d in flight after every Check ended", n)
	}
}
