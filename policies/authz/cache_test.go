package authz

import (
	"fmt"
	"math/rand"
	"sync"
	"testing"
)

func TestLRUEvictsLeastRecentlyUsed(t *testing.T) {
	c := newLRU[int](3)
	if len(c.shards) != 1 {
		t.Fatalf("a cache of 3 has %d shards", len(c.shards))
	}
	for i, k := range []string{"a", "b", "c"} {
		c.put([]byte(k), i)
	}
	if v, ok := c.get([]byte("a")); !ok || v != 0 { // a is now the most recent
		t.Fatalf("get a = %v %v", v, ok)
	}
	c.put([]byte("d"), 3) // evicts b
	if _, ok := c.get([]byte("b")); ok {
		t.Error("b survived; it was the least recently used")
	}
	for k, want := range map[string]int{"a": 0, "c": 2, "d": 3} {
		if v, ok := c.get([]byte(k)); !ok || v != want {
			t.Errorf("get %s = %v %v, want %v", k, v, ok, want)
		}
	}
	c.put([]byte("c"), 20) // replace, no eviction
	if v, _ := c.get([]byte("c")); v != 20 || c.len() != 3 {
		t.Errorf("after replacing c: %v, len %d", v, c.len())
	}
}

func TestLRUBound(t *testing.T) {
	for _, size := range []int{1, 2, 63, 64, 128, 1000, 10_000} {
		c := newLRU[int](size)
		total := 0
		for i := range c.shards {
			total += c.shards[i].limit
		}
		if total != size {
			t.Errorf("size %d: shard limits add up to %d", size, total)
		}
		for i := range 3 * size {
			c.put(fmt.Appendf(nil, "k%d", i), i)
		}
		if n := c.len(); n > size || n < size/2 {
			t.Errorf("size %d: holds %d after %d puts", size, n, 3*size)
		}
	}
}

func TestLRUConcurrent(t *testing.T) {
	c := newLRU[int](500)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(g)))
			for range 2000 {
				k := fmt.Appendf(nil, "k%d", r.Intn(1000))
				if v, ok := c.get(k); ok && fmt.Sprintf("k%d", v) != string(k) {
					t.Errorf("get %s = %d", k, v)
					return
				}
				var n int
				fmt.Sscanf(string(k), "k%d", &n)
				c.put(k, n)
			}
		}()
	}
	wg.Wait()
	if n := c.len(); n > 500 {
		t.Errorf("holds %d > 500", n)
	}
}
