package mcphttp

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Resumable response streams (MCP 2025-11-25, SEP-1699). A tools/call of a 2025-11-25 session
// that is still running after Config.StreamAfter is answered as an SSE stream: a priming event
// (an event id, empty data, and a retry hint) first, then every message with an id. When
// Config.PollAfter is set, the server ends a stream still open after that long; the request goes
// on, and the client resumes with a GET carrying Last-Event-ID, which replays what it missed and
// follows the request to its response. A primed request also goes on when its client drops the
// connection: the client holds an event id and may resume (before priming, dropping it cancels
// the request, as it always did).
//
// The messages of a primed stream are kept in a replay buffer on the replica that runs the
// request, bounded in count and bytes per stream, in streams per server and in bytes per server.
// A stream whose response was written on its POST is kept deliveredTTL after it (the client may
// have dropped the connection as it was written); one the POST left early (polling, or the
// client dropping it) Config.ReplayTTL after its response. A
// resumption that reaches another replica, comes after the buffer expired, or whose response was
// too large to keep, is refused (400): the request's answer is lost and the client calls again.

// Defaults of the replay buffers.
const (
	DefaultMaxReplayStreams = 1000
	DefaultReplayTTL        = 2 * time.Minute
	maxReplayEvents         = 256      // per stream: beyond, the oldest are dropped
	maxReplayBytes          = 1 << 20  // per stream: beyond, the oldest are dropped
	maxReplayTotal          = 64 << 20 // per server: an event beyond it is not kept
	deliveredTTL            = 10 * time.Second
)

// replayStream is the record of one primed response stream.
type replayStream struct {
	id, session string
	owner       *replays

	mu        sync.Mutex
	events    []replayEvent
	size      int           // bytes of events
	seq       int           // the last event's sequence number (0: the priming event)
	done      bool          // the response is in events, or lost
	lost      bool          // an event was too large to keep: the stream cannot be resumed
	ended     time.Time     // when it became done
	delivered bool          // the response was written on the POST
	changed   chan struct{} // closed (and replaced) when an event is added or the stream is done
}

type replayEvent struct {
	seq  int
	data []byte
}

// eventID is the SSE id of a stream's event.
func (rs *replayStream) eventID(seq int) string { return rs.id + "_" + strconv.Itoa(seq) }

// add records a message and returns its event id; final marks the response.
func (rs *replayStream) add(data []byte, final bool) string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.seq++
	if len(data) > maxReplayBytes || rs.owner.size.Add(int64(len(data))) > maxReplayTotal {
		if len(data) <= maxReplayBytes {
			rs.owner.size.Add(-int64(len(data)))
		}
		rs.lost = true
	} else {
		rs.events = append(rs.events, replayEvent{rs.seq, data})
		rs.size += len(data)
	}
	for len(rs.events) > 0 && (len(rs.events) > maxReplayEvents || rs.size > maxReplayBytes) {
		rs.size -= len(rs.events[0].data)
		rs.owner.size.Add(-int64(len(rs.events[0].data)))
		rs.events = rs.events[1:]
	}
	if final {
		rs.done, rs.ended = true, time.Now()
	}
	close(rs.changed)
	rs.changed = make(chan struct{})
	return rs.eventID(rs.seq)
}

// since returns the events after seq, whether the stream is done, and a channel closed on the
// next change.
func (rs *replayStream) since(seq int) ([]replayEvent, bool, <-chan struct{}) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []replayEvent
	for _, e := range rs.events {
		if e.seq > seq {
			out = append(out, e)
		}
	}
	return out, rs.done, rs.changed
}

func (rs *replayStream) expired(now time.Time, ttl time.Duration) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.delivered {
		ttl = min(ttl, deliveredTTL)
	}
	return rs.done && now.Sub(rs.ended) >= ttl
}

// deliver marks the stream's response as written on its POST.
func (rs *replayStream) deliver() {
	rs.mu.Lock()
	rs.delivered = true
	rs.mu.Unlock()
}

// release lets go of the stream's events.
func (rs *replayStream) release() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.owner.size.Add(-int64(rs.size))
	rs.events, rs.size, rs.lost = nil, 0, true
}

// replays holds the primed streams of a server, bounded.
type replays struct {
	max  int
	ttl  time.Duration
	size atomic.Int64 // bytes of events kept, in all streams

	mu      sync.Mutex
	streams map[string]*replayStream
}

// drop forgets a stream.
func (p *replays) drop(rs *replayStream) {
	p.mu.Lock()
	delete(p.streams, rs.id)
	p.mu.Unlock()
	rs.release()
}

// open starts recording a stream of a session; nil when the server holds the most it may.
func (p *replays) open(session string) *replayStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.streams == nil {
		p.streams = map[string]*replayStream{}
	}
	if len(p.streams) >= p.max || p.size.Load() > maxReplayTotal/2 {
		now := time.Now()
		for id, rs := range p.streams {
			if rs.expired(now, p.ttl) {
				delete(p.streams, id)
				rs.release()
			}
		}
		if len(p.streams) >= p.max {
			return nil
		}
	}
	rs := &replayStream{id: nonce(), session: session, owner: p, changed: make(chan struct{})}
	p.streams[rs.id] = rs
	return rs
}

// find returns a session's stream by an event id of it, and the event's sequence number.
func (p *replays) find(session, eventID string) (*replayStream, int, bool) {
	cut := strings.LastIndexByte(eventID, '_') // the stream id is base64url: it may hold '_'
	if cut < 0 {
		return nil, 0, false
	}
	id := eventID[:cut]
	seq, err := strconv.Atoi(eventID[cut+1:])
	if err != nil || seq < 0 {
		return nil, 0, false
	}
	p.mu.Lock()
	rs := p.streams[id]
	p.mu.Unlock()
	if rs == nil || rs.session != session || rs.expired(time.Now(), p.ttl) || rs.isLost() {
		return nil, 0, false // another session's stream is answered as an unknown one
	}
	return rs, seq, true
}

func (rs *replayStream) isLost() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.lost
}

// primable reports whether a request is answered on a primed stream once it runs long.
func (s *Server) primable(req *Request, stream bool) bool {
	return stream && s.cfg.StreamAfter > 0 && req.Session != nil && req.Method == "tools/call" && req.Protocol >= "2025-11-25"
}

// serveResumable runs a request that may outlive its POST (PollAfter is set): as JSON if it
// finishes within StreamAfter, else on a primed SSE stream recorded for resumption, which
// PollAfter ends early. Without PollAfter, serve primes long requests on their POST (no record:
// the request ends with its POST, as any other).
func (s *Server) serveResumable(w http.ResponseWriter, r *http.Request, req *Request) {
	if !s.startLegacy() { // the request is counted in s.wg: Shutdown and Close wait for it
		writeStopping(w)
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	stopWithServer := context.AfterFunc(s.ctx, cancel)
	key := inflightKey(req.Session, req.ID)
	s.inflight.Store(key, cancel)
	out := &responseStream{w: w, stream: true}
	req.notify = out.notify
	req.ask = s.asker(ctx, req.Session.ID, req.Session.Principal, out.send)
	done := make(chan struct{})
	go func() {
		defer s.wg.Done()
		defer close(done)
		defer s.inflight.Delete(key)
		defer stopWithServer()
		defer cancel()
		result, err := s.call(ctx, req)
		if rs := out.finish(req.ID, result, err, s.cfg.Logger); rs != nil {
			rs.deliver() // written on the POST: kept only briefly
		}
	}()

	prime := time.NewTimer(s.cfg.StreamAfter)
	defer prime.Stop()
	var poll <-chan time.Time
	for {
		select {
		case <-done:
			return
		case <-prime.C:
			if rs := s.replays.open(req.Session.ID); rs != nil && out.prime(rs, s.cfg.RetryAfter) {
				t := time.NewTimer(s.cfg.PollAfter)
				defer t.Stop()
				poll = t.C
			}
		case <-poll:
			out.detach() // the stream ends; the request goes on, recorded for the client's GET
			return
		case <-r.Context().Done():
			if !out.detach() { // no event id given: the client cannot resume, so it cancelled
				cancel()
			}
			return
		}
	}
}

// resume serves a GET with Last-Event-ID: the events of the stream after that id, then the
// stream's further events until its response.
func (s *Server) resume(w http.ResponseWriter, r *http.Request, sess *Session, lastID string) {
	rs, seq, ok := s.replays.find(sess.ID, lastID)
	if !ok {
		writeHTTPError(w, http.StatusBadRequest, nil, Errorf(CodeInvalidRequest,
			"Last-Event-ID %q names no stream this server can resume: streams are kept on the replica that ran the request, until %s after their response, and only up to 1 MiB; call again", lastID, s.replays.ttl))
		return
	}
	sw, _ := newSSEWriter(w)
	sw.start(http.StatusOK)
	for {
		events, done, changed := rs.since(seq)
		if rs.isLost() {
			return // dropped or too large while we waited: the client's next GET is refused
		}
		for _, e := range events {
			if sw.eventID(rs.eventID(e.seq), "message", e.data) != nil {
				return
			}
			seq = e.seq
		}
		if done {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
}
