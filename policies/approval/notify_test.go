package approval

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/test/syncbuf"
)

func sampleApproval(id string) decisionlog.Approval {
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	return decisionlog.Approval{ID: id, Created: now, Expires: now.Add(time.Hour), Principal: "user:alice", Agent: "ops",
		Tool: "mcp://ops.internal/mcp", ToolName: "restart", Digest: "d",
		Reasons: json.RawMessage(`[{"rule":"lush.approval.risk","message":"restart is classed destructive risk"}]`)}
}

// A new approval request is posted to the webhook: a text line a chat shows, and the approval
// (never the call's arguments).
func TestNotifierPosts(t *testing.T) {
	var mu sync.Mutex
	var got []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		if r.Method != "POST" || r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&m) != nil {
			t.Errorf("%s %s", r.Method, r.Header.Get("Content-Type"))
		}
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	}))
	defer srv.Close()
	var delivered sync.WaitGroup
	delivered.Add(2)
	n := NewNotifier(NotifyConfig{URL: srv.URL + "/hooks/T0/B0/secret-token"}, nil, func(ok bool) {
		if !ok {
			t.Error("a notification was not delivered")
		}
		delivered.Done()
	})
	n.Notify(sampleApproval("ap-1"))
	n.Notify(sampleApproval("ap-2"))
	delivered.Wait()
	n.Close(context.Background())
	n.Notify(sampleApproval("ap-3")) // after Close: ignored, no panic
	if len(got) != 2 {
		t.Fatalf("%d posts", len(got))
	}
	text, _ := got[0]["text"].(string)
	want := "Approval needed: user:alice wants agent ops to call mcp://ops.internal/mcp restart (restart is classed destructive risk). " +
		"Decide before 2026-11-25T11:00:00Z: lushctl approvals show ap-1"
	if text != want {
		t.Errorf("text %q\nwant %q", text, want)
	}
	ap, _ := got[0]["approval"].(map[string]any)
	if ap["id"] != "ap-1" || ap["principal"] != "user:alice" || ap["arguments"] != nil || ap["digest"] != nil {
		t.Errorf("approval %v", ap)
	}
}

// Delivery failures are logged without the URL (it holds the webhook's token), and never block
// the caller.
func TestNotifierFailures(t *testing.T) {
	const secret = "secret-token-0123"
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	defer failing.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "http://" + ln.Addr().String()
	ln.Close()
	for _, base := range []string{failing.URL, closed} {
		logs := &syncbuf.Buffer{}
		results := make(chan bool, 1)
		n := NewNotifier(NotifyConfig{URL: base + "/hooks/" + secret}, slog.New(slog.NewTextHandler(logs, nil)), func(ok bool) { results <- ok })
		n.Notify(sampleApproval("ap-1"))
		if ok := <-results; ok {
			t.Errorf("%s: delivered", base)
		}
		n.Close(context.Background())
		if out := logs.String(); !strings.Contains(out, "notification not delivered") || strings.Contains(out, secret) {
			t.Errorf("%s: logged %q", base, out)
		}
	}

	// A webhook that hangs: Notify returns at once, the queue overflows into drops, and Close
	// ends the send in progress when its context does.
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hanging.Close()
	defer close(release)
	var mu sync.Mutex
	dropped := 0
	n := NewNotifier(NotifyConfig{URL: hanging.URL, Timeout: time.Minute}, nil, func(ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if !ok {
			dropped++
		}
	})
	start := time.Now()
	for range notifyQueue + 10 {
		n.Notify(sampleApproval("ap-x"))
	}
	if time.Since(start) > 5*time.Second {
		t.Error("Notify blocked")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	n.Close(ctx)
	mu.Lock()
	defer mu.Unlock()
	if dropped < 9 {
		t.Errorf("%d notifications dropped, want at least 9", dropped)
	}
}

func TestNotifyConfig(t *testing.T) {
	for _, c := range []NotifyConfig{{URL: "hooks.example.com/x"}, {URL: "ftp://x"}, {URL: "https://x", Timeout: -1}} {
		if err := (Config{Notify: c}).Validate(); err == nil || !strings.HasPrefix(err.Error(), "approvals.notify.") {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if NewNotifier(NotifyConfig{}, nil, nil) != nil {
		t.Error("a notifier without a URL")
	}
	var n *Notifier
	n.Notify(sampleApproval("x")) // a nil notifier does nothing
	n.Close(context.Background())
}
