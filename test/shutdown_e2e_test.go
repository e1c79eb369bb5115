package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// stopBound is how soon after SIGTERM a server with clients connected must have exited: well
// under the 25 s shutdown grace, which a stop held up by an open stream waits out whole.
const stopBound = 15 * time.Second

// slowToolProject writes a project whose agent has one local tool, tools/slow: it says it has
// started (creating the file started) and answers once the file release exists (both in gates,
// outside the project so that lushctl run's watcher does not see them). alice authenticates with
// an API key.
func slowToolProject(t *testing.T, gates string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"lush.yaml": "project: shutdown-e2e\ntool_grants:\n  - tool: tools/slow\n    grants:\n      - {principal: group:eng, access: read}\n",
		"agents/assistant/spec.yaml": "name: assistant\nmodel: gemini-2.5-flash\ndescription: Waits.\ntools:\n  - name: tools/slow\n    access: read\n" +
			"acl:\n  - principal: group:eng\n    role: execute\n",
		"tools/slow/tool.yaml":   "description: Answers once released.\ncommand: ./run\naccess: read\n",
		"scripts/assistant.yaml": "turns:\n  - text: \"nothing to do\"\n",
		"gateway.yaml":           "auth:\n  api_keys:\n    - {name: alice, sha256: " + sha256hex("alice-key-0123456789") + ", principal: user:alice, groups: [group:eng]}\n",
	}
	// The tool waits for release for at most 60 s, so that it never outlives a failed test.
	files["tools/slow/run"] = fmt.Sprintf("#!/bin/sh\ntouch %[1]s/started\ni=0\nwhile [ ! -e %[1]s/release ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\necho released\n", gates)
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startServing starts a lushctl command that serves (gateway, run or serve) on the project with
// alice's API keys, and returns its base URL once it serves.
func startServing(t *testing.T, command, dir string) (string, *proc) {
	t.Helper()
	config := filepath.Join(dir, "gateway.yaml")
	if command == "serve" {
		out, err := exec.Command(lushctlBin, "build", "-q", "--offline", dir).Output()
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		hash := strings.TrimSpace(string(out))
		port := freePort(t)
		p := startProc(t, []string{fmt.Sprintf("PORT=%d", port), "LUSH_LISTEN_HOST=127.0.0.1", "LUSH_PROJECT=" + dir, "LUSH_BUILD=" + hash[:12],
			"LUSH_CONFIG=" + config, "LUSH_MODEL_PROVIDER=scripted", "TRACE_BACKEND=none"}, lushctlBin, "serve")
		waitFor(t, p, "lush: build "+hash[:12], 60*time.Second)
		return fmt.Sprintf("http://127.0.0.1:%d", port), p
	}
	ready := filepath.Join(t.TempDir(), "ready")
	args := []string{command, dir, "--config", config, "--listen", "127.0.0.1:0", "--ready-file", ready}
	if command == "run" {
		args = append(args, "--provider", "scripted")
	}
	p := startProc(t, nil, lushctlBin, args...)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if addr, err := os.ReadFile(ready); err == nil && len(addr) > 0 {
			return "http://" + string(addr), p
		}
		select {
		case <-p.done:
			t.Fatalf("lushctl %s exited:\n%s", command, p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("lushctl %s did not start:\n%s", command, p.out.String())
	return "", nil
}

// openStream opens an MCP stream as alice and returns its body once the server has started it:
// the standalone GET stream of a new streamable HTTP session at an /mcp URL, or a legacy SSE
// stream at an /sse URL.
func openStream(t *testing.T, url string) io.ReadCloser {
	t.Helper()
	do := func(req *http.Request) *http.Response {
		req.Header.Set("X-API-Key", "alice-key-0123456789")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	get, _ := http.NewRequest(http.MethodGet, url, nil)
	get.Header.Set("Accept", "text/event-stream")
	if strings.HasSuffix(url, "/mcp") {
		init, _ := http.NewRequest(http.MethodPost, url,
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`))
		init.Header.Set("Content-Type", "application/json")
		init.Header.Set("Accept", "application/json, text/event-stream")
		resp := do(init)
		resp.Body.Close()
		get.Header.Set("Mcp-Session-Id", resp.Header.Get("Mcp-Session-Id"))
	}
	resp := do(get)
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp.Body
}

// streamEnd reads a stream until it ends, and fails if it errs or is still open at deadline.
func streamEnd(body io.ReadCloser, deadline time.Time) error {
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, body); ended <- err }() // ends at the latest when the test closes body
	select {
	case err := <-ended:
		if err != nil {
			return fmt.Errorf("did not end cleanly: %w", err)
		}
		return nil
	case <-time.After(time.Until(deadline)):
		return fmt.Errorf("still open %s after SIGTERM", stopBound)
	}
}

// waitFile waits until a file exists.
func waitFile(t *testing.T, path string, p *proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within 30s:\n%s", path, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SIGTERM with clients connected: the MCP streams they hold open (the standalone GET stream of
// streamable HTTP, which the TypeScript SDK's client keeps open after initialize, and the legacy
// SSE stream) end at once; the tool call in flight still completes, its answer reaches the
// client and its completion is in the decision log; then lushctl exits 0, well before the
// shutdown grace. (The server once waited the whole grace for the streams.)
func TestShutdownWithClientsConnected(t *testing.T) {
	tests := []struct {
		command string
		gateway string   // the path prefix of the gateway's endpoints
		streams []string // the streams clients hold open, under the base URL
	}{
		{"gateway", "/agents/assistant", []string{"/agents/assistant/mcp", "/agents/assistant/sse"}},
		{"run", "/gateway/agents/assistant", []string{"/gateway/agents/assistant/mcp", "/gateway/agents/assistant/sse", "/agents/assistant/mcp"}},
		{"serve", "/gateway/agents/assistant", []string{"/gateway/agents/assistant/mcp", "/gateway/agents/assistant/sse", "/agents/assistant/mcp"}},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			gates := t.TempDir()
			release := filepath.Join(gates, "release")
			t.Cleanup(func() { os.WriteFile(release, nil, 0o644) }) // a failed test leaves no tool waiting
			dir := slowToolProject(t, gates)
			base, p := startServing(t, tt.command, dir)
			var streams []io.ReadCloser
			for _, path := range tt.streams {
				streams = append(streams, openStream(t, base+path))
			}
			c := goClient(t, base+tt.gateway+"/mcp", transport.WithHTTPHeaders(map[string]string{"X-API-Key": "alice-key-0123456789"}))
			ctx := context.Background()
			type answer struct {
				res *mcp.CallToolResult
				err error
			}
			answered := make(chan answer, 1)
			go func() {
				res, err := c.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "slow"}})
				answered <- answer{res, err}
			}()
			waitFile(t, filepath.Join(gates, "started"), p)

			p.cmd.Process.Signal(syscall.SIGTERM)
			deadline := time.Now().Add(stopBound)
			waitFor(t, p, "shutting down", stopBound)
			// The streams end while the call is still running.
			for i, s := range streams {
				if err := streamEnd(s, deadline); err != nil {
					t.Fatalf("stream %s: %v\n%s", tt.streams[i], err, p.out.String())
				}
			}
			if err := os.WriteFile(release, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var a answer
			select {
			case a = <-answered:
			case <-time.After(20 * time.Second):
				t.Fatalf("the call in flight got no answer:\n%s", p.out.String())
			}
			if a.err != nil || a.res.IsError || len(a.res.Content) == 0 || !strings.Contains(a.res.Content[0].(mcp.TextContent).Text, "released") {
				t.Fatalf("the call in flight: %+v, %v", a.res, a.err)
			}
			select {
			case <-p.done:
			case <-time.After(time.Until(deadline)):
				t.Fatalf("lushctl %s did not exit within %s of SIGTERM:\n%s", tt.command, stopBound, p.out.String())
			}
			if code := p.cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("lushctl %s exited %d, want 0:\n%s", tt.command, code, p.out.String())
			}

			decision, _ := a.res.Meta.AdditionalFields["dev.lush/decision"].(map[string]any)
			id, _ := decision["id"].(string)
			q, err := exec.Command(lushctlBin, "audit", "query", "--log", filepath.Join(dir, ".lush", "decisions.db"), "--decision-id", id, "-o", "json").Output()
			if err != nil || id == "" || !strings.Contains(string(q), `"status":"ok"`) {
				t.Errorf("the completion of decision %q: %v\n%s", id, err, q)
			}
		})
	}
}
