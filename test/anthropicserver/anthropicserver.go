// Package anthropicserver is a local stand-in for Anthropic's Messages API
// (api.anthropic.com) for tests and demos. There is no network where Lush's
// tests run, so agentd's Anthropic provider is exercised against this server
// through the official github.com/anthropics/anthropic-sdk-go/v2 client
// instead of Anthropic's service. It answers from a script, not a model.
//
// New starts a server on 127.0.0.1 (loopback only); point the SDK at it with
// option.WithBaseURL(URL()). It serves POST /v1/messages, answering with one
// JSON message, or with server-sent events when the body says "stream": true.
//
// # Checks
//
// The server checks a request the way the API does and answers 400
// invalid_request_error, naming the field, when it breaks a rule, so that a
// provider that maps a conversation wrongly fails its tests:
//
//   - the key: an x-api-key header (or "Authorization: Bearer <key>", which
//     the SDK's option.WithAPIKey sends) holding the server's key, else 401
//     authentication_error
//   - an anthropic-version header
//   - a JSON body with model, max_tokens (a positive number) and messages
//   - roles user and assistant only, alternating (stricter than the API,
//     which merges consecutive turns of one role itself: a provider that
//     merges them sends exactly what the model sees)
//   - content blocks text (not empty), tool_use (id matching
//     ^[a-zA-Z0-9_-]+$, name, object input; assistant turns only) and
//     tool_result (user turns only, before any other block of the turn)
//   - every tool_use of an assistant turn answered by a tool_result with its
//     id in the next user turn, and every tool_result answering a tool_use of
//     the turn just before
//   - system a string or a list of text blocks
//   - tools with unique names matching ^[a-zA-Z0-9_-]{1,128}$ and an
//     input_schema whose type is "object"
//
// # Script
//
// Every answer is a Turn: a model reply (text and tool calls, a stop reason
// and token counts) or an error reply (an HTTP status with Anthropic's error
// body), or a fault (a malformed body, a stream cut short or broken by an
// error event, a reply held until the client gives up). Turns wait in named
// queues: Push appends to the default queue "", PushFor to a named one. Each
// request is routed to one queue by the router (WithRouter; by default every
// request goes to the default queue) and takes that queue's next turn.
// RouteByModel and RouteBySystemPrefix are ready-made routers for several
// agents sharing one server.
//
// When the routed queue is empty the responder (WithResponder) answers, if
// there is one; it sees the decoded request. Otherwise the request fails
// with 500 api_error saying the script ran out.
//
// # Replies
//
// A reply is a message whose content holds a text block (when Text is set)
// and a tool_use block per Call, with stop_reason tool_use when there are
// calls and end_turn otherwise (unless the turn names another), and usage.
// Token counts the turn does not give are estimated at four characters a
// token. A streamed reply is message_start (with the input usage), ping, per
// block content_block_start, deltas (the text split after each space; a
// tool's input JSON in pieces of a few bytes) and content_block_stop, then
// message_delta (stop reason and output usage) and message_stop.
//
// The server records every request it accepted (authenticated, decoded and
// valid); Requests returns them so tests can assert what the client sent. A
// Server is safe for concurrent use.
package anthropicserver

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Turn is one scripted answer: a model reply, an error reply when Status is
// set, or a fault.
type Turn struct {
	Text  string // the reply's text; may be empty when Calls are set
	Calls []Call // tool_use blocks, after the text
	// StopReason is the message's stop_reason; when empty, tool_use if there
	// are calls and end_turn otherwise.
	StopReason string
	// Refusal fills stop_details (type refusal) when StopReason is refusal.
	Refusal *Refusal
	Usage   Usage // token counts; zero input and output counts are estimated

	// Status makes the turn an error reply with this HTTP status (e.g. 429,
	// 529), with Anthropic's body {"type":"error","error":{"type","message"}}.
	Status int
	// ErrorType is error.type, e.g. rate_limit_error; when empty, the type
	// Anthropic pairs with Status.
	ErrorType string
	// Message is error.message; when empty, a message for the type.
	Message string
	// RetryAfter, when set, is sent as the retry-after header (seconds).
	RetryAfter string

	// Malformed makes the reply a 200 whose body is not JSON (in a stream:
	// an event whose data is not JSON, after message_start).
	Malformed bool
	// StreamError, in a stream, sends an error event of this error.type
	// after the text deltas instead of finishing the message, as the API
	// does when it is overloaded mid-answer. Unary requests ignore it.
	StreamError string
	// Cut, in a stream, ends the stream after the text deltas without
	// message_delta or message_stop, as a dropped connection would.
	Cut bool
	// Stall holds the reply until the client gives up (its request's
	// context ends) or the server closes: for testing timeouts.
	Stall bool
	// Huge, when set, answers 200 with a body of this many bytes that never ends its JSON: for
	// tests of the client's bound on what it reads.
	Huge int64
}

// Call is a tool_use block in a model reply.
type Call struct {
	ID    string // the block's id; when empty, toolu_<n> numbered by the server
	Name  string
	Input map[string]any
}

// Refusal is the stop_details of a refused message.
type Refusal struct {
	Category    string // e.g. cyber; empty is sent as null
	Explanation string // empty is sent as null
}

// Usage is a reply's token counts.
type Usage struct {
	Input         int // input_tokens (not counting the cache)
	Output        int // output_tokens
	CacheCreation int // cache_creation_input_tokens; never estimated
	CacheRead     int // cache_read_input_tokens; never estimated
}

// Option configures a Server.
type Option func(*Server)

// WithRouter sets the function that names the queue a request takes its turn
// from. The default (and a nil route) routes every request to the default
// queue "". It may be called concurrently.
func WithRouter(route func(Request) string) Option {
	return func(s *Server) {
		if route != nil {
			s.route = route
		}
	}
}

// WithResponder sets the function that answers a request when its queue is
// empty; it may answer with an error turn. It may be called concurrently.
func WithResponder(respond func(Request) Turn) Option {
	return func(s *Server) { s.respond = respond }
}

// WithChunkDelay makes the server pause between the events of a streamed
// reply, so that streaming is visible in demos.
func WithChunkDelay(d time.Duration) Option {
	return func(s *Server) { s.chunkDelay = d }
}

// RouteByModel routes a request to the queue named after its model.
func RouteByModel(r Request) string { return r.Model }

// RouteBySystemPrefix returns a router that routes a request to the first of
// prefixes its system prompt starts with, and to the default queue "" when
// it starts with none of them.
func RouteBySystemPrefix(prefixes ...string) func(Request) string {
	prefixes = append([]string(nil), prefixes...)
	return func(r Request) string {
		for _, p := range prefixes {
			if strings.HasPrefix(r.System, p) {
				return p
			}
		}
		return ""
	}
}

// Server is a scripted Anthropic Messages API server on the loopback
// interface.
type Server struct {
	key        string
	route      func(Request) string
	respond    func(Request) Turn
	chunkDelay time.Duration
	srv        *httptest.Server
	closing    chan struct{} // closed by Close: stalled replies give up
	closeOnce  sync.Once

	mu       sync.Mutex
	queues   map[string][]Turn
	requests []Request
	replies  int // replies planned, for message and tool_use ids
}

// New starts a server that accepts requests carrying key. It panics if key
// is empty or the server cannot listen, as httptest.NewServer does. Stop it
// with Close.
func New(key string, opts ...Option) *Server {
	if key == "" {
		panic("anthropicserver: New needs a non-empty API key")
	}
	s := &Server{
		key:     key,
		route:   func(Request) string { return "" },
		queues:  make(map[string][]Turn),
		closing: make(chan struct{}),
	}
	for _, opt := range opts {
		opt(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.serveMessages)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("%s %s is not served by this Anthropic stand-in", r.Method, r.URL.Path), "")
	})
	s.srv = httptest.NewServer(mux)
	return s
}

// URL is the server's base URL, e.g. http://127.0.0.1:41234, for
// option.WithBaseURL.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server, releasing stalled replies, and waits for the
// requests in flight to finish.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closing) })
	s.srv.Close()
}

// Push appends turns to the default queue "".
func (s *Server) Push(turns ...Turn) { s.PushFor("", turns...) }

// PushFor appends turns to the named queue.
func (s *Server) PushFor(queue string, turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queues[queue] = append(s.queues[queue], turns...)
}

// Remaining returns how many turns are still queued, in all queues.
func (s *Server) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queues {
		n += len(q)
	}
	return n
}

// Requests returns the requests the server accepted, in the order they took
// their turns. The requests share maps with the server's record; do not
// modify them.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// serveMessages serves POST /v1/messages.
func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request) {
	apiKey, ok := s.authorize(w, r)
	if !ok {
		return
	}
	version := r.Header.Get("anthropic-version")
	if version == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required", "")
		return
	}
	req, err := decodeRequest(w, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error(), "")
		return
	}
	if err := req.validate(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error(), "")
		return
	}
	req.APIKey = apiKey
	req.Version = version
	req.Header = r.Header.Clone()
	req.Queue = s.route(req)

	turn, ok, n := s.next(req)
	switch {
	case !ok:
		writeError(w, http.StatusInternalServerError, "api_error", fmt.Sprintf("anthropicserver: the script ran out: no turn queued for queue %q (model %s) and no responder", req.Queue, req.Model), "")
		return
	case turn.Stall:
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		return
	case turn.Status != 0:
		writeError(w, turn.Status, turn.ErrorType, turn.Message, turn.RetryAfter)
		return
	case turn.Huge > 0:
		writeHuge(w, req.Stream, turn.Huge)
		return
	}
	p := plan(req, turn, n)
	if req.Stream {
		s.writeStream(w, r, p)
		return
	}
	if turn.Malformed {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"id": "msg_broken", "content": [`)) // a failed write means the client went away
		return
	}
	writeJSON(w, http.StatusOK, p.message(true))
}

// authorize checks the request's key and answers as Anthropic does when it
// is missing or wrong. It returns the header the key came in.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.Header.Get("x-api-key")
	if key == "" {
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			key = v
		}
	}
	switch {
	case key == "":
		writeError(w, http.StatusUnauthorized, "authentication_error", "x-api-key header is required", "")
		return "", false
	case subtle.ConstantTimeCompare([]byte(key), []byte(s.key)) != 1:
		writeError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key", "")
		return "", false
	}
	return key, true
}

// next records req and takes the next turn of its queue, or asks the
// responder when the queue is empty. ok is false when neither has a turn.
// n numbers the reply.
func (s *Server) next(req Request) (turn Turn, ok bool, n int) {
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.replies++
	n = s.replies
	q := s.queues[req.Queue]
	if len(q) > 0 {
		turn = q[0]
		s.queues[req.Queue] = q[1:]
		s.mu.Unlock()
		return turn, true, n
	}
	s.mu.Unlock()
	if s.respond == nil {
		return Turn{}, false, n
	}
	return s.respond(req), true, n
}

// writeStream sends the reply as server-sent events, pausing chunkDelay
// between them, until the client goes away.
func (s *Server) writeStream(w http.ResponseWriter, r *http.Request, p replyPlan) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	for i, e := range p.events() {
		if i > 0 && s.chunkDelay > 0 {
			t := time.NewTimer(s.chunkDelay)
			select {
			case <-r.Context().Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.name, e.data); err != nil {
			return // the client went away
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// writeHuge answers 200 with a body of n bytes: the start of a JSON object (for a stream, of
// one event's data) whose one string runs on to the end, as an endpoint that is not the API (or
// a broken proxy) might send. A JSON reply announces its Content-Length; a stream does not. It
// stops when the client goes away.
func writeHuge(w http.ResponseWriter, stream bool, n int64) {
	head := `{"padding": "`
	if stream {
		head = "data: " + head
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.FormatInt(max(n, int64(len(head))), 10))
	}
	w.WriteHeader(http.StatusOK)
	written, err := io.WriteString(w, head)
	pad := bytes.Repeat([]byte("x"), 64<<10)
	for left := n - int64(written); left > 0 && err == nil; left -= int64(written) {
		written, err = w.Write(pad[:min(int64(len(pad)), left)])
	}
}
