package upstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/upstream"
)

// sseAskServer is a server of the HTTP+SSE transport (2024-11-05) for one client, whose tool
// "ask" {tag} sends sampling/createMessage with tag to its client on the event stream and returns
// the text of the answer, or "refused: <error message>".
func sseAskServer(t *testing.T) string {
	t.Helper()
	events := make(chan []byte, 64)
	var mu sync.Mutex
	pending := map[string]chan json.RawMessage{}
	var nextID atomic.Int64
	send := func(v any) {
		b, _ := json.Marshal(v)
		events <- b
	}
	reply := func(id json.RawMessage, result any) {
		send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
	}
	handle := func(ctx context.Context, id json.RawMessage, method string, params json.RawMessage) {
		switch method {
		case "initialize":
			reply(id, map[string]any{"protocolVersion": "2024-11-05", "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "sse-ask", "version": "1"}})
		case "ping":
			reply(id, map[string]any{})
		case "tools/list":
			reply(id, map[string]any{"tools": []any{map[string]any{"name": "ask", "inputSchema": map[string]any{"type": "object"}}}})
		case "tools/call":
			var p struct {
				Arguments struct{ Tag string } `json:"arguments"`
			}
			json.Unmarshal(params, &p)
			reqID := fmt.Sprintf("s%d", nextID.Add(1))
			answer := make(chan json.RawMessage, 1)
			mu.Lock()
			pending[reqID] = answer
			mu.Unlock()
			send(map[string]any{"jsonrpc": "2.0", "id": reqID, "method": "sampling/createMessage", "params": map[string]any{"maxTokens": 5,
				"messages": []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": p.Arguments.Tag}}}}})
			var text string
			select {
			case raw := <-answer:
				var a struct {
					Result struct {
						Content struct{ Text string } `json:"content"`
					} `json:"result"`
					Error *struct{ Message string } `json:"error"`
				}
				json.Unmarshal(raw, &a)
				text = a.Result.Content.Text
				if a.Error != nil {
					text = "refused: " + a.Error.Message
				}
			case <-ctx.Done():
				return
			}
			reply(id, map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}})
		default:
			if id != nil {
				send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32601, "message": "method not found"}})
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: endpoint\ndata: /message?session=1\n\n")
		w.(http.Flusher).Flush()
		for {
			select {
			case b := <-events:
				fmt.Fprintf(w, "event: message\ndata: %s\n\n", b)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			case <-ctx.Done():
				return
			}
		}
	})
	mux.HandleFunc("POST /message", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(body, &msg) != nil {
			http.Error(w, "bad message", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		if msg.Method == "" { // an answer to one of the server's requests
			var id string
			json.Unmarshal(msg.ID, &id)
			mu.Lock()
			ch := pending[id]
			delete(pending, id)
			mu.Unlock()
			if ch != nil {
				ch <- body
			}
			return
		}
		go handle(ctx, msg.ID, msg.Method, msg.Params)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		cancel()
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL + "/sse"
}

// TestSSEServerRequests: a request an HTTP+SSE server sends on its event stream (which mcp-go's
// client drops) reaches the Asker of the only call in flight and the answer reaches the server;
// with two calls in flight it is refused; without an Asker, answered with an error.
func TestSSEServerRequests(t *testing.T) {
	s := startServer(t, &manifest.Tool{Ref: "mcp://sse.internal/sse", Remote: &manifest.Remote{URL: sseAskServer(t), Transport: "sse"}}, upstream.Options{})
	if s.Protocol() != "2024-11-05" {
		t.Fatalf("protocol %q", s.Protocol())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	solo := &answerer{name: "solo"}
	if got, err := callText(upstream.WithAsker(ctx, solo.ask), s, "ask", map[string]any{"tag": "s1"}); err != nil || got != "solo:s1" {
		t.Errorf("one call: %q, %v (asked %v)", got, err, solo.questions())
	}
	if got, err := callText(ctx, s, "ask", map[string]any{"tag": "s2"}); err != nil || !strings.Contains(got, "refused:") || !strings.Contains(got, "cannot be asked") {
		t.Errorf("no Asker: %q, %v", got, err)
	}
	gotA, gotB, a, b := twoCalls(ctx, t, s, "sampling")
	if gotA != "A:a1" || len(a.questions()) != 1 {
		t.Errorf("A's result = %q (asked %v)", gotA, a.questions())
	}
	if !strings.Contains(gotB, "cannot tell which call") || len(b.questions()) != 0 {
		t.Errorf("B's result = %q (asked %v), want a refusal", gotB, b.questions())
	}
}
