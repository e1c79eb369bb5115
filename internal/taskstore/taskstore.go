// Package taskstore remembers the tasks a process created for its callers, by agent and task id,
// until each expires, and never more than a fixed number of them. Who created a task, where and
// under which decision is what every later operation on the task is decided on, so a task the
// store forgot is answered as an unknown one: nothing is revealed that is not recorded.
//
// The gateway keeps the tasks MCP upstreams create (gateway/tasks.go), agentd's A2A server the
// tasks of A2A messages (agentd/a2a). Both bound what a caller can make them keep with one Store.
package taskstore

import (
	"container/heap"
	"sync"
	"time"
)

// Key names a task: the agent it was created at and its id.
type Key struct{ Agent, ID string }

// Store holds records of type R, each until its expiry and at most Max of them: adding one more
// forgets the one that expires first (an expired one, if any). It is safe for concurrent use.
type Store[R any] struct {
	mu     sync.Mutex
	byKey  map[Key]*entry[R]
	expiry expiryHeap[R] // every entry, soonest expiry first
	max    int
	maxTTL time.Duration
	now    func() time.Time
}

type entry[R any] struct {
	key     Key
	rec     R
	expires time.Time
	index   int // in the heap
}

// Option configures a Store.
type Option func(*options)

type options struct{ now func() time.Time }

// WithClock makes the store read the time from now (tests).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// New returns a store of at most max records, each kept at most maxTTL.
func New[R any](max int, maxTTL time.Duration, opts ...Option) *Store[R] {
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if max < 1 {
		max = 1
	}
	return &Store[R]{byKey: map[Key]*entry[R]{}, max: max, maxTTL: maxTTL, now: o.now}
}

// Add records r under k for ttl (ttl <= 0, or beyond the store's maximum, means the maximum),
// replacing a record k already had.
func (s *Store[R]) Add(k Key, ttl time.Duration, r R) {
	if ttl <= 0 || ttl > s.maxTTL {
		ttl = s.maxTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	expires := s.now().Add(ttl)
	if e, ok := s.byKey[k]; ok {
		e.rec, e.expires = r, expires
		heap.Fix(&s.expiry, e.index)
		return
	}
	for len(s.byKey) >= s.max {
		s.removeLocked(s.expiry[0])
	}
	e := &entry[R]{key: k, rec: r, expires: expires}
	s.byKey[k] = e
	heap.Push(&s.expiry, e)
}

// Get returns the record of a live task (a copy of R: pointers in it are shared).
func (s *Store[R]) Get(k Key) (R, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.liveLocked(k)
	if !ok {
		var zero R
		return zero, false
	}
	return e.rec, true
}

// Update applies f to the record of a live task under the store's lock; false when there is none.
func (s *Store[R]) Update(k Key, f func(r *R)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.liveLocked(k)
	if ok {
		f(&e.rec)
	}
	return ok
}

// Find returns the live records for which match holds, by key.
func (s *Store[R]) Find(match func(k Key, r R) bool) map[Key]R {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := map[Key]R{}
	for k, e := range s.byKey {
		if e.expires.After(now) && match(k, e.rec) {
			out[k] = e.rec
		}
	}
	return out
}

// Len is the number of records held, expired ones not yet forgotten included.
func (s *Store[R]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey)
}

// liveLocked returns k's entry unless it expired (then it is forgotten).
func (s *Store[R]) liveLocked(k Key) (*entry[R], bool) {
	e, ok := s.byKey[k]
	if !ok {
		return nil, false
	}
	if !e.expires.After(s.now()) {
		s.removeLocked(e)
		return nil, false
	}
	return e, true
}

func (s *Store[R]) removeLocked(e *entry[R]) {
	heap.Remove(&s.expiry, e.index)
	delete(s.byKey, e.key)
}

// expiryHeap orders entries by expiry (container/heap).
type expiryHeap[R any] []*entry[R]

func (h expiryHeap[R]) Len() int           { return len(h) }
func (h expiryHeap[R]) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap[R]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap[R]) Push(x any) {
	e := x.(*entry[R])
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap[R]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
