package upstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/upstream"
)

// askEnv, set to "1", makes the test binary serve askServer on stdin/stdout.
const askEnv = "LUSH_TEST_ASK_SERVER"

// legacyVersions are the versions a server that predates 2026-07-28 serves.
var legacyVersions = []string{mcp.ProtocolVersion20251125, mcp.ProtocolVersion20250618, mcp.ProtocolVersion20250326}

func serveAskStdioIfRequested() {
	if os.Getenv(askEnv) != "1" {
		return
	}
	if err := server.ServeStdio(askServer()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// askServer is an MCP server whose tools ask their client something during the call:
//
//	ask {kind, tag}  sends sampling/createMessage, elicitation/create or roots/list (kind) carrying
//	                 tag, and returns the answer as text, or "refused: <error>"
//	client {}        returns what the server knows of its client: {"capabilities", "name", "protocol"}
//	needs_input {}   returns an input_required result (2026-07-28)
func askServer() *server.MCPServer {
	s := server.NewMCPServer("ask-server", "1.0.0", server.WithToolCapabilities(false),
		//lint:ignore SA1019 the server under test sends server-initiated requests at every version, as older servers do
		server.WithLegacyServerInitiatedRequests(),
		server.WithCacheHints(60_000, mcp.CacheScopePublic))
	s.AddTool(mcp.NewTool("ask", mcp.WithString("kind", mcp.Required()), mcp.WithString("tag", mcp.Required())),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			tag := req.GetString("tag", "")
			var answer string
			var err error
			switch req.GetString("kind", "") {
			case "sampling":
				var res *mcp.CreateMessageResult
				//lint:ignore SA1019 sampling is what the test forwards
				res, err = s.RequestSampling(ctx, mcp.CreateMessageRequest{CreateMessageParams: mcp.CreateMessageParams{MaxTokens: 10,
					Messages: []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent(tag)}}}})
				if err == nil {
					answer = res.Content.(mcp.TextContent).Text
				}
			case "elicitation":
				var res *mcp.ElicitationResult
				res, err = s.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{Message: tag,
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"answer": map[string]any{"type": "string"}}}}})
				if err == nil {
					b, _ := json.Marshal(res.Content)
					answer = string(res.Action) + " " + string(b)
				}
			case "roots":
				var res *mcp.ListRootsResult
				res, err = s.RequestRoots(ctx, mcp.ListRootsRequest{})
				if err == nil {
					for _, r := range res.Roots {
						answer += r.Name
					}
				}
			}
			if err != nil {
				return mcp.NewToolResultText("refused: " + err.Error()), nil
			}
			return mcp.NewToolResultText(answer), nil
		})
	s.AddTool(mcp.NewTool("client"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		out := map[string]any{"protocol": server.RequestProtocolVersion(ctx)}
		if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
			out["capabilities"], out["name"] = info.ClientCapabilities, info.ClientInfo.Name
		} else if sess, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok {
			out["capabilities"], out["name"] = sess.GetClientCapabilities(), sess.GetClientInfo().Name
		}
		b, _ := json.Marshal(out)
		return mcp.NewToolResultText(string(b)), nil
	})
	s.AddTool(mcp.NewTool("needs_input"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return server.NewInputRequestBuilder("state-1").Elicit("confirm", mcp.ElicitationParams{Message: "Sure?",
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}}}).ToolResult(), nil
	})
	return s
}

// headerLog records the Mcp-Method and Mcp-Name headers of the requests an HTTP server receives.
type headerLog struct {
	mu   sync.Mutex
	seen []string // "method name"
}

func (h *headerLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			h.mu.Lock()
			h.seen = append(h.seen, strings.TrimSpace(r.Header.Get(mcp.HeaderMethod)+" "+r.Header.Get(mcp.HeaderName)))
			h.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

func (h *headerLog) has(want string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.seen {
		if s == want {
			return true
		}
	}
	return false
}

// askHTTP serves askServer over streamable HTTP on loopback, at the given versions (all when none).
func askHTTP(t *testing.T, versions ...string) (*manifest.Tool, *headerLog) {
	t.Helper()
	log := &headerLog{}
	srv := httptest.NewServer(log.wrap(server.NewStreamableHTTPServer(askServer(), server.WithStreamableHTTPProtocolVersions(versions...))))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return &manifest.Tool{Ref: "mcp://ask.internal/mcp", Kind: "mcp", Remote: &manifest.Remote{URL: srv.URL + "/mcp"}}, log
}

// askStdio is askServer as a stdio server (this test binary).
func askStdio(t *testing.T) (*manifest.Tool, *upstream.Resolver) {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ask"), fmt.Sprintf("#!/bin/sh\nexec %q\n", os.Args[0]), 0o755)
	return &manifest.Tool{Ref: "mcp://stdio/ask", Kind: "mcp", Stdio: &manifest.Stdio{Launcher: "stdio", Package: "ask",
		Env: []manifest.EnvVar{{Name: askEnv, Value: "1"}}}}, &upstream.Resolver{ProjectDir: dir}
}

func startServer(t *testing.T, tool *manifest.Tool, o upstream.Options) *upstream.Server {
	t.Helper()
	o.BackoffInitial, o.BackoffMax, o.HealthInterval = 50*time.Millisecond, 200*time.Millisecond, time.Minute
	s := upstream.Start(tool, o)
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// callText calls a tool and returns the text of its result.
func callText(ctx context.Context, s *upstream.Server, name string, args map[string]any) (string, error) {
	params, _ := json.Marshal(map[string]any{"name": name, "arguments": args})
	raw, err := s.Request(ctx, "tools/call", params, "", nil)
	if err != nil {
		return "", err
	}
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || len(res.Content) == 0 {
		return "", fmt.Errorf("result %s", raw)
	}
	return res.Content[0].Text, nil
}

// answerer is an Asker that answers every kind of request with the tag it was asked about,
// prefixed with its own name, and records what it was asked.
type answerer struct {
	name  string
	mu    sync.Mutex
	asked []string
	// hold, when not nil, is closed when the first request arrives; the answer then waits for
	// release.
	hold, release chan struct{}
}

func (a *answerer) ask(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	var p struct {
		Message  string `json:"message"`
		Messages []struct {
			Content struct{ Text string } `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(params, &p); err != nil && method != "roots/list" {
		return nil, err
	}
	tag := p.Message
	if len(p.Messages) > 0 {
		tag = p.Messages[0].Content.Text
	}
	a.mu.Lock()
	a.asked = append(a.asked, method+" "+tag)
	a.mu.Unlock()
	if a.hold != nil {
		close(a.hold)
		a.hold = nil
		select {
		case <-a.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	answer := a.name + ":" + tag
	switch method {
	case "sampling/createMessage":
		return json.Marshal(map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": answer}})
	case "elicitation/create":
		return json.Marshal(map[string]any{"action": "accept", "content": map[string]any{"answer": answer}})
	case "roots/list":
		return json.Marshal(map[string]any{"roots": []map[string]any{{"uri": "file:///" + a.name, "name": a.name}}})
	}
	return nil, &upstream.RPCError{Code: -32601, Message: "unknown method " + method}
}

func (a *answerer) questions() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.asked...)
}

// TestServerRequestsReachTheirCall: a request an upstream sends during a call is answered by the
// Asker of that call, and its answer reaches the server. With two calls in flight, a request on a
// call's own stream (streamable HTTP) still reaches that call; one that says nothing about its call
// (stdio) is refused rather than guessed, and never reaches the other call's client.
func TestServerRequestsReachTheirCall(t *testing.T) {
	stdioTool, resolver := askStdio(t)
	httpTool, _ := askHTTP(t, legacyVersions...)
	for _, tc := range []struct {
		name     string
		tool     *manifest.Tool
		version  string // pinned; "" negotiates
		protocol string // expected
		onStream string // the kind of request the server sends on its call's stream
	}{
		// mcp-go's HTTP server sends elicitation on the call's stream, sampling and roots on the
		// standalone GET stream.
		{"streamable HTTP 2025-11-25", httpTool, "", mcp.ProtocolVersion20251125, "elicitation"},
		{"stdio 2025-11-25", stdioTool, mcp.ProtocolVersion20251125, mcp.ProtocolVersion20251125, ""},
		{"stdio 2025-06-18", stdioTool, mcp.ProtocolVersion20250618, mcp.ProtocolVersion20250618, ""},
		{"stdio 2026-07-28", stdioTool, "", mcp.ProtocolVersion20260728, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, tc.tool, upstream.Options{Dial: upstream.DialOptions{Resolver: resolver, ProtocolVersion: tc.version}})
			if got := s.Protocol(); got != tc.protocol {
				t.Fatalf("protocol = %q, want %q", got, tc.protocol)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			// One call: every kind of request reaches its Asker, and the answer reaches the server.
			for kind, want := range map[string]string{"sampling": "solo:s1", "elicitation": `accept {"answer":"solo:s1"}`, "roots": "solo"} {
				a := &answerer{name: "solo"}
				got, err := callText(upstream.WithAsker(ctx, a.ask), s, "ask", map[string]any{"kind": kind, "tag": "s1"})
				if err != nil || got != want {
					t.Errorf("%s: result %q, %v; want %q (asked %v)", kind, got, err, want, a.questions())
				}
			}

			// Two calls: A's request is held while B's call asks.
			for _, kind := range []string{"elicitation", "sampling"} {
				gotA, gotB, a, b := twoCalls(ctx, t, s, kind)
				if gotA != "A:a1" {
					t.Errorf("A's result = %q, want A:a1", gotA)
				}
				if q := a.questions(); len(q) != 1 || q[0] != "sampling/createMessage a1" {
					t.Errorf("A was asked %v", q)
				}
				if kind == tc.onStream {
					if want := `accept {"answer":"B:b1"}`; gotB != want || len(b.questions()) != 1 {
						t.Errorf("B's result = %q (B asked %v), want %s", gotB, b.questions(), want)
					}
				} else if !strings.HasPrefix(gotB, "refused:") || !strings.Contains(gotB, "cannot tell which call") || len(b.questions()) != 0 {
					t.Errorf("%s: B's result = %q (B asked %v), want a refusal: two calls are in flight", kind, gotB, b.questions())
				}
			}
		})
	}
}

// twoCalls runs call A, whose sampling request is held by its Asker, and while it is held, call B,
// whose server asks kind. It returns their results and their Askers.
func twoCalls(ctx context.Context, t *testing.T, s *upstream.Server, kind string) (gotA, gotB string, a, b *answerer) {
	t.Helper()
	a = &answerer{name: "A", hold: make(chan struct{}), release: make(chan struct{})}
	held := a.hold
	aDone := make(chan string, 1)
	go func() {
		got, err := callText(upstream.WithAsker(ctx, a.ask), s, "ask", map[string]any{"kind": "sampling", "tag": "a1"})
		if err != nil {
			got = err.Error()
		}
		aDone <- got
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("A's request never reached A's Asker")
	}
	b = &answerer{name: "B"}
	gotB, err := callText(upstream.WithAsker(ctx, b.ask), s, "ask", map[string]any{"kind": kind, "tag": "b1"})
	close(a.release)
	gotA = <-aDone
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	return gotA, gotB, a, b
}

// TestServerRequestWithoutAsker: a call whose context has no Asker answers its server's requests
// with an error (method not found), and an Asker's *RPCError reaches the server with its message.
func TestServerRequestWithoutAsker(t *testing.T) {
	tool, _ := askHTTP(t, legacyVersions...)
	s := startServer(t, tool, upstream.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := callText(ctx, s, "ask", map[string]any{"kind": "elicitation", "tag": "x"})
	if err != nil || !strings.HasPrefix(got, "refused:") || !strings.Contains(got, "cannot be asked") {
		t.Errorf("no Asker: result %q, %v", got, err)
	}
	deny := func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
		return nil, &upstream.RPCError{Code: -32042, Message: "sampling is denied for this server"}
	}
	got, err = callText(upstream.WithAsker(ctx, deny), s, "ask", map[string]any{"kind": "sampling", "tag": "x"})
	if err != nil || !strings.HasPrefix(got, "refused:") || !strings.Contains(got, "sampling is denied for this server") {
		t.Errorf("denying Asker: result %q, %v", got, err)
	}
}

// TestProtocolNegotiation: Lush speaks 2026-07-28 to a server that offers it, and the newest older
// version to one that does not; either way the server sees Lush's name and the capabilities it
// can forward. At 2026-07-28 requests carry Mcp-Method / Mcp-Name, results pass through untouched
// (input_required included), and the lists' caching hints are kept.
func TestProtocolNegotiation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions []string
		protocol string
	}{
		{"modern server", nil, mcp.ProtocolVersion20260728},
		{"legacy server", legacyVersions, mcp.ProtocolVersion20251125},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tool, headers := askHTTP(t, tc.versions...)
			s := startServer(t, tool, upstream.Options{})
			if s.Protocol() != tc.protocol || s.State().Protocol != tc.protocol || s.Lists().Protocol != tc.protocol {
				t.Fatalf("protocol = %q, state %q, lists %q; want %q", s.Protocol(), s.State().Protocol, s.Lists().Protocol, tc.protocol)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got, err := callText(ctx, s, "client", map[string]any{})
			if err != nil {
				t.Fatal(err)
			}
			var seen struct {
				Protocol     string
				Name         string
				Capabilities mcp.ClientCapabilities
			}
			if err := json.Unmarshal([]byte(got), &seen); err != nil {
				t.Fatalf("client: %s", got)
			}
			caps := seen.Capabilities
			if seen.Protocol != tc.protocol || seen.Name != upstream.ClientInfo.Name || caps.Sampling == nil || caps.Roots == nil ||
				!caps.Roots.ListChanged || caps.Elicitation == nil || caps.Elicitation.Form == nil || caps.Elicitation.URL == nil {
				t.Errorf("the server sees its client as %s", got)
			}
			modern := tc.protocol == mcp.ProtocolVersion20260728
			if headers.has("tools/call client") != modern || headers.has("tools/list") != modern {
				t.Errorf("Mcp-Method/Mcp-Name headers sent: %v, want %v (%v)", !modern, modern, headers.seen)
			}
			hint, ok := s.Lists().Cache["tools/list"]
			if modern && (!ok || hint.TTL != time.Minute || !hint.TTLSet || hint.Scope != "public") || !modern && ok {
				t.Errorf("tools/list cache hint = %+v, %v", hint, ok)
			}
			if !modern {
				return
			}
			raw, err := s.Request(ctx, "tools/call", json.RawMessage(`{"name":"needs_input","arguments":{}}`), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			var res struct {
				ResultType    string                     `json:"resultType"`
				InputRequests map[string]json.RawMessage `json:"inputRequests"`
				RequestState  string                     `json:"requestState"`
			}
			if json.Unmarshal(raw, &res) != nil || res.ResultType != "input_required" || res.InputRequests["confirm"] == nil || res.RequestState != "state-1" {
				t.Errorf("input_required result = %s", raw)
			}
		})
	}
}

// TestPinnedLegacyVersion: a pinned version before 2026-07-28 is asked for with the handshake,
// even of a server that offers 2026-07-28.
func TestPinnedLegacyVersion(t *testing.T) {
	tool, headers := askHTTP(t)
	s := startServer(t, tool, upstream.Options{Dial: upstream.DialOptions{ProtocolVersion: mcp.ProtocolVersion20250618}})
	if s.Protocol() != mcp.ProtocolVersion20250618 {
		t.Fatalf("protocol = %q", s.Protocol())
	}
	if headers.has("server/discover") {
		t.Error("server/discover was sent although an older version is pinned")
	}
}

// TestListsFollowTheirTTL: the supervisor reads a server's lists again when their TTL ends.
func TestListsFollowTheirTTL(t *testing.T) {
	srv := server.NewMCPServer("ttl-server", "1.0.0", server.WithToolCapabilities(false), server.WithCacheHints(1, mcp.CacheScopePrivate))
	srv.AddTool(mcp.NewTool("first"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(""), nil
	})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	changed := make(chan struct{}, 16)
	s := startServer(t, &manifest.Tool{Ref: "mcp://ttl.internal/mcp", Remote: &manifest.Remote{URL: hs.URL}},
		upstream.Options{OnChange: func(string) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}})
	if h := s.Lists().Cache["tools/list"]; h.TTL != time.Millisecond || h.Scope != "private" {
		t.Fatalf("cache hint = %+v", h)
	}
	// A tool added without notification shows up once the lists' TTL has ended.
	srv.AddTool(mcp.NewTool("second"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(""), nil
	})
	deadline := time.After(20 * time.Second)
	for len(s.Lists().Tools) != 2 {
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the lists were not read again: %d tools", len(s.Lists().Tools))
		}
	}
}
