package mcphttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// askHandler asks the client what a request's params name ({"method": …}) and answers with the
// client's result. Ask's own errors are answered with a message naming them.
type askHandler struct {
	cancel   chan struct{} // closed: the question's context ends
	finished chan *Request // gets each "keep" request, to ask after it finished
}

func (h askHandler) Serve(ctx context.Context, r *Request) (any, error) {
	if r.Method == "keep" {
		h.finished <- r
		return map[string]any{}, nil
	}
	if r.Method != "ask" {
		return map[string]any{}, nil
	}
	var p struct{ Method string }
	json.Unmarshal(r.Params, &p)
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-h.cancel:
			cancel()
		case <-qctx.Done():
		}
	}()
	result, err := r.Ask(qctx, p.Method, map[string]any{"q": 1})
	var rpcErr *Error
	switch {
	case errors.As(err, &rpcErr):
		return nil, rpcErr // the client's error
	case errors.Is(err, ErrCannotAsk):
		return nil, Errorf(1, "cannot ask")
	case errors.Is(err, ErrTooManyAsks):
		return nil, Errorf(2, "too many")
	case errors.Is(err, context.Canceled):
		return nil, Errorf(3, "cancelled")
	case err != nil:
		return nil, Errorf(4, "%v", err)
	}
	return map[string]any{"answer": result}, nil
}
func (askHandler) Notification(context.Context, *Request) {}

// askClient is an MCP client of a test server, as one principal.
type askClient struct {
	t         *testing.T
	url       string
	principal string
	accept    string
}

func (c askClient) post(path, session, body string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Host = "localhost"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", c.accept)
	req.Header.Set("X-Principal", c.principal)
	if session != "" {
		req.Header.Set(HeaderSession, session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

func (c askClient) initialize() string {
	c.t.Helper()
	resp := c.post("/mcp", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`)
	resp.Body.Close()
	if sid := resp.Header.Get(HeaderSession); sid != "" {
		return sid
	}
	c.t.Fatalf("initialize: %s", resp.Status)
	return ""
}

// legacy opens a legacy SSE session and returns the path to post to and its events.
func (c askClient) legacy() (string, <-chan string) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.url+"/sse", nil)
	req.Host = "localhost"
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Principal", c.principal)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	events := sseEvents(c.t, resp.Body)
	ev := next(c.t, events)
	path, ok := strings.CutPrefix(ev, "endpoint ")
	if !ok {
		c.t.Fatalf("first event %q, want the endpoint", ev)
	}
	return path, events
}

func askServer(t *testing.T, h askHandler) (*Server, string) {
	t.Helper()
	sessions, _ := NewSessions([]byte(strings.Repeat("k", 32)), time.Hour)
	srv := NewServer(Config{Handler: h, Sessions: sessions, Principal: func(r *http.Request) string { return r.Header.Get("X-Principal") }})
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv)
	mux.HandleFunc("/sse", srv.LegacySSE)
	mux.HandleFunc("/message", srv.LegacyMessages)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	return srv, ts.URL
}

// question decodes a request the server sent.
func question(t *testing.T, event string) (id json.RawMessage, method string) {
	t.Helper()
	var m Message
	if err := json.Unmarshal([]byte(strings.TrimPrefix(event, "message ")), &m); err != nil || !m.IsRequest() {
		t.Fatalf("event %q is not a request of the server (%v)", event, err)
	}
	var s string
	if json.Unmarshal(m.ID, &s) != nil || !strings.HasPrefix(s, askIDPrefix) || len(s) < len(askIDPrefix)+24 {
		t.Errorf("the question's id %s is not one of ours, or guessable", m.ID)
	}
	return m.ID, m.Method
}

// A question reaches the client on the request's stream (streamable HTTP: the POST's SSE
// response; HTTP+SSE: the session's stream); the client's answer, a result or an error, is what
// Ask returns. Answers from another principal, another session, or with an id the server did
// not ask are refused (400), and leave the question waiting for the right one.
func TestAsk(t *testing.T) {
	tests := []struct {
		name   string
		legacy bool
		answer string // the client's answer after "id":<id>,
		want   string // in the final response
	}{
		{"streamable, result", false, `"result":{"roots":[{"uri":"file:///a"}]}`, `"result":{"answer":{"roots":[{"uri":"file:///a"}]}}`},
		{"streamable, error", false, `"error":{"code":-1,"message":"user declined"}`, `"error":{"code":-1,"message":"user declined"}`},
		{"legacy, result", true, `"result":{"action":"accept"}`, `"result":{"answer":{"action":"accept"}}`},
		{"legacy, error", true, `"error":{"code":-32601,"message":"no sampling"}`, `"error":{"code":-32601,"message":"no sampling"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, url := askServer(t, askHandler{})
			alice := askClient{t, url, "user:alice", "application/json, text/event-stream"}
			bob := askClient{t, url, "user:bob", "application/json, text/event-stream"}
			var events <-chan string
			var path, session, otherSession, bobSession string
			if tt.legacy {
				path, events = alice.legacy()
				otherPath, _ := alice.legacy()
				if resp := alice.post(path, "", `{"jsonrpc":"2.0","id":5,"method":"ask","params":{"method":"roots/list"}}`); resp.StatusCode != http.StatusAccepted {
					t.Fatalf("post: %s", resp.Status)
				}
				bobPath, _ := bob.legacy()
				session, otherSession, bobSession = path, otherPath, bobPath
			} else {
				session, otherSession, bobSession = alice.initialize(), alice.initialize(), bob.initialize()
				path = "/mcp"
				resp := alice.post(path, session, `{"jsonrpc":"2.0","id":5,"method":"ask","params":{"method":"roots/list"}}`)
				if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
					t.Fatalf("the response is %s %q, want an SSE stream", resp.Status, ct)
				}
				events = sseEvents(t, resp.Body)
			}
			id, method := question(t, next(t, events))
			if method != "roots/list" {
				t.Errorf("asked %q, want roots/list", method)
			}
			answer := func(c askClient, session string, id json.RawMessage) int {
				p, s := path, session
				if tt.legacy {
					p, s = session, ""
				}
				resp := c.post(p, s, `{"jsonrpc":"2.0","id":`+string(id)+`,`+tt.answer+`}`)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted && !strings.Contains(string(body), `"id\" answers no request`) {
					t.Errorf("a refused answer says %s", body)
				}
				return resp.StatusCode
			}
			for _, bad := range []struct {
				name    string
				c       askClient
				session string
				id      json.RawMessage
			}{
				{"another principal", bob, bobSession, id},
				{"another session", alice, otherSession, id},
				{"an id not asked", alice, session, json.RawMessage(`"lush-q-nothing"`)},
				{"a number", alice, session, json.RawMessage(`5`)},
			} {
				if code := answer(bad.c, bad.session, bad.id); code != http.StatusBadRequest {
					t.Errorf("the answer from %s: %d, want 400", bad.name, code)
				}
			}
			if code := answer(alice, session, id); code != http.StatusAccepted {
				t.Fatalf("the answer: %d, want 202", code)
			}
			if got := next(t, events); !strings.Contains(got, `"id":5,`+tt.want) {
				t.Errorf("response %q, want %s", got, tt.want)
			}
			if code := answer(alice, session, id); code != http.StatusBadRequest {
				t.Errorf("a second answer: %d, want 400", code)
			}
			srv.asks.mu.Lock()
			defer srv.asks.mu.Unlock()
			if len(srv.asks.pending) != 0 || len(srv.asks.perSession) != 0 {
				t.Errorf("questions left waiting: %v %v", srv.asks.pending, srv.asks.perSession)
			}
		})
	}
}

// A request that cannot carry a question gets ErrCannotAsk: its client accepts no stream, it is
// initialize, or it has finished.
func TestCannotAsk(t *testing.T) {
	h := askHandler{finished: make(chan *Request, 1)}
	_, url := askServer(t, h)
	alice := askClient{t, url, "user:alice", "application/json, text/event-stream"}
	session := alice.initialize()

	jsonOnly := alice
	jsonOnly.accept = "application/json"
	resp := jsonOnly.post("/mcp", session, `{"jsonrpc":"2.0","id":2,"method":"ask","params":{"method":"roots/list"}}`)
	if body := readAll(resp); !strings.Contains(body, `"message":"cannot ask"`) {
		t.Errorf("no stream accepted: %s", body)
	}

	readAll(alice.post("/mcp", session, `{"jsonrpc":"2.0","id":3,"method":"keep"}`))
	r := <-h.finished
	if _, err := r.Ask(context.Background(), "roots/list", nil); !errors.Is(err, ErrCannotAsk) {
		t.Errorf("ask after the request finished: %v", err)
	}
	if (&Request{}).CanAsk() {
		t.Error("a request without a stream says it can ask")
	}
}

// The questions waiting are bounded per session and in all; when the question's context ends,
// the client is told it is cancelled and Ask returns the context's error.
func TestAskBoundsAndCancel(t *testing.T) {
	h := askHandler{cancel: make(chan struct{})}
	srv, url := askServer(t, h)
	srv.asks.maxPerSession, srv.asks.max = 1, 2
	alice := askClient{t, url, "user:alice", "application/json, text/event-stream"}
	s1, s2, s3 := alice.initialize(), alice.initialize(), alice.initialize()
	ask := func(session string, id int) <-chan string {
		resp := alice.post("/mcp", session, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ask","params":{"method":"sampling/createMessage"}}`, id))
		return sseEvents(t, resp.Body)
	}
	first := ask(s1, 1)
	question(t, next(t, first))
	tooMany := func(session string, id int, why string) {
		resp := alice.post("/mcp", session, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ask","params":{"method":"roots/list"}}`, id))
		if body := readAll(resp); !strings.Contains(body, `"message":"too many"`) {
			t.Errorf("%s: %s", why, body)
		}
	}
	tooMany(s1, 2, "a second question of the session")
	second := ask(s2, 3)
	question(t, next(t, second))
	tooMany(s3, 4, "a third question of the server")

	close(h.cancel) // both questions' contexts end
	for _, events := range []<-chan string{first, second} {
		if got := next(t, events); !strings.Contains(got, `"method":"notifications/cancelled"`) || !strings.Contains(got, `"requestId":"lush-q-`) {
			t.Errorf("after the context ended: %q, want notifications/cancelled", got)
		}
		if got := next(t, events); !strings.Contains(got, `"message":"cancelled"`) {
			t.Errorf("response %q, want the context's error", got)
		}
	}
	srv.asks.mu.Lock()
	defer srv.asks.mu.Unlock()
	if len(srv.asks.pending) != 0 {
		t.Errorf("questions left waiting: %v", srv.asks.pending)
	}
}
