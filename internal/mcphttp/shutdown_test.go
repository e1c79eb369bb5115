package mcphttp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// gateHandler answers "wait" once released (or its context ends), and everything else at once.
type gateHandler struct {
	started chan struct{} // one value per "wait" request that began
	release chan struct{} // closed to let "wait" requests answer
}

func (h gateHandler) Serve(ctx context.Context, r *Request) (any, error) {
	if r.Method != "wait" {
		return map[string]any{}, nil
	}
	h.started <- struct{}{}
	select {
	case <-h.release:
		return map[string]any{"waited": true}, nil
	case <-ctx.Done():
		return nil, Errorf(CodeInternalError, "cancelled")
	}
}
func (gateHandler) Notification(context.Context, *Request) {}

// testClient talks to a test server as an MCP client on loopback.
type testClient struct {
	t   *testing.T
	url string
}

func (c testClient) do(method, path, session, body string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Host = "localhost"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set(HeaderSession, session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// initialize opens a streamable HTTP session and returns its id.
func (c testClient) initialize() string {
	c.t.Helper()
	resp := c.do(http.MethodPost, "/mcp", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`)
	resp.Body.Close()
	sid := resp.Header.Get(HeaderSession)
	if sid == "" {
		c.t.Fatalf("initialize: %s, no session id", resp.Status)
	}
	return sid
}

// sseEvents reads a stream's events ("name data") as they come, until it ends or the test does.
func sseEvents(t *testing.T, body io.ReadCloser) <-chan string {
	events, done := make(chan string), make(chan struct{})
	t.Cleanup(func() { close(done); body.Close() })
	go func() {
		defer close(events)
		sc := bufio.NewScanner(body)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				select {
				case events <- name + " " + strings.TrimPrefix(line, "data: "):
				case <-done:
					return
				}
			}
		}
	}()
	return events
}

// next returns a stream's next event, or "" when the stream ended.
func next(t *testing.T, events <-chan string) string {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("no event and no end of the stream within 20s")
		return ""
	}
}

// Shutdown ends the streams that carry only notifications at once, and a legacy SSE stream once
// the request posted for it has answered on it (or, when the context ends first, once that
// request is cancelled); new streams and legacy requests are refused meanwhile.
func TestShutdownEndsStreams(t *testing.T) {
	tests := []struct {
		name    string
		cancel  bool   // the context ends before the legacy request may answer
		answer  string // in the answer on the legacy stream before it ends ("": an answer is optional)
		wantErr error
	}{
		{name: "requests answer", answer: `"waited":true`},
		{name: "the context ends first", cancel: true, wantErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := gateHandler{started: make(chan struct{}, 1), release: make(chan struct{})}
			sessions, _ := NewSessions([]byte(strings.Repeat("k", 32)), 0)
			srv := NewServer(Config{Handler: h, Sessions: sessions, MessagesPath: func(string) string { return "/message" }})
			mux := http.NewServeMux()
			mux.Handle("/mcp", srv)
			mux.HandleFunc("/sse", srv.LegacySSE)
			mux.HandleFunc("/message", srv.LegacyMessages)
			ts := httptest.NewServer(mux)
			defer ts.Close()
			defer srv.Close()
			c := testClient{t: t, url: ts.URL}

			sid := c.initialize()
			get := c.do(http.MethodGet, "/mcp", sid, "")
			if get.StatusCode != http.StatusOK {
				t.Fatalf("GET: %s", get.Status)
			}
			standalone := sseEvents(t, get.Body)
			sse := c.do(http.MethodGet, "/sse", "", "")
			legacy := sseEvents(t, sse.Body)
			endpoint, ok := strings.CutPrefix(next(t, legacy), "endpoint ")
			if !ok {
				t.Fatal("the legacy stream did not name its endpoint")
			}
			resp := c.do(http.MethodPost, endpoint, "", `{"jsonrpc":"2.0","id":7,"method":"wait"}`)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("legacy POST: %s", resp.Status)
			}
			<-h.started

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			shut := make(chan error, 1)
			go func() { shut <- srv.Shutdown(ctx) }()
			if e := next(t, standalone); e != "" {
				t.Fatalf("the standalone stream sent %q; want its end", e)
			}
			for _, r := range []struct{ method, path, session, body string }{
				{http.MethodGet, "/mcp", sid, ""},
				{http.MethodGet, "/sse", "", ""},
				{http.MethodPost, endpoint, "", `{"jsonrpc":"2.0","id":8,"method":"wait"}`},
			} {
				resp := c.do(r.method, r.path, r.session, r.body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable {
					t.Errorf("%s %s while shutting down: %s, want 503", r.method, r.path, resp.Status)
				}
			}
			select {
			case err := <-shut:
				t.Fatalf("Shutdown returned %v with a legacy request running", err)
			default:
			}

			if tt.cancel {
				cancel()
			} else {
				close(h.release)
			}
			e := next(t, legacy)
			if tt.answer != "" && (!strings.Contains(e, `"id":7`) || !strings.Contains(e, tt.answer)) {
				t.Errorf("the legacy stream sent %q; want the answer to request 7 with %s", e, tt.answer)
			}
			for e != "" {
				if !strings.Contains(e, `"id":7`) {
					t.Errorf("the legacy stream sent %q; want the answer to request 7 or its end", e)
				}
				e = next(t, legacy)
			}
			if err := <-shut; !errors.Is(err, tt.wantErr) {
				t.Errorf("Shutdown = %v, want %v", err, tt.wantErr)
			}
		})
	}
}
