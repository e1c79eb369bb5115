// Package localtool runs local tools: executables in a project's tools/<name>/ (or a skill's)
// that read one JSON request on stdin and write one JSON result on stdout. docs/projects.md
// ("Local tools") is the protocol's reference.
//
// Each call is one process, started in the tool's directory with a minimal environment (no
// credentials), in its own process group so a timeout kills it and everything it started.
package localtool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/upstream"
)

// Limits of one call.
const (
	DefaultTimeout = 30 * time.Second
	MaxOutput      = 1 << 20  // stdout
	maxStderr      = 16 << 10 // kept for error messages
)

// Request is what a tool reads on stdin.
type Request struct {
	Tool      string          `json:"tool"` // tools/<name>
	Arguments json.RawMessage `json:"arguments"`
	Call      Call            `json:"call"`
}

// Call identifies a call, for a tool's own logs.
type Call struct {
	ID        string `json:"id"`
	Agent     string `json:"agent"`
	Principal string `json:"principal"`
}

// Run runs a local tool and returns an MCP CallToolResult (raw JSON). A tool that fails — a
// non-zero exit, a timeout, output that is too long — gives a result with isError set, which the
// model can read; the error return is for tools that cannot be started at all.
func Run(ctx context.Context, projectDir string, t *manifest.Tool, req Request) (json.RawMessage, error) {
	if t.Local == nil || len(t.Local.Command) == 0 {
		return nil, fmt.Errorf("run %s: not a local tool", t.Ref)
	}
	timeout := DefaultTimeout
	if t.TimeoutMS > 0 {
		timeout = time.Duration(t.TimeoutMS) * time.Millisecond
	}
	dir := filepath.Join(projectDir, filepath.FromSlash(t.Local.Dir))
	prog := t.Local.Command[0]
	if strings.Contains(prog, "/") {
		prog = filepath.Join(dir, filepath.FromSlash(prog))
	}
	if len(req.Arguments) == 0 {
		req.Arguments = json.RawMessage("{}")
	}
	stdin, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", t.Ref, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, t.Local.Command[1:]...)
	cmd.Dir = dir
	cmd.Env = upstream.MinimalEnv()
	cmd.Stdin = bytes.NewReader(stdin)
	stdout := &capped{max: MaxOutput}
	stderr := &capped{max: maxStderr, tail: true}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	start := time.Now()
	err = cmd.Run()
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return errorResult(fmt.Sprintf("%s timed out after %s and was stopped", t.Ref, timeout)), nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			msg := fmt.Sprintf("%s exited with status %d after %s", t.Ref, exit.ExitCode(), time.Since(start).Round(time.Millisecond))
			if tail := strings.TrimSpace(stderr.String()); tail != "" {
				msg += ": " + tail
			}
			return errorResult(msg), nil
		}
		return nil, fmt.Errorf("run %s: %w", t.Ref, err)
	case stdout.truncated:
		return errorResult(fmt.Sprintf("%s wrote more than %d bytes on stdout", t.Ref, MaxOutput)), nil
	}
	return result(stdout.Bytes()), nil
}

// result turns a tool's stdout into a CallToolResult: a JSON object with content,
// structuredContent or isError passes through; anything else becomes one text content.
func result(out []byte) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(out), &obj) == nil {
		_, hasContent := obj["content"]
		_, hasStructured := obj["structuredContent"]
		if hasContent || hasStructured {
			if !hasContent {
				obj["content"] = json.RawMessage("[]")
			}
			b, _ := json.Marshal(obj)
			return b
		}
	}
	b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": strings.TrimRight(string(out), "\n")}}})
	return b
}

func errorResult(msg string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"isError": true, "content": []map[string]string{{"type": "text", "text": msg}}})
	return b
}

// capped is a writer that keeps at most max bytes: the first ones, or with tail the last ones.
// (It does not embed bytes.Buffer: io.Copy would use the buffer's ReadFrom and bypass the cap.)
type capped struct {
	buf       bytes.Buffer
	max       int
	tail      bool
	truncated bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if c.tail {
		c.buf.Write(p)
		if over := c.buf.Len() - c.max; over > 0 {
			c.buf.Next(over)
			c.truncated = true
		}
		return n, nil
	}
	if room := c.max - c.buf.Len(); room < len(p) {
		p = p[:max(room, 0)]
		c.truncated = true
	}
	c.buf.Write(p)
	return n, nil
}

func (c *capped) Bytes() []byte  { return c.buf.Bytes() }
func (c *capped) String() string { return c.buf.String() }
