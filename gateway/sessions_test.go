package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/test/mcpserver"
)

// gateway.yaml's sessions: section reaches the config, and negative bounds are refused.
func TestSessionsConfig(t *testing.T) {
	p := t.TempDir() + "/gateway.yaml"
	write := func(s string) { writeFile(t, p, s, 0o644) }
	write("sessions:\n  ttl: 2h\n  max_streams: 500\n  max_streams_per_session: 2\n  max_terminated: 1000\n")
	cfg, err := gateway.LoadConfig(p)
	if err != nil || cfg.Validate() != nil {
		t.Fatal(err, cfg.Validate())
	}
	if s := cfg.Sessions; s.TTL.Hours() != 2 || s.MaxStreams != 500 || s.MaxStreamsPerSession != 2 || s.MaxTerminated != 1000 {
		t.Errorf("sessions %+v", s)
	}
	write("sessions:\n  max_streams: -1\n")
	if cfg, err := gateway.LoadConfig(p); err != nil || cfg.Validate() == nil || !strings.Contains(cfg.Validate().Error(), "sessions:") {
		t.Errorf("a negative bound: %v, %v", err, cfg.Validate())
	}
}

// A client session costs the gateway no upstream session: however many clients initialize,
// open streams, call tools and end their sessions, the gateway's connection to an upstream server
// is the one it opened at the start. And the sessions: bounds reach the transport: streams
// beyond max_streams are answered 503, DELETEs beyond max_terminated 405.
func TestClientSessionsHoldNoUpstreamSessions(t *testing.T) {
	upstream, _ := mcpserver.StartRecordedHTTP(t.Cleanup)
	u, _ := url.Parse(upstream)
	var inits atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	proxy.FlushInterval = -1
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		// A connection starts with initialize, or at 2026-07-28 with server/discover (which is
		// also the health check there, with ids lush-ping-N).
		if bytes.Contains(body, []byte(`"method":"initialize"`)) ||
			bytes.Contains(body, []byte(`"method":"server/discover"`)) && !bytes.Contains(body, []byte(`"id":"lush-ping-`)) {
			inits.Add(1)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(counting.Close)
	h := &harness{t: t, url: counting.URL + u.Path}
	h.dir = project(t, h.url, "")
	h.serve(gateway.Config{Sessions: gateway.SessionsConfig{MaxStreams: 3, MaxStreamsPerSession: 1, MaxTerminated: 2}})
	before := inits.Load()
	if before == 0 {
		t.Fatal("the gateway did not connect to the upstream server")
	}

	alice := map[string]string{"X-API-Key": aliceKey}
	var streams []*http.Response
	t.Cleanup(func() {
		for _, s := range streams {
			s.Body.Close()
		}
	})
	for i := range 12 {
		resp, _ := h.post("assistant", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, alice)
		sid := resp.Header.Get("Mcp-Session-Id")
		if resp.StatusCode != http.StatusOK || sid == "" {
			t.Fatalf("initialize %d: %s", i, resp.Status)
		}
		hdr := map[string]string{"X-API-Key": aliceKey, "Mcp-Session-Id": sid}
		if resp, _ := h.post("assistant", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("initialized %d: %s", i, resp.Status)
		}
		if resp, out := h.post("assistant", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tests__echo","arguments":{"text":"hi"}}}`, hdr); resp.StatusCode != http.StatusOK || out["result"] == nil {
			t.Fatalf("tools/call %d: %s %v", i, resp.Status, out)
		}
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/agents/assistant/mcp", nil)
		req.Header.Set("Accept", "text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		get, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: http.StatusOK, false: http.StatusServiceUnavailable}[i < 3]; get.StatusCode != want {
			get.Body.Close()
			t.Fatalf("GET stream %d with max_streams 3: %s, want %d", i, get.Status, want)
		}
		if get.StatusCode == http.StatusOK {
			streams = append(streams, get)
		} else {
			get.Body.Close()
		}
		if i >= 3 {
			req, _ := http.NewRequest(http.MethodDelete, h.srv.URL+"/agents/assistant/mcp", nil)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			del, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			del.Body.Close()
			if want := map[bool]int{true: http.StatusNoContent, false: http.StatusMethodNotAllowed}[i < 5]; del.StatusCode != want {
				t.Fatalf("DELETE %d with max_terminated 2: %s, want %d", i, del.Status, want)
			}
		}
	}
	if after := inits.Load(); after != before {
		t.Errorf("12 client sessions made the gateway initialize %d upstream sessions", after-before)
	}
}
