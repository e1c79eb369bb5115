package mcphttp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// Server-initiated requests (elicitation, sampling, roots) go to the client on the stream of the
// request they are about: the SSE response of a POST (streamable HTTP), or the session's SSE
// stream (HTTP+SSE). The client POSTs its answer as a JSON-RPC response carrying our id; the
// question waiting for it is found by that id, and only when the answer comes from the session
// and principal that were asked. Questions wait in memory on the replica that asked: an answer
// POSTed to another replica finds nothing there (docs/gateway.md).

// Bounds of the questions waiting for an answer.
const (
	DefaultMaxAsks           = 4096 // on this server
	DefaultMaxAsksPerSession = 16   // of one session
)

// Errors of Request.Ask.
var (
	// ErrCannotAsk: the request cannot carry a question to its client: the client did not accept
	// a stream, the request has no session to answer on (initialize, a 2026-07-28 stateless
	// request), or it has finished.
	ErrCannotAsk = errors.New("this request cannot carry a question to the client")
	// ErrTooManyAsks: the session, or the server, already waits for the most answers it may.
	ErrTooManyAsks = errors.New("too many questions to clients waiting for an answer")
)

// askIDPrefix marks the ids of our questions; the rest is random, so an id cannot be guessed.
const askIDPrefix = "lush-q-"

// Ask sends a JSON-RPC request (method, params) to the client that made r, on r's stream, and
// waits for the client's answer: its result, or an *Error for a JSON-RPC error. It ends with ctx,
// or when r finishes (ErrCannotAsk). When ctx ends first, the client is told the question is
// cancelled.
func (r *Request) Ask(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if r.ask == nil {
		return nil, ErrCannotAsk
	}
	return r.ask(ctx, method, params)
}

// CanAsk reports whether r can carry a question to its client.
func (r *Request) CanAsk() bool { return r.ask != nil }

// asks holds the questions waiting for an answer. Its zero value is ready to use.
type asks struct {
	max, maxPerSession int // 0: the defaults

	mu         sync.Mutex
	pending    map[string]*pendingAsk // our id -> question
	perSession map[string]int         // session id -> questions pending
}

type pendingAsk struct {
	session   string // the session asked
	principal string // its principal's digest
	answer    chan *Message
}

// add registers a question, unless the bounds are reached.
func (a *asks) add(id, session, principal string) (*pendingAsk, error) {
	limit, perSession := a.max, a.maxPerSession
	if limit <= 0 {
		limit = DefaultMaxAsks
	}
	if perSession <= 0 {
		perSession = DefaultMaxAsksPerSession
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending, a.perSession = map[string]*pendingAsk{}, map[string]int{}
	}
	if len(a.pending) >= limit || a.perSession[session] >= perSession {
		return nil, ErrTooManyAsks
	}
	p := &pendingAsk{session: session, principal: principal, answer: make(chan *Message, 1)}
	a.pending[id] = p
	a.perSession[session]++
	return p, nil
}

func (a *asks) remove(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.pending[id]
	if !ok {
		return
	}
	delete(a.pending, id)
	if a.perSession[p.session]--; a.perSession[p.session] <= 0 {
		delete(a.perSession, p.session)
	}
}

// deliver hands an answer to the question it names, when the session and principal it comes
// from are the ones asked. It reports whether a question took it.
func (a *asks) deliver(session, principal string, m *Message) bool {
	var id string
	if json.Unmarshal(m.ID, &id) != nil {
		return false // our ids are strings
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.pending[id]
	if !ok || p.session != session || subtle.ConstantTimeCompare([]byte(p.principal), []byte(principal)) != 1 {
		return false
	}
	delete(a.pending, id) // one answer per question
	if a.perSession[p.session]--; a.perSession[p.session] <= 0 {
		delete(a.perSession, p.session)
	}
	p.answer <- m // buffered: never blocks
	return true
}

// asker returns the Ask function of a request of session (principal: its digest) that sends on
// send and ends with done.
func (s *Server) asker(done context.Context, session, principal string, send func([]byte) error) func(context.Context, string, any) (json.RawMessage, error) {
	return func(ctx context.Context, method string, params any) (json.RawMessage, error) {
		if done.Err() != nil {
			return nil, ErrCannotAsk
		}
		id := askID()
		msg, err := request(id, method, params)
		if err != nil {
			return nil, fmt.Errorf("encode the %s request to the client: %w", method, err)
		}
		p, err := s.asks.add(id, session, principal)
		if err != nil {
			return nil, err
		}
		defer s.asks.remove(id)
		if err := send(msg); err != nil {
			return nil, fmt.Errorf("send %s to the client: %w", method, err)
		}
		select {
		case m := <-p.answer:
			if m.Error != nil {
				return nil, m.Error
			}
			return m.Result, nil
		case <-ctx.Done():
			s.cancelAsk(send, id, "the server no longer needs the answer")
			return nil, fmt.Errorf("wait for the client's answer to %s: %w", method, context.Cause(ctx))
		case <-done.Done():
			return nil, fmt.Errorf("wait for the client's answer to %s: %w", method, ErrCannotAsk)
		case <-s.ctx.Done():
			return nil, fmt.Errorf("wait for the client's answer to %s: the server is stopping", method)
		}
	}
}

// cancelAsk tells the client, when it can still be told, that a question is withdrawn.
func (s *Server) cancelAsk(send func([]byte) error, id, reason string) {
	raw, _ := json.Marshal(id)
	msg, err := notification("notifications/cancelled", map[string]any{"requestId": json.RawMessage(raw), "reason": reason})
	if err == nil {
		_ = send(msg) // best effort: the stream may be gone
	}
}

// answer takes a JSON-RPC response POSTed by a client: the answer to one of our questions. One
// that answers no question waiting here for this session and principal is refused with 400 (not
// 404, which tells a client its session is gone).
func (s *Server) answer(w http.ResponseWriter, session, principal string, m *Message) {
	if !s.asks.deliver(session, principal, m) {
		writeHTTPError(w, http.StatusBadRequest, nil, Errorf(CodeInvalidRequest, `the response's "id" answers no request of this server waiting for this session (answers go to the replica that asked, before the request they are about ends)`))
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// askID returns an unguessable id for a question.
func askID() string {
	b := make([]byte, 18)
	rand.Read(b)
	return askIDPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// request builds a request message.
func request(id, method string, params any) ([]byte, error) {
	return json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      string `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", id, method, params})
}

// stateless reports whether a protocol version is of the stateless era (2026-07-28 on), whose
// requests get no server-initiated requests: a server asks with an input_required result.
func stateless(version string) bool { return version >= "2026-07-28" }
