package mcphttp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// sseWriter writes Server-Sent Events.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func newSSEWriter(w http.ResponseWriter) (*sseWriter, bool) {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}, true
}

func (s *sseWriter) start(status int) {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(status)
	s.started = true
	s.rc.Flush()
}

func (s *sseWriter) event(name string, data []byte) error {
	buf := make([]byte, 0, len(data)+32)
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...) // JSON has no raw newlines
	buf = append(buf, "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// eventID writes an event with an id (resume.go).
func (s *sseWriter) eventID(id, name string, data []byte) error {
	buf := make([]byte, 0, len(data)+len(id)+36)
	buf = append(buf, "id: "...)
	buf = append(buf, id...)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// prime writes the priming event of a resumable stream: an id and empty data, with the time a
// client waits before it reconnects.
func (s *sseWriter) prime(id string, retry time.Duration) error {
	if _, err := fmt.Fprintf(s.w, "id: %s\nretry: %d\ndata: \n\n", id, retry.Milliseconds()); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sseWriter) comment(text string) error {
	if _, err := s.w.Write([]byte(": " + text + "\n\n")); err != nil {
		return err
	}
	return s.rc.Flush()
}

// responseStream is the answer to one POSTed request: a JSON body, or an SSE stream once a
// notification is sent before the response.
type responseStream struct {
	mu        sync.Mutex
	w         http.ResponseWriter
	stream    bool // the client accepts text/event-stream
	stateless bool // the request is of MCP 2026-07-28 (stateless.go)
	sse       *sseWriter
	done      bool
	primed    string        // the stream's id once primed: its events have ids (resume.go)
	seq       int           // the last event's number, when primed without a replay record
	replay    *replayStream // where a primed stream's events are kept, when they are
	detached  bool          // the POST has ended: messages go to replay only
}

// write writes a message on the SSE stream, with an id once primed. The caller holds r.mu.
func (r *responseStream) write(msg []byte, final bool) error {
	if r.primed == "" {
		if r.detached {
			return errFinished
		}
		return r.sse.event("message", msg)
	}
	var id string
	if r.replay != nil {
		id = r.replay.add(msg, final)
	} else {
		r.seq++
		id = r.primed + "_" + strconv.Itoa(r.seq)
	}
	if r.detached {
		return nil
	}
	return r.sse.eventID(id, "message", msg)
}

// prime turns the response into a primed SSE stream (SEP-1699): its events get ids, and are
// recorded in rs when it is not nil. It reports whether it did (not once the response is written).
func (r *responseStream) prime(rs *replayStream, retry time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || r.detached || r.primed != "" {
		return false
	}
	if r.sse == nil {
		r.sse, _ = newSSEWriter(r.w)
		r.sse.start(http.StatusOK)
	}
	if rs != nil {
		r.replay, r.primed = rs, rs.id
	} else {
		r.primed = nonce()
	}
	r.sse.prime(r.primed+"_0", retry)
	return true
}

// detach ends the response's use of its POST: nothing is written to it from now on. It reports
// whether the stream was primed (its further messages are kept for a resumption).
func (r *responseStream) detach() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.detached = true
	return r.replay != nil
}

var errFinished = errors.New("the request has finished")

func (r *responseStream) notify(method string, params any) error {
	if !r.stream {
		return errors.New("the client did not accept a stream (Accept: text/event-stream)")
	}
	msg, err := notification(method, params)
	if err != nil {
		return err
	}
	return r.send(msg)
}

// send writes a message of the server before the response, upgrading the response to an SSE
// stream.
func (r *responseStream) send(msg []byte) error {
	if !r.stream {
		return errors.New("the client did not accept a stream (Accept: text/event-stream)")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return errFinished
	}
	if r.sse == nil && !r.detached {
		r.sse, _ = newSSEWriter(r.w)
		r.sse.start(http.StatusOK)
	}
	return r.write(msg, false)
}

// finish writes the response. It returns the stream's replay record when the response was
// written on the POST's stream, which the client then has in full; nil otherwise.
func (r *responseStream) finish(id []byte, result any, err error, log *slog.Logger) *replayStream {
	var rpcErr *Error
	if err != nil && !errors.As(err, &rpcErr) {
		log.Error("mcp handler failed", "error", err)
		rpcErr = Errorf(CodeInternalError, "internal error")
	}
	if r.stateless && rpcErr == nil {
		result = statelessResult(result)
	}
	if r.stateless && rpcErr != nil {
		rpcErr = statelessError(rpcErr)
	}
	body, merr := response(id, result, rpcErr)
	if merr != nil {
		log.Error("encode mcp response", "error", merr)
		rpcErr = Errorf(CodeInternalError, "internal error: the result cannot be encoded")
		body, _ = response(id, nil, rpcErr)
	}
	status := http.StatusOK
	if r.stateless && rpcErr != nil {
		status = statelessStatus(rpcErr.Code)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	if r.sse != nil || r.detached {
		r.write(body, true)
		if !r.detached {
			return r.replay
		}
		return nil
	}
	r.w.Header().Set("Content-Type", "application/json")
	r.w.WriteHeader(status)
	r.w.Write(body)
	return nil
}

// hub routes server messages to the open streams of sessions on this replica. It holds at most
// max streams, and at most perSession of one session.
type hub struct {
	max, perSession int

	mu      sync.Mutex
	streams map[string][]*streamEntry // session id -> streams, newest last
	open    int                       // streams in streams
	shut    bool                      // the server is stopping: no new streams
}

type streamEntry struct {
	endpoint string
	answers  bool // a legacy SSE stream: it carries the answers of requests in flight
	ch       chan []byte
	closed   bool
}

func newHub(limit, perSession int) *hub {
	return &hub{max: limit, perSession: perSession, streams: map[string][]*streamEntry{}}
}

const streamBuffer = 64

var (
	errHubShut     = errors.New("the server is shutting down")
	errTooManyOpen = errors.New("this replica holds the most streams it may: retry later, or on another replica")
)

// register opens a stream for a session; answers marks a stream that carries the answers of
// requests (the legacy transport's). A session's streams beyond perSession end, oldest first.
// It fails once the hub is shut (errHubShut) or holds max streams (errTooManyOpen).
func (h *hub) register(session, endpoint string, answers bool) (<-chan []byte, func(), error) {
	e := &streamEntry{endpoint: endpoint, answers: answers, ch: make(chan []byte, streamBuffer)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shut {
		return nil, nil, errHubShut
	}
	list := h.streams[session]
	drop := max(len(list)-h.perSession+1, 0) // end the oldest: messages go to the newest only
	if h.open-drop >= h.max {
		return nil, nil, errTooManyOpen
	}
	for _, x := range list[:drop] {
		x.close()
	}
	h.open -= drop
	list = append(list[:0:0], list[drop:]...)
	h.streams[session] = append(list, e)
	h.open++
	return e.ch, func() { h.unregister(session, e) }, nil
}

// unregister forgets a stream once its request ends.
func (h *hub) unregister(session string, e *streamEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.streams[session]
	for i, x := range list {
		if x == e {
			h.streams[session] = append(list[:i:i], list[i+1:]...)
			h.open--
			break
		}
	}
	if len(h.streams[session]) == 0 {
		delete(h.streams, session)
	}
	e.close()
}

func (e *streamEntry) close() {
	if !e.closed {
		e.closed = true
		close(e.ch)
	}
}

// send delivers msg to the newest stream of a session without blocking; a stream that does not
// keep up loses the message (the client sees a gap, never a stalled server).
func (h *hub) send(session string, msg []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.streams[session]
	if len(list) == 0 {
		return false
	}
	select {
	case list[len(list)-1].ch <- msg:
		return true
	default:
		return false
	}
}

func (h *hub) broadcast(endpoint string, msg []byte) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, list := range h.streams {
		if len(list) == 0 || list[len(list)-1].endpoint != endpoint {
			continue
		}
		select {
		case list[len(list)-1].ch <- msg:
			n++
		default:
		}
	}
	return n
}

func (h *hub) close(session string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.streams[session] {
		e.close()
	}
	h.open -= len(h.streams[session])
	delete(h.streams, session)
}

// shutStreams refuses new streams from now on and ends the open ones: all of them, or only
// those that carry no answers (keepAnswers). A stream ends once the messages queued on it are
// written.
func (h *hub) shutStreams(keepAnswers bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.shut = true
	for id, list := range h.streams {
		kept := list[:0]
		for _, e := range list {
			if keepAnswers && e.answers {
				kept = append(kept, e)
			} else {
				e.close()
			}
		}
		h.open -= len(list) - len(kept)
		if len(kept) == 0 {
			delete(h.streams, id)
		} else {
			h.streams[id] = kept
		}
	}
}
