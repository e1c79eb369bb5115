package upstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/upstream"
)

// heldPings is a server's front that holds one health check once armed: the check (ping, or
// server/discover at 2026-07-28) is never answered, and held receives it. Every later check
// is answered, and next receives it.
type heldPings struct {
	armed      atomic.Bool
	held, next chan struct{}
}

func (h *heldPings) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			r.Body = io.NopCloser(bytes.NewReader(body))
			var m struct {
				Method string `json:"method"`
			}
			json.Unmarshal(body, &m)
			if m.Method == "ping" || m.Method == "server/discover" {
				if h.armed.CompareAndSwap(true, false) {
					h.held <- struct{}{}
					<-r.Context().Done() // silence, until the client gives up
					return
				}
				select {
				case h.next <- struct{}{}:
				default:
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// TestBusyServerIsNotLost: a health check that gets no answer in time ends the connection (and
// the calls in flight on it) only when the server answered nothing else meanwhile. A server that
// answers calls while its health check waits is busy, not lost: it is not restarted, and its
// calls go on. (Under a heavily loaded machine, the conformance fixture answered a check late;
// the restart cut an elicitation call short, and its client was never asked.)
func TestBusyServerIsNotLost(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		busy          bool // a call is answered while the check waits
		wantRestarts  int
	}{
		{"2026-07-28 busy", "", true, 0},
		{"2026-07-28 silent", "", false, 1},
		{"2025-11-25 busy", "2025-11-25", true, 0},
		{"2025-11-25 silent", "2025-11-25", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &heldPings{held: make(chan struct{}), next: make(chan struct{}, 1)}
			srv := httptest.NewServer(h.wrap(server.NewStreamableHTTPServer(askServer())))
			t.Cleanup(func() {
				srv.CloseClientConnections()
				srv.Close()
			})
			tool := &manifest.Tool{Ref: "mcp://busy.internal/mcp", Kind: "mcp", Remote: &manifest.Remote{URL: srv.URL + "/mcp"}}
			s := upstream.Start(tool, upstream.Options{Dial: upstream.DialOptions{ProtocolVersion: tc.version},
				HealthInterval: 10 * time.Millisecond, PingTimeout: time.Second,
				BackoffInitial: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond})
			t.Cleanup(s.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.WaitUp(ctx); err != nil {
				t.Fatal(err)
			}

			h.armed.Store(true)
			<-h.held // the check waits for an answer that does not come
			select { // a check answered before it is not the next one
			case <-h.next:
			default:
			}
			if tc.busy {
				if _, err := callText(ctx, s, "client", nil); err != nil {
					t.Fatalf("a call while the check waits: %v", err)
				}
			}
			// The next check: on the same connection when the server was judged alive, else
			// the first request of the new connection (Restarts counts before it is sent).
			select {
			case <-h.next:
			case <-ctx.Done():
				t.Fatal("no health check after the held one")
			}
			if got := s.State().Restarts; got != tc.wantRestarts {
				t.Errorf("restarts = %d, want %d (last error %q)", got, tc.wantRestarts, s.State().LastError)
			}
		})
	}
}
