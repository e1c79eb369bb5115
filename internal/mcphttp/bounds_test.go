package mcphttp

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The terminated set is bounded: with room for k, the first k DELETEs are remembered (each of
// those sessions is refused until it expires), the next are refused (those sessions stay valid),
// and once remembered sessions expire their room is reused. A terminated session is never
// forgotten before it expires: no session comes back to life.
func TestTerminatedSessionsBounded(t *testing.T) {
	const k, more = 8, 5
	s, err := NewSessions([]byte(strings.Repeat("k", 32)), time.Hour, SessionOptions{MaxTerminated: k})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	var ids []string
	for i := range k + more {
		now = now.Add(time.Minute) // later sessions expire later
		id, err := s.issue(Session{Endpoint: "a", Principal: PrincipalDigest("user:alice")}, "n"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i, id := range ids {
		sess, err := s.verify(id, "a", "user:alice")
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		err = s.terminate(sess)
		if want := error(nil); i >= k {
			want = ErrTooManyTerminated
			if err != want {
				t.Errorf("terminate session %d of %d with room for %d: %v, want %v", i, len(ids), k, err, want)
			}
		} else if err != nil {
			t.Errorf("terminate session %d: %v", i, err)
		}
		if len(s.terminated) > k {
			t.Fatalf("%d terminated sessions remembered, at most %d", len(s.terminated), k)
		}
	}
	for i, id := range ids {
		_, err := s.verify(id, "a", "user:alice")
		if i < k && err != ErrSessionTerminated || i >= k && err != nil {
			t.Errorf("session %d after the DELETEs: %v", i, err)
		}
	}
	// The first session expires: its room goes to the next DELETE; the others stay terminated.
	now = now.Add(time.Hour - time.Duration(k+more-1)*time.Minute)
	if _, err := s.verify(ids[0], "a", "user:alice"); err != ErrSessionExpired {
		t.Fatalf("session 0 after its expiry: %v", err)
	}
	sess, _ := s.verify(ids[k], "a", "user:alice")
	if err := s.terminate(sess); err != nil {
		t.Errorf("terminate once a remembered session expired: %v", err)
	}
	for i, id := range ids[1 : k+1] {
		if _, err := s.verify(id, "a", "user:alice"); err != ErrSessionTerminated {
			t.Errorf("session %d: %v, want terminated", i+1, err)
		}
	}
	sess, _ = s.verify(ids[k+1], "a", "user:alice")
	if err := s.terminate(sess); err != ErrTooManyTerminated {
		t.Errorf("terminate with the set full again: %v", err)
	}
}

// boundsServer serves a Server with small stream bounds.
func boundsServer(t *testing.T, cfg Config) (*Server, testClient) {
	t.Helper()
	sessions, _ := NewSessions([]byte(strings.Repeat("k", 32)), time.Hour, SessionOptions{MaxTerminated: 2})
	cfg.Handler, cfg.Sessions = echoHandler{}, sessions
	srv := NewServer(cfg)
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv)
	mux.HandleFunc("/sse", srv.LegacySSE)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	return srv, testClient{t: t, url: ts.URL}
}

// getStream opens a GET stream and checks the answer's status.
func (c testClient) getStream(session string, want int) *http.Response {
	c.t.Helper()
	resp := c.do(http.MethodGet, "/mcp", session, "")
	if resp.StatusCode != want {
		resp.Body.Close()
		c.t.Fatalf("GET stream: %s, want %d", resp.Status, want)
	}
	if want != http.StatusOK {
		resp.Body.Close()
	}
	return resp
}

// A session's GET streams beyond MaxStreamsPerSession end oldest first; the server's streams
// beyond MaxStreams are refused with 503 and Retry-After, legacy SSE streams included, until a
// stream ends; a DELETE beyond the terminated bound is answered 405 and the session lives on.
func TestStreamsBounded(t *testing.T) {
	var mu sync.Mutex
	var ended []string // sessions the handler was told ended
	srv, c := boundsServer(t, Config{MaxStreams: 4, MaxStreamsPerSession: 2, SessionEnded: func(id string) {
		mu.Lock()
		defer mu.Unlock()
		ended = append(ended, id)
	}})
	a := c.initialize()
	first := sseEvents(t, c.getStream(a, http.StatusOK).Body)
	second := sseEvents(t, c.getStream(a, http.StatusOK).Body)
	third := sseEvents(t, c.getStream(a, http.StatusOK).Body)
	if e := next(t, first); e != "" {
		t.Fatalf("the oldest of 3 streams of a session with room for 2 sent %q; want its end", e)
	}
	if !srv.Notify(a, "notifications/message", map[string]any{"n": 1}) || !strings.Contains(next(t, third), `"n":1`) {
		t.Fatal("a notification did not reach the session's newest stream")
	}
	b := c.initialize()
	sseEvents(t, c.getStream(b, http.StatusOK).Body)
	sseEvents(t, c.getStream(b, http.StatusOK).Body)
	// 4 open: a fifth stream is refused, whether GET or legacy SSE.
	refused := c.do(http.MethodGet, "/mcp", c.initialize(), "")
	refused.Body.Close()
	if refused.StatusCode != http.StatusServiceUnavailable || refused.Header.Get("Retry-After") == "" {
		t.Fatalf("a stream beyond the server's bound: %s, Retry-After %q; want 503 with Retry-After", refused.Status, refused.Header.Get("Retry-After"))
	}
	if sse := c.do(http.MethodGet, "/sse", "", ""); sse.StatusCode != http.StatusServiceUnavailable {
		sse.Body.Close()
		t.Fatalf("a legacy SSE stream beyond the server's bound: %s, want 503", sse.Status)
	}
	// A session at its own bound may still replace its oldest stream when the server is full.
	fourth := sseEvents(t, c.getStream(a, http.StatusOK).Body)
	if e := next(t, second); e != "" {
		t.Fatalf("the replaced stream sent %q; want its end", e)
	}
	// DELETE ends a session's streams and gives their room back.
	del := c.do(http.MethodDelete, "/mcp", a, "")
	del.Body.Close()
	if del.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %s", del.Status)
	}
	for _, s := range []<-chan string{third, fourth} {
		if e := next(t, s); e != "" {
			t.Fatalf("a stream of a deleted session sent %q; want its end", e)
		}
	}
	d := c.initialize()
	sseEvents(t, c.getStream(d, http.StatusOK).Body)
	// The terminated set holds 2 (boundsServer): the third DELETE is answered 405, its session lives on.
	var deleted []string
	for i, want := range []int{http.StatusNoContent, http.StatusMethodNotAllowed} {
		sid := c.initialize()
		deleted = append(deleted, sid)
		resp := c.do(http.MethodDelete, "/mcp", sid, "")
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("DELETE %d: %s, want %d", i, resp.Status, want)
		}
		resp = c.do(http.MethodPost, "/mcp", sid, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
		resp.Body.Close()
		if alive := resp.StatusCode == http.StatusOK; alive != (want != http.StatusNoContent) {
			t.Fatalf("after DELETE %d (%d): the session answers %s", i, want, resp.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{a, deleted[0]}; !slices.Equal(ended, want) {
		t.Errorf("SessionEnded got %d sessions, want the 2 DELETEs that were answered 204", len(ended))
	}
}

// The hub against a model, on random operations: it never holds more than its bounds, counts
// exactly the streams it holds, ends exactly the streams the model says are gone, and delivers a
// message to a session's newest stream.
func TestHubRandom(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 7))
		limit, per := 1+rng.IntN(12), 1+rng.IntN(4)
		h := newHub(limit, per)
		type stream struct {
			session    string
			ch         <-chan []byte
			unregister func()
		}
		model := map[string][]*stream{} // session -> open streams, newest last
		var all []*stream
		open := func() int {
			n := 0
			for _, l := range model {
				n += len(l)
			}
			return n
		}
		ended := func(s *stream) bool {
			select {
			case _, ok := <-s.ch:
				return !ok
			default:
				return false
			}
		}
		for step := range 400 {
			session := "s" + strconv.Itoa(rng.IntN(6))
			switch op := rng.IntN(10); {
			case op < 5: // open a stream
				l := model[session]
				drop := max(len(l)-per+1, 0)
				ch, unregister, err := h.register(session, "e", false)
				if open()-drop >= limit {
					if !errors.Is(err, errTooManyOpen) {
						t.Fatalf("seed %d step %d: open with %d of %d open: %v, want refused", seed, step, open(), limit, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("seed %d step %d: open: %v", seed, step, err)
				}
				s := &stream{session, ch, unregister}
				model[session] = append(append([]*stream(nil), l[drop:]...), s)
				all = append(all, s)
			case op < 8 && len(all) > 0: // a stream's request ends
				s := all[rng.IntN(len(all))]
				s.unregister()
				l := model[s.session]
				for i, x := range l {
					if x == s {
						model[s.session] = append(l[:i:i], l[i+1:]...)
					}
				}
			case op < 9: // DELETE
				h.close(session)
				delete(model, session)
			default: // a notification
				got := h.send(session, []byte("m"))
				l := model[session]
				if got != (len(l) > 0) {
					t.Fatalf("seed %d step %d: send to %d streams: %v", seed, step, len(l), got)
				}
				if got && string(<-l[len(l)-1].ch) != "m" {
					t.Fatalf("seed %d step %d: the newest stream did not get the message", seed, step)
				}
			}
			h.mu.Lock()
			held := 0
			for _, l := range h.streams {
				held += len(l)
				if len(l) > per {
					t.Fatalf("seed %d step %d: a session holds %d streams, bound %d", seed, step, len(l), per)
				}
			}
			if held != h.open || held != open() || held > limit {
				t.Fatalf("seed %d step %d: hub holds %d, counts %d, model %d, bound %d", seed, step, held, h.open, open(), limit)
			}
			h.mu.Unlock()
			live := map[*stream]bool{}
			for _, l := range model {
				for _, s := range l {
					live[s] = true
				}
			}
			for _, s := range all {
				if ended(s) == live[s] {
					t.Fatalf("seed %d step %d: a stream the model holds %v is ended %v", seed, step, live[s], ended(s))
				}
			}
		}
	}
}

// A GET stream ends once its session expires (at its next keep-alive), and the session's next
// GET is answered 404, which tells the client to initialize again.
func TestStreamEndsWithItsSession(t *testing.T) {
	sessions, _ := NewSessions([]byte(strings.Repeat("k", 32)), time.Hour)
	var clock atomic.Int64 // seconds added to the real clock
	sessions.now = func() time.Time { return time.Now().Add(time.Duration(clock.Load()) * time.Second) }
	srv := NewServer(Config{Handler: echoHandler{}, Sessions: sessions, KeepAlive: 5 * time.Millisecond})
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	c := testClient{t: t, url: ts.URL}
	sid := c.initialize()
	events := sseEvents(t, c.getStream(sid, http.StatusOK).Body)
	if !srv.Notify(sid, "notifications/message", map[string]any{"n": 1}) || !strings.Contains(next(t, events), `"n":1`) {
		t.Fatal("the stream of a live session did not carry a notification")
	}
	clock.Store(int64(2 * time.Hour / time.Second))
	if e := next(t, events); e != "" {
		t.Fatalf("the stream of an expired session sent %q; want its end", e)
	}
	c.getStream(sid, http.StatusNotFound)
}
