// Package geminiserver is a local stand-in for the Gemini API
// (generativelanguage.googleapis.com) for tests and demos. There is no network
// where Lush's tests run, so agentd's Gemini provider is exercised against this
// server through the real google.golang.org/genai client instead of Google's
// service. It answers from a script, not a model.
//
// New starts a server on 127.0.0.1 (loopback only); point a genai client at
// it with HTTPOptions.BaseURL set to URL(). It serves, for any API version
// segment (genai v1.77.0 uses v1beta):
//
//   - POST /{version}/models/{model}:generateContent
//   - POST /{version}/models/{model}:streamGenerateContent?alt=sse
//
// # Script
//
// Every answer is a Turn: a model reply (text and function calls, with a
// finish reason and token counts) or an error reply (an HTTP status with
// Google's error body). Turns wait in named queues: Push appends to the
// default queue "", PushFor to a named one. Each request is routed to one
// queue by the router (WithRouter; by default every request goes to the
// default queue) and takes that queue's next turn. RouteByModel and
// RouteBySystemPrefix are ready-made routers for several agents sharing one
// server: give each agent its own model name, or start each agent's system
// instruction with a marker, and push each agent's turns under that name.
//
// When the routed queue is empty the responder (WithResponder) answers, if
// there is one; it sees the decoded request, so a test can answer depending
// on what the client sent (say, the last function response). Otherwise the
// request fails with 500 INTERNAL saying the script ran out.
//
// # Replies
//
// A reply is one candidate whose content holds a text part (when Text is set)
// and a functionCall part per Call (with its id when set), with finishReason
// (STOP unless the turn says otherwise), usageMetadata and modelVersion (the
// model name from the path). Token counts not given by the turn are estimated
// at four characters a token. A streamed reply is a sequence of server-sent
// events ("data: <json>\n\n"): the text split after each space into several
// chunks, then the function calls in a chunk of their own; the last chunk
// carries the finish reason and the usage.
//
// # Errors
//
// Errors use Google's body, {"error":{"code":N,"message":"...","status":"..."}}:
//
//   - no API key (neither the x-goog-api-key header nor the key query
//     parameter): 403 PERMISSION_DENIED
//   - a key other than the server's: 400 INVALID_ARGUMENT "API key not
//     valid. Please pass a valid API key." with an ErrorInfo detail whose
//     reason is API_KEY_INVALID, as Google answers
//   - a body that is not JSON: 400 INVALID_ARGUMENT
//   - streamGenerateContent without alt=sse: 400 INVALID_ARGUMENT (only
//     server-sent events are implemented)
//   - any other path or method: 404 NOT_FOUND
//   - the script ran out: 500 INTERNAL
//
// The server records every request it accepted (authenticated and decoded);
// Requests returns them so tests can assert what the client sent. A Server is
// safe for concurrent use.
package geminiserver

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
	"time"
)

// Turn is one scripted answer: a model reply, or an error reply when Status
// is set.
type Turn struct {
	Text         string // the reply's text; may be empty when Calls are set
	Calls        []Call // function calls, after the text
	Usage        Usage  // token counts; zero counts are estimated
	FinishReason string // the candidate's finishReason; STOP when empty

	// BlockReason, when set, makes the reply one with no candidates and
	// promptFeedback.blockReason set to it (e.g. SAFETY), as when Gemini
	// blocks the prompt. Text and Calls are ignored.
	BlockReason string

	// Status makes the turn an error reply with this HTTP status.
	Status int
	// Code is the error's status string, e.g. RESOURCE_EXHAUSTED; when empty
	// it is the canonical code for Status.
	Code string
	// Message is the error message; when empty, the HTTP status text.
	Message string
	// Huge, when set, answers 200 with a body of this many bytes that never ends its JSON: for
	// tests of the client's bound on what it reads.
	Huge int64
}

// Call is a function call in a model reply.
type Call struct {
	Name string
	Args map[string]any
	ID   string // sent as functionCall.id when set
}

// Usage is a reply's token counts.
type Usage struct {
	Prompt     int // promptTokenCount
	Candidates int // candidatesTokenCount
	Thoughts   int // thoughtsTokenCount; never estimated
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

// RouteByModel routes a request to the queue named after its model, e.g.
// "gemini-2.5-flash".
func RouteByModel(r Request) string { return r.Model }

// RouteBySystemPrefix returns a router that routes a request to the first of
// prefixes its system instruction starts with, and to the default queue ""
// when it starts with none of them.
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

// Server is a scripted Gemini API server on the loopback interface.
type Server struct {
	key        string
	route      func(Request) string
	respond    func(Request) Turn
	chunkDelay time.Duration
	srv        *httptest.Server

	mu        sync.Mutex
	queues    map[string][]Turn
	requests  []Request
	responses int // replies sent, for responseId
}

// New starts a server that accepts requests carrying key. It panics if key
// is empty or the server cannot listen, as httptest.NewServer does. Stop it
// with Close.
func New(key string, opts ...Option) *Server {
	if key == "" {
		panic("geminiserver: New needs a non-empty API key")
	}
	s := &Server{
		key:    key,
		route:  func(Request) string { return "" },
		queues: make(map[string][]Turn),
	}
	for _, opt := range opts {
		opt(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /{version}/models/{call}", s.serveModel)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("%s %s is not served by this Gemini stand-in", r.Method, r.URL.Path), nil)
	})
	s.srv = httptest.NewServer(mux)
	return s
}

// URL is the server's base URL, e.g. http://127.0.0.1:41234, for
// genai.HTTPOptions.BaseURL.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server and waits for the requests in flight to finish.
func (s *Server) Close() { s.srv.Close() }

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

// serveModel serves POST /{version}/models/{model}:{method}.
func (s *Server) serveModel(w http.ResponseWriter, r *http.Request) {
	model, method, _ := strings.Cut(r.PathValue("call"), ":")
	var stream bool
	switch method {
	case "generateContent":
	case "streamGenerateContent":
		stream = true
	default:
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("method %q of models/%s is not served by this Gemini stand-in", method, model), nil)
		return
	}
	if !s.authorize(w, r) {
		return
	}
	if stream && r.URL.Query().Get("alt") != "sse" {
		writeError(w, http.StatusBadRequest, "", "this Gemini stand-in streams only server-sent events; ask with alt=sse", nil)
		return
	}
	req, err := decodeRequest(w, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error(), nil)
		return
	}
	req.Version = r.PathValue("version")
	req.Model = model
	req.Stream = stream
	req.Queue = s.route(req)

	turn, ok, responseID := s.next(req)
	switch {
	case !ok:
		writeError(w, http.StatusInternalServerError, "", fmt.Sprintf("geminiserver: the script ran out: no turn queued for queue %q (model %s) and no responder", req.Queue, req.Model), nil)
	case turn.Status != 0:
		writeError(w, turn.Status, turn.Code, turn.Message, nil)
	case turn.Huge > 0:
		writeHuge(w, stream, turn.Huge)
	case stream:
		s.writeStream(w, r, reply(req, turn, responseID).chunks())
	default:
		writeJSON(w, http.StatusOK, reply(req, turn, responseID).whole())
	}
}

// authorize checks the request's API key and answers as Google does when it
// is missing or wrong.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	key := r.Header.Get("x-goog-api-key")
	if key == "" {
		key = r.URL.Query().Get("key")
	}
	switch {
	case key == "":
		writeError(w, http.StatusForbidden, "", "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.", nil)
		return false
	case subtle.ConstantTimeCompare([]byte(key), []byte(s.key)) != 1:
		writeError(w, http.StatusBadRequest, "", "API key not valid. Please pass a valid API key.", []map[string]any{{
			"@type":  "type.googleapis.com/google.rpc.ErrorInfo",
			"reason": "API_KEY_INVALID",
			"domain": "googleapis.com",
		}})
		return false
	}
	return true
}

// next records req and takes the next turn of its queue, or asks the
// responder when the queue is empty. ok is false when neither has a turn.
// responseID names the reply.
func (s *Server) next(req Request) (turn Turn, ok bool, responseID string) {
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.responses++
	responseID = fmt.Sprintf("geminiserver-%d", s.responses)
	q := s.queues[req.Queue]
	if len(q) > 0 {
		turn = q[0]
		s.queues[req.Queue] = q[1:]
		s.mu.Unlock()
		return turn, true, responseID
	}
	s.mu.Unlock()
	if s.respond == nil {
		return Turn{}, false, responseID
	}
	return s.respond(req), true, responseID
}

// writeStream sends chunks as server-sent events, pausing chunkDelay between
// them, until the client goes away.
func (s *Server) writeStream(w http.ResponseWriter, r *http.Request, chunks []response) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	for i, c := range chunks {
		if i > 0 && s.chunkDelay > 0 {
			t := time.NewTimer(s.chunkDelay)
			select {
			case <-r.Context().Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		b, err := json.Marshal(c)
		if err != nil {
			return // the response types always marshal
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return // the client went away
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// writeJSON writes v as a JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a failed write means the client went away
}

// writeError writes Google's error body. An empty code is the canonical code
// for status; an empty message is the status text.
func writeError(w http.ResponseWriter, status int, code, message string, details []map[string]any) {
	if code == "" {
		code = canonicalCode(status)
	}
	if message == "" {
		message = http.StatusText(status)
	}
	type errorBody struct {
		Code    int              `json:"code"`
		Message string           `json:"message"`
		Status  string           `json:"status"`
		Details []map[string]any `json:"details,omitempty"`
	}
	writeJSON(w, status, map[string]errorBody{"error": {Code: status, Message: message, Status: code, Details: details}})
}

// canonicalCode is the google.rpc.Code name Google's APIs pair with an HTTP
// status.
func canonicalCode(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case http.StatusInternalServerError:
		return "INTERNAL"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	return "UNKNOWN"
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
