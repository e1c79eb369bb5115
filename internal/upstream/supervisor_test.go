package upstream_test

import (
	"context"
	"encoding/json"
	"errors"

	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/test/mcpserver"
)

func stdioTool(t *testing.T) (*manifest.Tool, upstream.Options) {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "server"), mcpserver.StdioScript(), 0o755)
	tool := &manifest.Tool{Ref: "mcp://stdio/server", Kind: "mcp", Stdio: &manifest.Stdio{Launcher: "stdio", Package: "server"}}
	return tool, upstream.Options{Dial: upstream.DialOptions{Resolver: &upstream.Resolver{ProjectDir: dir}},
		BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, HealthInterval: time.Second}
}

func echo(t *testing.T, s *upstream.Server, text string) (string, error) {
	t.Helper()
	params, _ := json.Marshal(map[string]any{"name": "echo", "arguments": map[string]any{"text": text}})
	raw, err := s.Request(context.Background(), "tools/call", params, "", nil)
	if err != nil {
		return "", err
	}
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	json.Unmarshal(raw, &res)
	if len(res.Content) == 0 {
		return "", errors.New("no content")
	}
	return res.Content[0].Text, nil
}

func TestSupervisorRestartsAfterCrash(t *testing.T) {
	tool, opts := stdioTool(t)
	var restarts atomic.Int32
	opts.OnRestart = func(string) { restarts.Add(1) }
	s := upstream.Start(tool, opts)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(s.Lists().Tools); got != len(mcpserver.ToolNames) {
		t.Fatalf("lists: %d tools", got)
	}
	if text, err := echo(t, s, "hi"); err != nil || text != "hi" {
		t.Fatalf("echo = %q, %v", text, err)
	}
	// The server dies in the middle of a call: the caller gets a clear error, not a hang.
	_, err := s.Request(ctx, "tools/call", json.RawMessage(`{"name":"crash"}`), "", nil)
	var unavailable *upstream.ErrUnavailable
	if !errors.As(err, &unavailable) {
		t.Fatalf("crash mid-call returned %v", err)
	}
	// It comes back by itself, and serves again.
	deadline := time.Now().Add(15 * time.Second)
	for restarts.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.WaitUp(ctx); err != nil || restarts.Load() != 1 {
		t.Fatalf("not restarted (restarts=%d): %v", restarts.Load(), err)
	}
	if text, err := echo(t, s, "again"); err != nil || text != "again" {
		t.Errorf("after restart echo = %q, %v", text, err)
	}
	if st := s.State(); !st.Up || st.Restarts != 1 {
		t.Errorf("state = %+v", st)
	}
}

func TestSupervisorDownFailsFast(t *testing.T) {
	dir := t.TempDir()
	tool := &manifest.Tool{Ref: "mcp://stdio/missing", Kind: "mcp", Stdio: &manifest.Stdio{Launcher: "stdio", Package: "missing"}}
	s := upstream.Start(tool, upstream.Options{Dial: upstream.DialOptions{Resolver: &upstream.Resolver{ProjectDir: dir}},
		BackoffInitial: 50 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitSettled(ctx); err != nil { // its first start has failed
		t.Fatal(err)
	}
	// A request does not wait for a server that is down to come up (this one never will: it
	// would end with the context's deadline); it is answered at once with why.
	_, err := s.Request(ctx, "tools/list", nil, "", nil)
	var unavailable *upstream.ErrUnavailable
	if !errors.As(err, &unavailable) || !strings.Contains(err.Error(), "not in the project and not on PATH") {
		t.Fatalf("request to a missing server: %v", err)
	}
}

func TestSupervisorProgressAndTimeout(t *testing.T) {
	tool, opts := stdioTool(t)
	opts.CallTimeout = 300 * time.Millisecond
	s := upstream.Start(tool, opts)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var progress []string
	notify := func(method string, params json.RawMessage) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, method+" "+string(params))
	}
	params := json.RawMessage(`{"name":"sleep","arguments":{"ms":100},"_meta":{"progressToken":"tok-1"}}`)
	if _, err := s.Request(ctx, "tools/call", params, "tok-1", notify); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(progress) != 4 || !strings.Contains(progress[3], `"progress":4`) {
		t.Errorf("progress = %v", progress)
	}
	mu.Unlock()
	// A call longer than the timeout fails with a timeout, and the server stays up.
	_, err := s.Request(ctx, "tools/call", json.RawMessage(`{"name":"sleep","arguments":{"ms":2000}}`), "", nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer tools/call within 300ms") {
		t.Fatalf("slow call: %v", err)
	}
	if _, err := echo(t, s, "still up"); err != nil {
		t.Errorf("after a timeout: %v", err)
	}
}
