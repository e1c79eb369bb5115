package upstream

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/internal/manifest"
)

// ClientInfo names Lush to the servers it connects to.
var ClientInfo = mcp.Implementation{Name: "lush", Version: "dev"}

// ProtocolVersion is the MCP version Lush asks upstream servers for. The gateway proxies with
// its semantics (sessions, ping, notifications/cancelled); servers may answer with an older one.
const ProtocolVersion = "2025-11-25"

// httpTransport is shared by every connection to remote servers: keep-alive connections are
// pooled per host and reused (the default transport keeps only 2 idle connections per host, so
// concurrent calls to one server would open and close connections constantly).
var httpTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	return t
}()

// DialOptions tune Dial.
type DialOptions struct {
	Resolver *Resolver
	Headers  map[string]string // for remote servers
	Env      []string          // KEY=value added to a stdio server's environment
	Stderr   io.Writer         // a stdio server's stderr; discarded when nil
	Timeout  time.Duration     // per-request timeout for remote servers
}

// Dial connects to the server t, performs the MCP initialize handshake and returns the client.
// The caller closes it; for a stdio server that stops the process and its children.
func Dial(ctx context.Context, t *manifest.Tool, o DialOptions) (*client.Client, *mcp.InitializeResult, error) {
	var c *client.Client
	var err error
	switch {
	case t.Stdio != nil:
		cmd, cerr := o.Resolver.Command(t.Stdio)
		if cerr != nil {
			return nil, nil, cerr
		}
		cmd.Env = append(cmd.Env, o.Env...)
		opts := []transport.StdioOption{transport.WithCommandFunc(commandFunc(cmd))}
		if o.Stderr != nil {
			opts = append(opts, transport.WithCommandStderrWriter(o.Stderr))
		}
		c, err = client.NewStdioMCPClientWithOptions(cmd.Path, nil, cmd.Args, opts...)
	case t.Remote != nil && t.Remote.Transport == "sse":
		opts := []transport.ClientOption{transport.WithHeaders(o.Headers), transport.WithHTTPClient(&http.Client{Transport: httpTransport})}
		if o.Timeout > 0 {
			opts = append(opts, transport.WithResponseTimeout(o.Timeout))
		}
		c, err = client.NewSSEMCPClient(t.Remote.URL, opts...)
	case t.Remote != nil:
		opts := []transport.StreamableHTTPCOption{transport.WithHTTPHeaders(o.Headers), transport.WithHTTPBasicClient(&http.Client{Transport: httpTransport})}
		if o.Timeout > 0 {
			opts = append(opts, transport.WithHTTPTimeout(o.Timeout))
		}
		c, err = client.NewStreamableHttpClient(t.Remote.URL, opts...)
	default:
		return nil, nil, fmt.Errorf("%s is not an MCP server", t.Ref)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", t.Ref, err)
	}
	if err := start(ctx, c, t.Remote != nil && t.Remote.Transport == "sse"); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("connect %s: %w", t.Ref, err)
	}
	init, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ProtocolVersion: ProtocolVersion,
		ClientInfo:      ClientInfo,
	}})
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("initialize %s: %w", t.Ref, err)
	}
	return c, init, nil
}

// start starts c's transport within ctx. An SSE transport's event stream lives in the context
// it is started with, so it is started in one that ctx's end does not cancel (Close ends it), and
// the handshake is abandoned by closing the client if ctx ends first.
func start(ctx context.Context, c *client.Client, sse bool) error {
	if !sse {
		return c.Start(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- c.Start(context.WithoutCancel(ctx)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		c.Close()
		<-done
		return ctx.Err()
	}
}

// commandFunc builds the exec.Cmd for a stdio server: its own process group (so closing it
// stops every child, npx's included), the project directory, and only the environment Lush gives
// it.
func commandFunc(c Command) transport.CommandFunc {
	return func(ctx context.Context, _ string, _ []string, _ []string) (*exec.Cmd, error) {
		cmd := exec.CommandContext(ctx, c.Path, c.Args...)
		cmd.Dir = c.Dir
		cmd.Env = c.Env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 3 * time.Second
		return cmd, nil
	}
}

// ListAllTools pages through tools/list.
func ListAllTools(ctx context.Context, c *client.Client) ([]mcp.Tool, error) {
	var out []mcp.Tool
	req := mcp.ListToolsRequest{}
	for range 1000 {
		res, err := c.ListTools(ctx, req)
		if err != nil {
			return nil, err
		}
		out = append(out, res.Tools...)
		if res.NextCursor == "" {
			return out, nil
		}
		req.Params.Cursor = res.NextCursor
	}
	return nil, fmt.Errorf("tools/list returned more than 1000 pages")
}
