package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLoopExitCodes: lushctl loop maps the API's answers onto exit codes scripts can rely on, and
// sends the token. (The API itself, with the real policy, is tested in stack and test/.)
func TestLoopExitCodes(t *testing.T) {
	var gotAuth, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/loops/secret/history":
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"error": {"code": "forbidden", "message": "principal user:dave may not read loop \"secret\"", "decision_id": "d-123"}}`))
		case "/loops/flaky/trigger":
			gotAuth = r.Header.Get("Authorization")
			body, _ := io.ReadAll(r.Body)
			gotBody = string(body)
			w.Write([]byte(`{"decision_id": "d-1", "firing": {"loop": "flaky", "scheduled_at": "2026-11-23T10:00:00Z", "status": "failed", "error": "model quota exhausted", "decision_id": "d-2"}}`))
		case "/loops":
			w.Write([]byte(`{"loops": []}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error": {"code": "not_found", "message": "loop \"nope\" is not defined"}}`))
		}
	}))
	defer srv.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "http://" + ln.Addr().String()
	ln.Close()

	tests := []struct {
		name   string
		args   []string
		code   int
		output string // in stdout or stderr
	}{
		{"denied", []string{"loop", "history", "secret", "--url", srv.URL}, exitFailed, `may not read loop "secret" (decision d-123)`},
		{"unknown loop", []string{"loop", "trigger", "nope", "--url", srv.URL}, exitFailed, "is not defined"},
		{"firing failed", []string{"loop", "trigger", "flaky", "--url", srv.URL, "--instruction", "go", "--token", "tok-1"}, exitFailed, "error: model quota exhausted"},
		{"empty list", []string{"loop", "list", "--url", srv.URL}, exitOK, "(no loops you may read)"},
		{"unreachable", []string{"loop", "list", "--url", closed}, exitRuntime, "is lushctl run or serve running there?"},
		{"bad url", []string{"loop", "list", "--url", "localhost:8080"}, exitUsage, "give the server's address"},
		{"bad limit", []string{"loop", "history", "x", "--limit", "0", "--url", srv.URL}, exitUsage, "--limit"},
		{"bad output", []string{"loop", "list", "-o", "yaml", "--url", srv.URL}, exitUsage, "--output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lushctl(t, "", tt.args...)
			if r.code != tt.code || !strings.Contains(r.stdout+r.stderr, tt.output) {
				t.Errorf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", r.code, tt.code, tt.output, r.stdout, r.stderr)
			}
		})
	}
	if gotAuth != "Bearer tok-1" || !strings.Contains(gotBody, `"instruction":"go"`) || !strings.Contains(gotBody, `"wait":true`) {
		t.Errorf("trigger sent Authorization %q and body %q", gotAuth, gotBody)
	}
}
