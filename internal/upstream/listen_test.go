package upstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/upstream"
)

// listenLog signals, with the request's body, each subscriptions/listen stream a server has
// established (its first write: the acknowledgement, sent once the stream is registered).
func listenLog(next http.Handler, established chan<- string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(mcp.HeaderMethod) != string(mcp.MethodSubscriptionsListen) {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(&firstWrite{ResponseWriter: w, body: string(body), established: established}, r)
	})
}

type firstWrite struct {
	http.ResponseWriter
	body        string
	established chan<- string
	done        bool
}

func (f *firstWrite) Write(b []byte) (int, error) {
	n, err := f.ResponseWriter.Write(b)
	if !f.done {
		f.done = true
		f.established <- f.body
	}
	return n, err
}

func (f *firstWrite) Flush() { f.ResponseWriter.(http.Flusher).Flush() }

// TestModernSubscriptionsAndErrors: at 2026-07-28 resources/subscribe is a subscriptions/listen
// stream naming the resource, opened again when the set changes, which carries the server's list
// changes; a method the server does not know is its JSON-RPC error (-32601, which that
// version sends with HTTP 404), not a failed connection.
func TestModernSubscriptionsAndErrors(t *testing.T) {
	srv := server.NewMCPServer("res-server", "1.0.0", server.WithResourceCapabilities(true, true), server.WithToolCapabilities(true))
	srv.AddResource(mcp.NewResource("test://r", "r"), func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: "test://r", Text: "r"}}, nil
	})
	established := make(chan string, 4)
	hs := httptest.NewServer(listenLog(server.NewStreamableHTTPServer(srv), established))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	changed := make(chan struct{}, 16)
	s := startServer(t, &manifest.Tool{Ref: "mcp://res.internal/mcp", Remote: &manifest.Remote{URL: hs.URL}},
		upstream.Options{OnChange: func(string) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}})
	if s.Protocol() != mcp.ProtocolVersion20260728 {
		t.Fatalf("protocol %q", s.Protocol())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	next := func() string {
		select {
		case body := <-established:
			return body
		case <-ctx.Done():
			t.Fatal("no subscriptions/listen stream was established")
			return ""
		}
	}
	if first := next(); !strings.Contains(first, `"toolsListChanged":true`) || strings.Contains(first, "test://r") {
		t.Errorf("first listen: %s", first)
	}
	res, err := s.Request(ctx, "resources/subscribe", json.RawMessage(`{"uri":"test://r"}`), "", nil)
	if err != nil || string(res) != "{}" {
		t.Fatalf("resources/subscribe: %s, %v", res, err)
	}
	if again := next(); !strings.Contains(again, `"resourceSubscriptions":["test://r"]`) {
		t.Errorf("listen after subscribing: %s", again)
	}
	// A tool added now is announced on the stream (list_changed), and the lists are read again.
	srv.AddTool(mcp.NewTool("late"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(""), nil
	})
	for len(s.Lists().Tools) != 1 {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("the list change did not arrive")
		}
	}
	if _, err := s.Request(ctx, "resources/subscribe", json.RawMessage(`{}`), "", nil); err == nil || !strings.Contains(err.Error(), "params.uri") {
		t.Errorf("subscribe without a uri: %v", err)
	}

	_, err = s.Request(ctx, "no/such/method", nil, "", nil)
	var rpc *upstream.RPCError
	if !errors.As(err, &rpc) || rpc.Code != -32601 {
		t.Errorf("unknown method: %v", err)
	}
	if !s.State().Up {
		t.Error("an unknown method took the server down")
	}
}
