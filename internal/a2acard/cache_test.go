package a2acard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/lush-agents/lush/internal/toolref"
)

func TestTTL(t *testing.T) {
	tests := []struct {
		cacheControl []string
		want         time.Duration
	}{
		{nil, DefaultTTL},
		{[]string{"public"}, DefaultTTL},
		{[]string{"public, max-age=60"}, time.Minute},
		{[]string{"max-age=\"120\""}, 2 * time.Minute},
		{[]string{"max-age=86400"}, MaxTTL},
		{[]string{"max-age=0"}, 0},
		{[]string{"max-age=soon"}, 0},
		{[]string{"no-store"}, 0},
		{[]string{"public", "No-Cache"}, 0},
	}
	for _, tt := range tests {
		h := http.Header{}
		for _, v := range tt.cacheControl {
			h.Add("Cache-Control", v)
		}
		if got := TTL(h); got != tt.want {
			t.Errorf("TTL(%q) = %s, want %s", tt.cacheControl, got, tt.want)
		}
	}
}

// cardServer serves Agent Cards on loopback, counting the requests per Authorization header,
// with the Cache-Control header and the card's name the test sets.
type cardServer struct {
	mu           sync.Mutex
	hits         map[string]int
	cacheControl string
	name         string
}

func (s *cardServer) start(t *testing.T) toolref.Ref {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits[r.Header.Get("Authorization")]++
		cc, name := s.cacheControl, s.name
		s.mu.Unlock()
		if cc != "" {
			w.Header().Set("Cache-Control", cc)
		}
		_ = json.NewEncoder(w).Encode(a2a.AgentCard{Name: name, URL: "http://" + r.Host + "/rpc", Version: "1", ProtocolVersion: "0.3.0", Skills: []a2a.AgentSkill{}})
	}))
	t.Cleanup(srv.Close)
	ref, err := toolref.Parse("a2a+http://" + strings.TrimPrefix(srv.URL, "http://") + "/agent")
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func (s *cardServer) count(auth string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[auth]
}

// TestCache: a card is fetched once while fresh, per credential; it is fetched again once it
// expires, after Forget, and every time when its answer forbids keeping it.
func TestCache(t *testing.T) {
	srv := &cardServer{hits: map[string]int{}, name: "v1"}
	ref := srv.start(t)
	now := time.Unix(1_000_000, 0)
	c := &Cache{Now: func() time.Time { return now }}
	ctx := context.Background()
	alice, bob := map[string]string{"Authorization": "Bearer a"}, map[string]string{"Authorization": "Bearer b"}
	get := func(headers map[string]string) (string, bool) {
		t.Helper()
		card, fresh, err := c.Get(ctx, ref, headers)
		if err != nil {
			t.Fatal(err)
		}
		return card.Name, fresh
	}

	steps := []struct {
		name    string
		before  func()
		headers map[string]string
		fresh   bool
		card    string
	}{
		{"first: fetched", nil, alice, true, "v1"},
		{"again: cached", func() { srv.name = "v2" }, alice, false, "v1"},
		{"another credential: its own entry", nil, bob, true, "v2"},
		{"no credential: its own entry", nil, nil, true, "v2"},
		{"just before expiry: cached", func() { now = now.Add(DefaultTTL - time.Second) }, alice, false, "v1"},
		{"expired: fetched", func() { now = now.Add(time.Second) }, alice, true, "v2"},
		{"forgotten: fetched", func() { srv.name = "v3"; c.Forget(ref, alice) }, alice, true, "v3"},
		{"no-store: fetched", func() { srv.cacheControl = "no-store"; srv.name = "v4"; c.Forget(ref, alice) }, alice, true, "v4"},
		{"no-store: fetched again", nil, alice, true, "v4"},
		{"max-age=60: kept a minute", func() { srv.cacheControl = "max-age=60" }, alice, true, "v4"},
		{"59s later: cached", func() { now = now.Add(59 * time.Second); srv.name = "v5" }, alice, false, "v4"},
		{"60s later: fetched", func() { now = now.Add(time.Second) }, alice, true, "v5"},
	}
	for _, s := range steps {
		if s.before != nil {
			srv.mu.Lock()
			s.before()
			srv.mu.Unlock()
		}
		if name, fresh := get(s.headers); name != s.card || fresh != s.fresh {
			t.Errorf("%s: card %s fresh %v, want %s %v", s.name, name, fresh, s.card, s.fresh)
		}
	}
	if a, b, none := srv.count("Bearer a"), srv.count("Bearer b"), srv.count(""); a != 7 || b != 1 || none != 1 {
		t.Errorf("card requests: alice %d bob %d none %d, want 7 1 1", a, b, none)
	}
}

// TestCacheBounds: the cache keeps at most Entries cards and Bytes bytes of cards; the card
// that expires first goes first.
func TestCacheBounds(t *testing.T) {
	srv := &cardServer{hits: map[string]int{}, name: "n"}
	ref := srv.start(t)
	now := time.Unix(1_000_000, 0)
	c := &Cache{Entries: 3, Now: func() time.Time { return now }}
	for i := range 10 {
		now = now.Add(time.Second) // later cards expire later
		if _, _, err := c.Get(context.Background(), ref, map[string]string{"Authorization": fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		if c.Len() > 3 {
			t.Fatalf("after %d cards the cache holds %d", i+1, c.Len())
		}
	}
	// The three newest are kept: fetching them again hits the cache.
	for i := 7; i < 10; i++ {
		if _, fresh, _ := c.Get(context.Background(), ref, map[string]string{"Authorization": fmt.Sprint(i)}); fresh {
			t.Errorf("card %d was evicted, want the oldest evicted first", i)
		}
	}

	small := &Cache{Bytes: 400, Now: func() time.Time { return now }} // a card here is ~150 bytes
	for i := range 10 {
		if _, _, err := small.Get(context.Background(), ref, map[string]string{"Authorization": fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		small.mu.Lock()
		size := small.size
		small.mu.Unlock()
		if size > 400 || small.Len() > 2 {
			t.Fatalf("after %d cards the cache holds %d bytes in %d cards", i+1, size, small.Len())
		}
	}
	if small.Len() == 0 {
		t.Error("the byte-bounded cache keeps nothing")
	}
}
