package mcphttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// pingHandler answers every request with an empty result.
type pingHandler struct{}

func (pingHandler) Serve(context.Context, *Request) (any, error) { return struct{}{}, nil }
func (pingHandler) Notification(context.Context, *Request)       {}

// BenchmarkSessionRequest is the transport's part of one request in a session: the session id
// verified (from the cache of verified ids, as on every request after a session's first), the
// message read and answered as JSON.
func BenchmarkSessionRequest(b *testing.B) {
	sessions, _ := NewSessions([]byte(strings.Repeat("k", 32)), 0)
	srv := NewServer(Config{Handler: pingHandler{}, Sessions: sessions, Principal: func(*http.Request) string { return "user:alice" }})
	defer srv.Close()
	request := func(session, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "http://localhost/mcp", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json")
		if session != "" {
			r.Header.Set(HeaderSession, session)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	sid := request("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`).Header().Get(HeaderSession)
	if sid == "" {
		b.Fatal("no session")
	}
	b.ReportAllocs()
	for b.Loop() {
		if w := request(sid, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); w.Code != http.StatusOK {
			b.Fatalf("ping: %d %s", w.Code, w.Body)
		}
	}
}
