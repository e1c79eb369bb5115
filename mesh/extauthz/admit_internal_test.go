package extauthz

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
)

// TestOverloaded: a Check the limiter does not let in is not decided: it is denied at once, 503
// UNAVAILABLE, with its JSON-RPC id and the reason; once a Check ends, the next is let in.
func TestOverloaded(t *testing.T) {
	s := &Server{opts: Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, admission: newAdmission()}
	s.admission.limit.Store(2)
	s.admission.admit()
	s.admission.admit() // two Checks in flight: as many as the limit
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
		Method: "POST", Path: "/agents/assistant/tools/notes/mcp",
		RawBody: []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search"}}`)}}}}
	resp, err := s.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	d := resp.GetDeniedResponse()
	if resp.GetOkResponse() != nil || d == nil || d.GetStatus().GetCode() != http.StatusServiceUnavailable || resp.GetStatus().GetCode() != int32(code.Code_UNAVAILABLE) {
		t.Fatalf("a Check over the limit is not denied with 503 UNAVAILABLE: %v", resp)
	}
	var body struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(d.GetBody()), &body); err != nil || string(body.ID) != "7" || !strings.Contains(body.Error.Message, "deciding as many requests as it can (2 at once now)") {
		t.Fatalf("the denial of a Check over the limit does not name its request and reason: %s (%v)", d.GetBody(), err)
	}
	if n := s.admission.shed.Load(); n != 1 {
		t.Fatalf("shed count %d, want 1", n)
	}
	s.admission.done(time.Now(), time.Millisecond) // one ends: the next is let in, and decided
	resp, _ = s.Check(context.Background(), req)
	if !strings.Contains(resp.GetDeniedResponse().GetBody(), "no build is deployed") {
		t.Fatalf("a Check under the limit was not decided: %v", resp)
	}
	if n := s.admission.inflight.Load(); n != 1 {
		t.Fatalf("%d Checks counted in flight, want the 1 that did not end", n)
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
