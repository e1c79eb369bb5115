// Package mcpserver is a small MCP server with exactly known behaviour, for tests: it serves the
// same tools over stdio, streamable HTTP and SSE, so tests can check what reaches an upstream.
//
// Tools:
//
//	echo       {text}     returns text (read-only hint)
//	env        {}         returns the server process's environment, one KEY=value per line
//	write_note {text}     pretends to write; returns "wrote: <text>"
//	fail       {}         returns a tool error
//	sleep      {ms}       waits ms milliseconds (or until cancelled)
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
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// EnvVar, set to "1", makes ServeStdioIfRequested serve MCP on stdin/stdout.
const EnvVar = "LUSH_TEST_MCP_SERVER"

// ToolNames are the tools the server offers, sorted.
var ToolNames = []string{"echo", "env", "fail", "sleep", "write_note"}

// New returns the server.
func New() *server.MCPServer {
	s := server.NewMCPServer("lush-test-server", "1.0.0", server.WithToolCapabilities(false))
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
	s.AddTool(mcp.NewTool("sleep", mcp.WithDescription("Wait."), mcp.WithNumber("ms")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-time.After(time.Duration(req.GetFloat("ms", 0)) * time.Millisecond):
				return mcp.NewToolResultText("slept"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
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
	ts := httptest.NewServer(server.NewStreamableHTTPServer(New()))
	cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// StartSSE serves the tools over the SSE transport; the endpoint is <url>/sse.
func StartSSE(cleanup func(func())) (url string) {
	ts := httptest.NewUnstartedServer(nil)
	sse := server.NewSSEServer(New(), server.WithBaseURL("http://"+ts.Listener.Addr().String()))
	ts.Config.Handler = sse
	ts.Start()
	cleanup(ts.Close)
	return ts.URL + "/sse"
}
