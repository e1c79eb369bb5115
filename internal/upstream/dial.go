package upstream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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

// ProtocolVersion is the newest MCP version negotiated through the initialize handshake: what Lush
// asks of a server that does not answer server/discover (servers may answer with an older one).
const ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION

// LatestProtocolVersion is the MCP version Lush asks upstream servers for first, with
// server/discover; a server that does not know it gets the handshake at ProtocolVersion.
const LatestProtocolVersion = mcp.LATEST_PROTOCOL_VERSION

// discardLogger silences mcp-go's transport logging (a server without a GET stream, retries),
// which would otherwise go to the process's default logger; failures reach Lush as errors.
var discardLogger = slog.New(slog.DiscardHandler)

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
	// ProtocolVersion pins the MCP version to ask for; empty asks for LatestProtocolVersion and
	// falls back to the handshake. A version before 2026-07-28 skips server/discover.
	ProtocolVersion string
}

// Dial connects to the server t, negotiates the protocol version (server/discover for 2026-07-28,
// else the initialize handshake) and returns the client, with the result of the negotiation
// (ProtocolVersion is the version in effect). Lush declares ForwardedCapabilities. The caller
// closes the client; for a stdio server that stops the process and its children.
//
// A streamable HTTP server that does not speak 2026-07-28 is connected to again, at the version
// it spoke, with the standalone GET stream open: servers of those versions may send their
// requests to the client there (mcp-go's send sampling and roots requests nowhere else), and a
// client that opens it cannot speak 2026-07-28.
func Dial(ctx context.Context, t *manifest.Tool, o DialOptions) (*client.Client, *mcp.InitializeResult, error) {
	listen := t.Remote != nil && t.Remote.Transport != "sse" && o.ProtocolVersion != "" && !mcp.IsModernProtocol(o.ProtocolVersion)
	c, init, err := dial(ctx, t, o, listen)
	if err != nil || t.Remote == nil || t.Remote.Transport == "sse" || listen || mcp.IsModernProtocol(init.ProtocolVersion) {
		return c, init, err
	}
	c.Close()
	o.ProtocolVersion = init.ProtocolVersion
	return dial(ctx, t, o, true)
}

func dial(ctx context.Context, t *manifest.Tool, o DialOptions, listen bool) (*client.Client, *mcp.InitializeResult, error) {
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
		opts := []transport.StreamableHTTPCOption{transport.WithHTTPHeaders(o.Headers), transport.WithHTTPBasicClient(&http.Client{Transport: httpTransport}),
			transport.WithHTTPLogger(discardLogger)}
		if o.Timeout > 0 {
			opts = append(opts, transport.WithHTTPTimeout(o.Timeout))
		}
		if listen {
			//lint:ignore SA1019 the GET stream is how servers before 2026-07-28 send their requests
			opts = append(opts, transport.WithContinuousListening())
		}
		c, err = client.NewStreamableHttpClient(t.Remote.URL, opts...)
	default:
		return nil, nil, fmt.Errorf("%s is not an MCP server", t.Ref)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", t.Ref, err)
	}
	if err := start(ctx, c, t.Remote != nil && (t.Remote.Transport == "sse" || listen)); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("connect %s: %w", t.Ref, err)
	}
	init, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ProtocolVersion: o.ProtocolVersion,
		ClientInfo:      ClientInfo,
		Capabilities:    ForwardedCapabilities(),
	}})
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("initialize %s: %w", t.Ref, err)
	}
	return c, init, nil
}

// start starts c's transport within ctx. An event stream (legacy SSE, or streamable HTTP's
// standalone GET stream) lives in the context it is started with, so it is started in one that
// ctx's end does not cancel (Close ends it), and the handshake is abandoned by closing the client
// if ctx ends first.
func start(ctx context.Context, c *client.Client, stream bool) error {
	if !stream {
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
