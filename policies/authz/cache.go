package authz

import (
	"hash/maphash"
	"sync"
)

// DefaultCacheSize is the number of decisions an Engine remembers unless Cache says otherwise.
const DefaultCacheSize = 10_000

// lru is a bounded, least-recently-used map from cache keys to values, split into shards that
// each have their own lock so that concurrent deciders rarely wait for each other. It has no
// goroutines of its own.
type lru[V any] struct {
	seed   maphash.Seed
	shards []lruShard[V]
}

type lruShard[V any] struct {
	mu    sync.Mutex
	items map[string]*lruItem[V]
	head  lruItem[V] // sentinel: head.next is the most recently used, head.prev the least
	limit int
	_     [64]byte // keep shards on separate cache lines
}

type lruItem[V any] struct {
	key        string
	value      V
	prev, next *lruItem[V]
}

// maxShards bounds the number of shards; each shard holds at least minShardSize entries, so
// that a small cache is not split into shards too small to be useful.
const (
	maxShards    = 32
	minShardSize = 64
)

// newLRU returns a cache of size entries in total; size must be positive.
func newLRU[V any](size int) *lru[V] {
	n := 1
	for n < maxShards && size/(n*2) >= minShardSize {
		n *= 2
	}
	c := &lru[V]{seed: maphash.MakeSeed(), shards: make([]lruShard[V], n)}
	for i := range c.shards {
		s := &c.shards[i]
		s.limit = size / n
		if i < size%n {
			s.limit++
		}
		s.items = make(map[string]*lruItem[V])
		s.head.next, s.head.prev = &s.head, &s.head
	}
	return c
}

func (c *lru[V]) shard(key []byte) *lruShard[V] {
	if len(c.shards) == 1 {
		return &c.shards[0]
	}
	return &c.shards[maphash.Bytes(c.seed, key)&uint64(len(c.shards)-1)]
}

// get returns the value of key and marks it recently used.
func (c *lru[V]) get(key []byte) (V, bool) {
	s := c.shard(key)
	s.mu.Lock()
	it, ok := s.items[string(key)]
	if !ok {
		s.mu.Unlock()
		var zero V
		return zero, false
	}
	s.unlink(it)
	s.pushFront(it)
	v := it.value
	s.mu.Unlock()
	return v, true
}

// put stores value under key, evicting the least recently used entry when the shard is full.
func (c *lru[V]) put(key []byte, value V) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if it, ok := s.items[string(key)]; ok {
		it.value = value
		s.unlink(it)
		s.pushFront(it)
		return
	}
	var it *lruItem[V]
	if len(s.items) >= s.limit {
		// Reuse the least recently used item for the new entry.
		it = s.head.prev
		s.unlink(it)
		delete(s.items, it.key)
	} else {
		it = new(lruItem[V])
	}
	it.key, it.value = string(key), value
	s.items[it.key] = it
	s.pushFront(it)
}

// len returns the number of entries.
func (c *lru[V]) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.items)
		s.mu.Unlock()
	}
	return n
}

func (s *lruShard[V]) unlink(it *lruItem[V]) {
	it.prev.next, it.next.prev = it.next, it.prev
}

func (s *lruShard[V]) pushFront(it *lruItem[V]) {
	it.prev, it.next = &s.head, s.head.next
	s.head.next.prev = it
	s.head.next = it
}
