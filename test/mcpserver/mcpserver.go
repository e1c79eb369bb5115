// Package mcpserver is a small MCP server with exactly known behaviour, for tests: it serves the
// same tools over stdio, streamable HTTP and SSE, so tests can check what reaches an upstream.
//
// Tools:
//
//	echo       {text}     returns text (read-only hint)
//	env        {}         returns the server process's environment, one KEY=value per line
//	write_note {text}     pretends to write; returns "wrote: <text>"
//	fail       {}         returns a tool error
//	sleep      {ms}       waits ms milliseconds (or until cancelled), sending progress if asked
//	crash      {}         kills the server process mid-call (stdio only; over HTTP it fails)
//
// A test binary can act as a stdio server by calling ServeStdioIfRequested from TestMain and
// starting itself with the environment variable in EnvVar set.
package mcpserver

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// EnvVar, set to "1", makes ServeStdioIfRequested serve MCP on stdin/stdout.
const EnvVar = "LUSH_TEST_MCP_SERVER"

// ToolNames are the tools the server offers, sorted.
var ToolNames = []string{"crash", "echo", "env", "fail", "sleep", "write_note"}

// Recorder remembers the tool calls a server received, so tests can check what reached it.
type Recorder struct {
	mu    sync.Mutex
	calls []string
}

// Calls returns the names of the tools called, in order.
func (r *Recorder) Calls() []string {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func (r *Recorder) record(name string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, name)
}

// New returns the server.
func New() *server.MCPServer { return NewRecorded(nil) }

// NewRecorded returns the server, recording every tool call it receives in rec.
func NewRecorded(rec *Recorder) *server.MCPServer {
	s := server.NewMCPServer("lush-test-server", "1.0.0", server.WithToolCapabilities(false),
		server.WithResourceCapabilities(true, false), server.WithPromptCapabilities(false),
		server.WithToolHandlerMiddleware(func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
			return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				rec.record(req.Params.Name)
				return next(ctx, req)
			}
		}))
	s.AddResource(mcp.NewResource("test://readme", "readme", mcp.WithMIMEType("text/plain")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: "test://readme", MIMEType: "text/plain", Text: "read me"}}, nil
		})
	s.AddPrompt(mcp.NewPrompt("greet", mcp.WithPromptDescription("Greet someone."), mcp.WithArgument("who")),
		func(_ context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return mcp.NewGetPromptResult("greeting", []mcp.PromptMessage{mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent("Hello, "+req.Params.Arguments["who"]))}), nil
		})
	s.AddTool(mcp.NewTool("echo", mcp.WithDescription("Echo text back."), mcp.WithString("text", mcp.Required()), mcp.WithReadOnlyHintAnnotation(true)),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(req.GetString("text", "")), nil
		})
	s.AddTool(mcp.NewTool("env", mcp.WithDescription("The server's environment."), mcp.WithReadOnlyHintAnnotation(true)),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			env := os.Environ()
			sort.Strings(env)
			return mcp.NewToolResultText(strings.Join(env, "\n")), nil
		})
	s.AddTool(mcp.NewTool("write_note", mcp.WithDescription("Pretend to write a note."), mcp.WithString("text", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("wrote: " + req.GetString("text", "")), nil
		})
	s.AddTool(mcp.NewTool("fail", mcp.WithDescription("Always fails.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultError("this tool always fails"), nil
		})
	s.AddTool(mcp.NewTool("sleep", mcp.WithDescription("Wait, reporting progress."), mcp.WithNumber("ms")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			total := time.Duration(req.GetFloat("ms", 0)) * time.Millisecond
			var token mcp.ProgressToken
			if req.Params.Meta != nil {
				token = req.Params.Meta.ProgressToken
			}
			for i := 1; i <= 4; i++ {
				select {
				case <-time.After(total / 4):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				if token != nil {
					server.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress",
						map[string]any{"progressToken": token, "progress": i, "total": 4})
				}
			}
			// mcp-go's server may write the response before a notification queued just before it;
			// a short pause keeps the last progress ahead of the result, as a real tool's would be.
			time.Sleep(20 * time.Millisecond)
			return mcp.NewToolResultText("slept"), nil
		})
	s.AddTool(mcp.NewTool("crash", mcp.WithDescription("Kill the server process mid-call.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if os.Getenv(EnvVar) == "1" {
				os.Exit(3)
			}
			return mcp.NewToolResultError("crash only works over stdio"), nil
		})
	return s
}

// ServeStdioIfRequested serves MCP on stdin/stdout and exits when EnvVar is "1"; otherwise it
// returns at once. Call it first thing in TestMain.
func ServeStdioIfRequested() {
	if os.Getenv(EnvVar) != "1" {
		return
	}
	if err := server.ServeStdio(New()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// StdioScript returns a shell script that starts the current test binary as a stdio server, for
// mcp://stdio/<path> references (servers get a minimal environment, so the script sets EnvVar).
func StdioScript() string {
	return fmt.Sprintf("#!/bin/sh\n%s=1 exec %q \"$@\"\n", EnvVar, os.Args[0])
}

// StartHTTP serves the tools over streamable HTTP at <url>/mcp on loopback; the server stops
// when the test ends (the caller passes t.Cleanup).
func StartHTTP(cleanup func(func())) (url string) {
	url, _ = StartRecordedHTTP(cleanup)
	return url
}

// StartRecordedHTTP is StartHTTP with a Recorder of the calls the server receives.
func StartRecordedHTTP(cleanup func(func())) (string, *Recorder) {
	rec := &Recorder{}
	ts := httptest.NewServer(server.NewStreamableHTTPServer(NewRecorded(rec)))
	cleanup(ts.Close)
	return ts.URL + "/mcp", rec
}

// StartSSE serves the tools over the SSE transport; the endpoint is <url>/sse.
func StartSSE(cleanup func(func())) (url string) {
	ts := httptest.NewUnstartedServer(nil)
	sse := server.NewSSEServer(New(), server.WithBaseURL("http://"+ts.Listener.Addr().String()))
	ts.Config.Handler = sse
	ts.Start()
	cleanup(func() {
		ts.CloseClientConnections() // event streams never end on their own
		ts.Close()
	})
	return ts.URL + "/sse"
}
