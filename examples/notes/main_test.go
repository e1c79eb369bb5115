package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/test/syncbuf"
)

const aliceToken = "alice-secret-token-0001"

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8931", true},
		{"127.0.0.2:0", true},
		{"[::1]:8931", true},
		{"localhost:8931", true},
		{"0.0.0.0:8931", false},
		{":8931", false},
		{"[::]:8931", false},
		{"192.168.1.5:8931", false},
		{"notes.example.com:8931", false},
		{"127.0.0.1", false}, // no port: not a listen address
	}
	for _, tt := range tests {
		if got := isLoopback(tt.addr); got != tt.want {
			t.Errorf("isLoopback(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	tokens := writeFile(t, dir, "tokens", "alice "+aliceToken+"\n")
	badTokens := writeFile(t, dir, "bad-tokens", "# accounts\nalice "+aliceToken+" oops\n")
	badSeed := writeFile(t, dir, "seed.json", `["not", "a", "map"]`)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no tokens file", []string{}, "--tokens-file is required"},
		{"remote address", []string{"--tokens-file", tokens, "--addr", "0.0.0.0:0"}, "pass --allow-remote"},
		{"every interface", []string{"--tokens-file", tokens, "--addr", ":0"}, "is not loopback"},
		{"stray argument", []string{"--tokens-file", tokens, "serve"}, "unexpected arguments"},
		{"tokens file with an error", []string{"--tokens-file", badTokens}, badTokens + ":2: want 2 fields"},
		{"seed not a map", []string{"--tokens-file", tokens, "--seed", badSeed}, "seed file " + badSeed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
			}
			if strings.Contains(err.Error()+stderr.String(), aliceToken) {
				t.Errorf("the token appears in the error or output: %v\n%s", err, stderr.String())
			}
		})
	}
}

// TestBinary builds the command, serves on a free port, calls it as alice and stops it with
// SIGTERM while an event stream is open.
func TestBinary(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build with")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "notes")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tokens := writeFile(t, dir, "tokens", "alice "+aliceToken+"\nbob bob-secret-token-0002\n")
	seed := writeFile(t, dir, "seed.json", `{"alice": ["from the seed"]}`)

	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--tokens-file", tokens, "--seed", seed)
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { // if the test failed before stopping it
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	startLine := regexp.MustCompile(`^notes: serving (http://127\.0\.0\.1:\d+/mcp) \(2 accounts\)\n`)
	var url string
	for deadline := time.Now().Add(10 * time.Second); url == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := startLine.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		t.Fatalf("no start line; stderr:\n%s", stderr.String())
	}

	resp, err := http.Post(url, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without a token: status %d, want 401", resp.StatusCode)
	}
	if got := searchAll(t, url, aliceToken); got != "notes of alice matching \"\":\n- from the seed" {
		t.Errorf("search_notes as alice = %q", got)
	}

	// An open event stream (GET /mcp) must not hold up the shutdown.
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Accept", "text/event-stream")
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET /mcp: status %d, want 200", stream.StatusCode)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", waitErr, stderr.String())
		}
	case <-time.After(4 * time.Second): // less than its 5s shutdown timeout
		t.Fatalf("still running 4s after SIGTERM; stderr:\n%s", stderr.String())
	}
	if out := stderr.String(); !strings.HasSuffix(out, "notes: stopped\n") || strings.Contains(out, aliceToken) {
		t.Errorf("stderr does not end with the stop line, or holds a token:\n%s", out)
	}
}

// searchAll calls search_notes with no query as the holder of token.
func searchAll(t *testing.T, url, token string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.NewStreamableHttpClient(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
		t.Fatal(err)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "search_notes"
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("search_notes returned %d contents", len(res.Content))
	}
	text, ok := mcp.AsTextContent(res.Content[0])
	if !ok {
		t.Fatalf("search_notes returned %T", res.Content[0])
	}
	return text.Text
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
