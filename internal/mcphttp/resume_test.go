package mcphttp

import (
	"bufio"
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// stepHandler's tools/call waits for the test at each step: a progress notification after the
// first, its result after the second. It reports how the call ended.
type stepHandler struct {
	started chan struct{}
	step    chan struct{}
	ended   chan string // "done" or "cancelled"
}

func (h *stepHandler) Serve(ctx context.Context, r *Request) (any, error) {
	if r.Method != "tools/call" {
		return map[string]any{}, nil
	}
	h.started <- struct{}{}
	for i := range 2 {
		select {
		case <-h.step:
		case <-ctx.Done():
			h.ended <- "cancelled"
			return nil, ctx.Err()
		}
		if i == 0 {
			r.Notify("notifications/progress", map[string]any{"progress": 1})
		}
	}
	h.ended <- "done"
	return map[string]any{"content": []any{}}, nil
}

func (h *stepHandler) Notification(context.Context, *Request) {}

// sseEvent is one event of a stream: its id, its retry field and its data.
type sseEvent struct{ id, retry, data string }

// readEvents reads a stream's events until it ends.
func readEvents(body io.ReadCloser) <-chan sseEvent {
	out := make(chan sseEvent, 16)
	go func() {
		defer close(out)
		defer body.Close()
		sc := bufio.NewScanner(body)
		var e sseEvent
		seen := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if seen {
					out <- e
				}
				e, seen = sseEvent{}, false
			case strings.HasPrefix(line, "id: "):
				e.id, seen = strings.TrimPrefix(line, "id: "), true
			case strings.HasPrefix(line, "retry: "):
				e.retry, seen = strings.TrimPrefix(line, "retry: "), true
			case strings.HasPrefix(line, "data: "):
				e.data, seen = strings.TrimPrefix(line, "data: "), true
			}
		}
	}()
	return out
}

// nextEvent returns a stream's next event; ok is false when the stream ended.
func nextEvent(t *testing.T, events <-chan sseEvent) (sseEvent, bool) {
	t.Helper()
	select {
	case e, ok := <-events:
		return e, ok
	case <-time.After(20 * time.Second):
		t.Fatal("no event and no end of the stream within 20s")
		return sseEvent{}, false
	}
}

func resumeServer(t *testing.T, cfg Config) (*stepHandler, testClient) {
	t.Helper()
	h := &stepHandler{started: make(chan struct{}, 1), step: make(chan struct{}), ended: make(chan string, 1)}
	sessions, _ := NewSessions([]byte(strings.Repeat("k", 32)), 0)
	cfg.Handler, cfg.Sessions = h, sessions
	srv := NewServer(cfg)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	return h, testClient{t: t, url: ts.URL}
}

// session opens a session of a protocol version.
func (c testClient) session(version string) string {
	c.t.Helper()
	resp := c.do(http.MethodPost, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+version+`"}}`)
	resp.Body.Close()
	return resp.Header.Get(HeaderSession)
}

func (c testClient) resume(session, lastID string) *http.Response {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.url, nil)
	req.Host = "localhost"
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(HeaderSession, session)
	req.Header.Set("Last-Event-ID", lastID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

const slowCall = `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"slow"}}`

// A long tools/call of a 2025-11-25 session is answered on a primed stream (an event id, empty
// data, a retry hint) that the server ends early; the call goes on, and the client's GET with
// Last-Event-ID gets what it missed, then the rest as it comes, until the response. Another
// session cannot resume it, and an unknown id is refused.
func TestServerEndsStreamAndClientResumes(t *testing.T) {
	h, c := resumeServer(t, Config{StreamAfter: time.Nanosecond, PollAfter: time.Nanosecond, RetryAfter: 250 * time.Millisecond})
	sid := c.session("2025-11-25")
	resp := c.do(http.MethodPost, "", sid, slowCall)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("a long call is answered %s %q, want an SSE stream", resp.Status, ct)
	}
	events := readEvents(resp.Body)
	prime, ok := nextEvent(t, events)
	if !ok || !strings.HasSuffix(prime.id, "_0") || prime.retry != "250" || prime.data != "" {
		t.Fatalf("the first event is %+v, want a priming event (id, retry 250, empty data)", prime)
	}
	if e, ok := nextEvent(t, events); ok {
		t.Fatalf("the server did not end the stream early: %+v", e)
	}

	h.step <- struct{}{} // the progress notification: recorded, for the client to resume
	resumed := readEvents(c.resume(sid, prime.id).Body)
	progress, _ := nextEvent(t, resumed)
	if !strings.Contains(progress.data, "notifications/progress") || !strings.HasSuffix(progress.id, "_1") {
		t.Fatalf("the resumed stream starts with %+v, want the progress notification", progress)
	}
	h.step <- struct{}{}
	result, _ := nextEvent(t, resumed)
	if !strings.Contains(result.data, `"id":9`) || !strings.Contains(result.data, `"result"`) {
		t.Fatalf("the resumed stream carries %+v, want the response", result)
	}
	if e, ok := nextEvent(t, resumed); ok {
		t.Errorf("the resumed stream goes on after the response: %+v", e)
	}
	if got := <-h.ended; got != "done" {
		t.Errorf("the call %s", got)
	}

	again := readEvents(c.resume(sid, progress.id).Body) // resumed again, from the progress
	if e, _ := nextEvent(t, again); e.data != result.data || e.id != result.id {
		t.Errorf("a second resumption replays %+v, want %+v", e, result)
	}
	other := c.session("2025-11-25")
	for _, tt := range []struct{ session, id string }{{other, progress.id}, {sid, "nope_1"}, {sid, "garbage"}} {
		resp := c.resume(tt.session, tt.id)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("resume %q of another session or unknown: %s, want 400", tt.id, resp.Status)
		}
	}
}

// Without PollAfter the primed stream carries the call to its end and nothing is kept for a
// resumption; with it, a client that drops a primed stream does not cancel the call (it holds an
// event id and resumes), while one that drops before priming does; a quick call, an older session
// and a client that takes only JSON get JSON.
func TestPrimedStreams(t *testing.T) {
	t.Run("the response on the primed stream", func(t *testing.T) {
		h, c := resumeServer(t, Config{StreamAfter: time.Nanosecond})
		sid := c.session("2025-11-25")
		events := readEvents(c.do(http.MethodPost, "", sid, slowCall).Body)
		if prime, _ := nextEvent(t, events); prime.data != "" || prime.id == "" {
			t.Fatalf("first event %+v", prime)
		}
		h.step <- struct{}{}
		h.step <- struct{}{}
		var last sseEvent
		for e, ok := nextEvent(t, events); ok; e, ok = nextEvent(t, events) {
			if e.id == "" {
				t.Errorf("an event without an id on a primed stream: %+v", e)
			}
			last = e
		}
		if !strings.Contains(last.data, `"result"`) {
			t.Errorf("the stream ends with %+v, want the response", last)
		}
		if resp := c.resume(sid, last.id); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("a stream primed without PollAfter can be resumed: %s", resp.Status)
		}
	})
	t.Run("dropped after priming: the call goes on", func(t *testing.T) {
		h, c := resumeServer(t, Config{StreamAfter: time.Nanosecond, PollAfter: time.Hour})
		sid := c.session("2025-11-25")
		resp := c.do(http.MethodPost, "", sid, slowCall)
		events := readEvents(resp.Body)
		prime, _ := nextEvent(t, events)
		resp.Body.Close()
		h.step <- struct{}{}
		h.step <- struct{}{}
		if got := <-h.ended; got != "done" {
			t.Fatalf("the call %s", got)
		}
		resumed := readEvents(c.resume(sid, prime.id).Body)
		var last sseEvent
		for e, ok := nextEvent(t, resumed); ok; e, ok = nextEvent(t, resumed) {
			last = e
		}
		if !strings.Contains(last.data, `"result"`) {
			t.Errorf("the resumed stream ends with %+v, want the response", last)
		}
	})
	t.Run("dropped before priming: cancelled", func(t *testing.T) {
		h, c := resumeServer(t, Config{StreamAfter: time.Hour})
		sid := c.session("2025-11-25")
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(slowCall))
		req.Host = "localhost"
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(HeaderSession, sid)
		go func() { <-h.started; cancel() }()
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		if got := <-h.ended; got != "cancelled" {
			t.Errorf("the call %s, want cancelled", got)
		}
	})
	for _, tt := range []struct {
		name, version, accept string
		after                 time.Duration
	}{
		{"a quick call", "2025-11-25", "application/json, text/event-stream", time.Hour},
		{"a 2025-06-18 session", "2025-06-18", "application/json, text/event-stream", time.Nanosecond},
		{"a client that takes JSON only", "2025-11-25", "application/json", time.Nanosecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, c := resumeServer(t, Config{StreamAfter: tt.after})
			sid := c.session(tt.version)
			req, _ := http.NewRequest(http.MethodPost, c.url, strings.NewReader(slowCall))
			req.Host = "localhost"
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", tt.accept)
			req.Header.Set(HeaderSession, sid)
			go func() { h.step <- struct{}{}; h.step <- struct{}{} }()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), "id: ") || !strings.Contains(string(body), `"result"`) {
				t.Errorf("answered %s: %s", resp.Header.Get("Content-Type"), body)
			}
		})
	}
}

// The replay buffers are bounded: a stream keeps its newest events within the count and bytes,
// and a server holds at most MaxReplayStreams until they expire.
func TestReplayBounds(t *testing.T) {
	p := &replays{max: 2, ttl: time.Hour}
	a, b := p.open("s"), p.open("s")
	if a == nil || b == nil || p.open("s") != nil {
		t.Fatal("the third stream was not refused")
	}
	for range maxReplayEvents + 10 {
		a.add([]byte("x"), false)
	}
	events, _, _ := a.since(0)
	if len(events) != maxReplayEvents || events[0].seq != 11 {
		t.Errorf("%d events kept from %d, want %d from 11", len(events), events[0].seq, maxReplayEvents)
	}
	b.add(make([]byte, maxReplayBytes), false)
	b.add([]byte("last"), true)
	if events, done, _ := b.since(0); len(events) != 1 || string(events[0].data) != "last" || !done {
		t.Errorf("a stream over its bytes keeps %d events", len(events))
	}
	p.ttl = 0 // b is done: it expires, and makes room
	if p.open("s") == nil {
		t.Error("an expired stream did not make room")
	}
	p.ttl = time.Hour // a stream whose response was written on its POST expires sooner
	d := &replayStream{id: "d", owner: p, changed: make(chan struct{}), done: true, ended: time.Now().Add(-deliveredTTL)}
	if d.expired(time.Now(), p.ttl) {
		t.Error("a stream expired before its TTL")
	}
	if d.deliver(); !d.expired(time.Now(), p.ttl) {
		t.Error("a delivered stream is kept past deliveredTTL")
	}

	// An event larger than a stream may keep is not kept, and the stream cannot be resumed;
	// the events of all streams stay within the server's budget.
	q := &replays{max: 1000, ttl: time.Hour}
	big := q.open("s")
	big.add(make([]byte, maxReplayBytes+1), true)
	if _, _, ok := q.find("s", big.eventID(0)); ok || q.size.Load() != 0 {
		t.Errorf("a stream whose response was too large can be resumed (kept %d bytes)", q.size.Load())
	}
	for range maxReplayTotal/maxReplayBytes + 4 {
		q.open("s").add(make([]byte, maxReplayBytes), false)
	}
	if n := q.size.Load(); n > maxReplayTotal {
		t.Errorf("the streams keep %d bytes, over the budget of %d", n, maxReplayTotal)
	}
	q.mu.Lock()
	all := maps.Values(q.streams)
	q.mu.Unlock()
	for rs := range all {
		q.drop(rs)
	}
	if n := q.size.Load(); n != 0 {
		t.Errorf("%d bytes kept once every stream was dropped", n)
	}
}
