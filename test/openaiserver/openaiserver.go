// Package openaiserver is a local stand-in for the OpenAI chat completions API (and the
// OpenAI-compatible servers that speak it: vLLM, Ollama, LiteLLM, llama.cpp) for tests and demos.
// There is no network where Lush's tests run, so agentd's OpenAI provider is exercised against
// this server through the official github.com/openai/openai-go client. It answers from a script,
// not a model.
//
// New starts a server on 127.0.0.1 (loopback only); point a client at URL() (the base URL,
// ending in /v1). It serves POST /v1/chat/completions, as JSON or, with "stream": true, as
// server-sent events ending in "data: [DONE]".
//
// # Script
//
// Every answer is a Turn: an assistant message (text, tool calls, a refusal, a finish reason
// and token counts), an error reply (an HTTP status with OpenAI's error body, optionally with
// Retry-After), a malformed body, or a hang that lasts until the client goes away (to test
// timeouts through the client's context, not sleeps). Turns wait in named queues: Push appends
// to the default queue "", PushFor to a named one; the router (WithRouter; RouteByModel,
// RouteBySystemPrefix) names the queue of each request. When the queue is empty the responder
// (WithResponder) answers, if there is one; otherwise the request fails with 500 saying the
// script ran out.
//
// # Replies
//
// A reply is one choice whose message holds the turn's text (content), refusal and tool calls
// (with ids call_<n> unless the turn names them), with finish_reason "stop" ("tool_calls" when
// there are calls) unless the turn says otherwise, and usage. Token counts not given are
// estimated at four characters a token. A streamed reply sends the text in several chunks (split
// after each space), then each tool call as a first chunk (id, name) and its arguments in two
// halves, then a chunk with the finish reason; with stream_options.include_usage, a last chunk
// with no choices carries the usage, as OpenAI sends it.
//
// # Errors
//
// Errors use OpenAI's body, {"error":{"message","type","param","code"}}:
//
//   - no bearer key in Authorization: 401, type invalid_request_error, code "" ("You didn't
//     provide an API key…")
//   - a key other than the server's: 401, code invalid_api_key; the message quotes the key
//     masked, as OpenAI does ("sk-ab*****xyz")
//   - a body that is not JSON, or without model or messages: 400 invalid_request_error
//   - any other path or method: 404
//   - the script ran out: 500 server_error
//
// A server made with an empty key (NewKeyless) accepts requests without a key, as a local
// OpenAI-compatible server does.
//
// The server records every request it accepted (authenticated and decoded), with its headers;
// Requests returns them so tests can assert what the client sent. A Server is safe for
// concurrent use.
package openaiserver

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
)

// Turn is one scripted answer.
type Turn struct {
	Text         string // the message's content; may be empty when Calls or Refusal are set
	Calls        []Call // tool calls
	Refusal      string // the message's refusal
	FinishReason string // stop (default), tool_calls (default with Calls), length, content_filter
	Usage        Usage  // token counts; zero counts are estimated

	// Status makes the turn an error reply with this HTTP status.
	Status int
	// Type and Code are the error's type (default: the one OpenAI sends with Status, e.g.
	// server_error for a 5xx) and code (e.g. rate_limit_exceeded); Message is its message
	// (default: the status text).
	Type, Code, Message string
	// RetryAfter, when set, is sent as the Retry-After header of an error reply ("0" makes the
	// client retry at once).
	RetryAfter string

	// Malformed answers 200 with this body, which is not what the API sends (for a stream, as the
	// data of one event).
	Malformed string
	// Hang holds the request until the client goes away (its context ends), then answers nothing.
	Hang bool
	// Huge, when set, answers 200 with a body of this many bytes that never ends its JSON: for
	// tests of the client's bound on what it reads.
	Huge int64
}

// Call is a tool call of an assistant message.
type Call struct {
	ID   string // call_<n> when empty
	Name string
	Args map[string]any
	// RawArgs, when set, is sent as the arguments instead of Args encoded (to send arguments
	// that are not JSON, as a model sometimes does).
	RawArgs string
}

// Usage is a reply's token counts.
type Usage struct {
	Prompt     int // prompt_tokens
	Completion int // completion_tokens
}

// Request is a request the server accepted.
type Request struct {
	Model        string
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	Messages     []Message
	Tools        []Tool
	ToolChoice   json.RawMessage
	Header       http.Header // the request's headers: Authorization, OpenAI-Organization, OpenAI-Project…
	System       string      // the content of the first message when it is a system (or developer) message
	Queue        string      // the queue the router chose
	Body         json.RawMessage
}

// Message is one message of a request.
type Message struct {
	Role       string     `json:"role"`
	Content    Content    `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Refusal    string     `json:"refusal,omitempty"`
}

// Content is a message's content: a string, or the text of its parts joined.
type Content string

// UnmarshalJSON reads a string, null, or an array of parts ({"type":"text","text":…}).
func (c *Content) UnmarshalJSON(b []byte) error {
	var s *string
	if err := json.Unmarshal(b, &s); err == nil {
		if s != nil {
			*c = Content(*s)
		}
		return nil
	}
	var parts []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return fmt.Errorf("content is neither a string nor a list of parts: %w", err)
	}
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text + p.Refusal)
	}
	*c = Content(sb.String())
	return nil
}

// ToolCall is a tool call in an assistant message the client sent back.
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Tool is a tool the client offered.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	} `json:"function"`
}

// Option configures a Server.
type Option func(*Server)

// WithRouter sets the function that names the queue a request takes its turn from (default: the
// queue ""). It may be called concurrently.
func WithRouter(route func(Request) string) Option {
	return func(s *Server) {
		if route != nil {
			s.route = route
		}
	}
}

// WithResponder sets the function that answers a request when its queue is empty. It may be
// called concurrently.
func WithResponder(respond func(Request) Turn) Option {
	return func(s *Server) { s.respond = respond }
}

// RouteByModel routes a request to the queue named after its model.
func RouteByModel(r Request) string { return r.Model }

// RouteBySystemPrefix routes a request to the first of prefixes its system message starts
// with, and to the default queue "" when it starts with none of them.
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

// MaxBody bounds a request body.
const MaxBody = 8 << 20

// Server is a scripted OpenAI chat completions server on the loopback interface.
type Server struct {
	key     string
	route   func(Request) string
	respond func(Request) Turn
	srv     *httptest.Server

	mu       sync.Mutex
	queues   map[string][]Turn
	requests []Request
	replies  int
}

// New starts a server that accepts requests carrying key as a bearer token. It panics if key is
// empty (use NewKeyless) or the server cannot listen, as httptest.NewServer does. Stop it with
// Close.
func New(key string, opts ...Option) *Server {
	if key == "" {
		panic("openaiserver: New needs a non-empty API key (NewKeyless for a server without one)")
	}
	return start(key, opts)
}

// NewKeyless starts a server that accepts requests without a key, as a local OpenAI-compatible
// server (Ollama, vLLM) does.
func NewKeyless(opts ...Option) *Server { return start("", opts) }

func start(key string, opts []Option) *Server {
	s := &Server{key: key, route: func(Request) string { return "" }, queues: map[string][]Turn{}}
	for _, opt := range opts {
		opt(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.serveCompletions)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", fmt.Sprintf("Invalid URL (%s %s): this OpenAI stand-in serves POST /v1/chat/completions", r.Method, r.URL.Path))
	})
	s.srv = httptest.NewServer(mux)
	return s
}

// URL is the server's base URL, ending in /v1, for option.WithBaseURL or a models: entry's
// base_url.
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Close stops the server. Hanging requests end when their clients go away; Close waits for them.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
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

// Requests returns the requests the server accepted, in the order they took their turns.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// serveCompletions serves POST /v1/chat/completions.
func (s *Server) serveCompletions(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r) {
		return
	}
	req, err := decode(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
		return
	}
	req.Queue = s.route(req)
	turn, ok, id := s.next(req)
	switch {
	case !ok:
		writeError(w, http.StatusInternalServerError, "server_error", "", fmt.Sprintf("openaiserver: the script ran out: no turn queued for queue %q (model %s) and no responder", req.Queue, req.Model))
	case turn.Hang:
		<-r.Context().Done()
	case turn.Huge > 0:
		writeHuge(w, req.Stream, turn.Huge)
	case turn.Status != 0:
		if turn.RetryAfter != "" {
			w.Header().Set("Retry-After", turn.RetryAfter)
		}
		writeError(w, turn.Status, turn.Type, turn.Code, turn.Message)
	case turn.Malformed != "" && req.Stream:
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", turn.Malformed)
	case turn.Malformed != "":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, turn.Malformed)
	case req.Stream:
		writeStream(w, chunks(req, turn, id))
	default:
		writeJSON(w, http.StatusOK, whole(req, turn, id))
	}
}

// authorize checks the bearer key and answers as OpenAI does when it is missing or wrong.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	if s.key == "" {
		return true
	}
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case !ok || key == "":
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "",
			"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
		return false
	case subtle.ConstantTimeCompare([]byte(key), []byte(s.key)) != 1:
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			fmt.Sprintf("Incorrect API key provided: %s. You can find your API key at https://platform.openai.com/account/api-keys.", mask(key)))
		return false
	}
	return true
}

// mask shows a key as OpenAI's error does: its first and last characters.
func mask(key string) string {
	if len(key) < 8 {
		return "****"
	}
	return key[:3] + strings.Repeat("*", len(key)-7) + key[len(key)-4:]
}

// decode reads a request body.
func decode(r *http.Request) (Request, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return Request{}, fmt.Errorf("reading the body: %w", err)
	}
	if len(body) > MaxBody {
		return Request{}, fmt.Errorf("the body is larger than %d bytes", MaxBody)
	}
	var wire struct {
		Model         string          `json:"model"`
		Messages      []Message       `json:"messages"`
		Tools         []Tool          `json:"tools"`
		ToolChoice    json.RawMessage `json:"tool_choice"`
		Stream        bool            `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		return Request{}, fmt.Errorf("could not parse the JSON body of your request: %v", err)
	}
	if wire.Model == "" {
		return Request{}, fmt.Errorf("you must provide a model parameter")
	}
	if len(wire.Messages) == 0 {
		return Request{}, fmt.Errorf("'messages' must contain at least one message")
	}
	req := Request{Model: wire.Model, Stream: wire.Stream, Messages: wire.Messages, Tools: wire.Tools, ToolChoice: wire.ToolChoice,
		Header: r.Header.Clone(), Body: body}
	if wire.StreamOptions != nil {
		req.IncludeUsage = wire.StreamOptions.IncludeUsage
	}
	if m := wire.Messages[0]; m.Role == "system" || m.Role == "developer" {
		req.System = string(m.Content)
	}
	return req, nil
}

// next records req and takes its queue's next turn, or the responder's. id names the reply.
func (s *Server) next(req Request) (turn Turn, ok bool, id string) {
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.replies++
	id = fmt.Sprintf("chatcmpl-openaiserver-%d", s.replies)
	if q := s.queues[req.Queue]; len(q) > 0 {
		turn = q[0]
		s.queues[req.Queue] = q[1:]
		s.mu.Unlock()
		return turn, true, id
	}
	s.mu.Unlock()
	if s.respond == nil {
		return Turn{}, false, id
	}
	return s.respond(req), true, id
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a failed write means the client went away
}

// writeError writes OpenAI's error body; an empty type is the one OpenAI uses for status.
func writeError(w http.ResponseWriter, status int, typ, code, message string) {
	if typ == "" {
		typ = errorType(status)
	}
	if message == "" {
		message = http.StatusText(status)
	}
	var c any
	if code != "" {
		c = code
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": c}})
}

// errorType is the error type OpenAI sends with a status.
func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// writeStream sends events, then [DONE].
func writeStream(w http.ResponseWriter, events []any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	for _, e := range events {
		b, err := json.Marshal(e)
		if err != nil {
			return // the reply types always marshal
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return // the client went away
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
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
