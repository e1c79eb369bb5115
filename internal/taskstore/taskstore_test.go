package taskstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/taskstore"
)

type rec struct{ principal string }

func TestBoundedAndExpiring(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := taskstore.New[rec](3, 24*time.Hour, taskstore.WithClock(func() time.Time { return now }))
	x := func(id string) taskstore.Key { return taskstore.Key{Agent: "x", ID: id} }
	s.Add(x("short"), time.Minute, rec{"user:a"})
	s.Add(x("long"), time.Hour, rec{"user:a"})
	s.Add(x("forever"), 0, rec{"user:b"})
	if got := len(s.Find(func(k taskstore.Key, r rec) bool { return k.Agent == "x" && r.principal == "user:a" })); got != 2 {
		t.Fatalf("user:a has %d tasks at x, want 2", got)
	}
	s.Add(taskstore.Key{Agent: "y", ID: "new"}, time.Hour, rec{"user:a"}) // full: the one that expires first goes
	for id, want := range map[string]bool{"short": false, "long": true, "forever": true} {
		if _, ok := s.Get(x(id)); ok != want {
			t.Errorf("after the bound: task %s kept %v, want %v", id, ok, want)
		}
	}
	if _, ok := s.Get(x("new")); ok {
		t.Error("a task is found at another agent")
	}
	if s.Len() != 3 {
		t.Errorf("%d records, want the bound 3", s.Len())
	}
	now = now.Add(2 * time.Hour)
	if _, ok := s.Get(x("long")); ok {
		t.Error("a task outlived its TTL")
	}
	if s.Update(x("long"), func(*rec) { t.Error("an expired task was updated") }) {
		t.Error("Update of an expired task reported true")
	}
	if _, ok := s.Get(x("forever")); !ok {
		t.Error("a task without a TTL expired before the maximum")
	}
	now = now.Add(24 * time.Hour)
	if _, ok := s.Get(x("forever")); ok {
		t.Error("a task without a TTL outlived the maximum")
	}
}

// Adding a key again replaces its record and expiry without taking a second place; Update
// changes the record in place.
func TestReplaceAndUpdate(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := taskstore.New[rec](2, time.Hour, taskstore.WithClock(func() time.Time { return now }))
	k := taskstore.Key{Agent: "x", ID: "t"}
	s.Add(k, time.Minute, rec{"user:a"})
	s.Add(k, time.Hour, rec{"user:b"})
	s.Add(taskstore.Key{Agent: "x", ID: "u"}, time.Hour, rec{"user:c"})
	if r, ok := s.Get(k); !ok || r.principal != "user:b" || s.Len() != 2 {
		t.Fatalf("after replacing: %+v %v, %d records", r, ok, s.Len())
	}
	now = now.Add(2 * time.Minute) // past the first expiry, not the replaced one
	if !s.Update(k, func(r *rec) { r.principal = "user:d" }) {
		t.Fatal("Update of a live task reported false")
	}
	if r, _ := s.Get(k); r.principal != "user:d" {
		t.Errorf("after Update: %+v", r)
	}
}

// A full store forgets in expiry order whatever order the tasks came in, many times over: the
// heap stays consistent.
func TestEvictionOrder(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const n = 64
	s := taskstore.New[int](n, 1000*time.Hour, taskstore.WithClock(func() time.Time { return now }))
	for i := range 4 * n {
		ttl := time.Duration((i*37)%(4*n)+1) * time.Minute // a permutation of 1..4n minutes
		s.Add(taskstore.Key{Agent: "a", ID: fmt.Sprint(i)}, ttl, (i*37)%(4*n)+1)
	}
	kept := s.Find(func(taskstore.Key, int) bool { return true })
	if len(kept) != n {
		t.Fatalf("%d kept, want %d", len(kept), n)
	}
	for _, minutes := range kept {
		if minutes <= 3*n {
			t.Errorf("a task expiring after %d minutes was kept over a later one", minutes)
		}
	}
}

// What adding costs on a full store: one eviction each time.
func BenchmarkAddFull(b *testing.B) {
	s := taskstore.New[int](100_000, 24*time.Hour)
	for i := range 100_000 {
		s.Add(taskstore.Key{Agent: "a", ID: fmt.Sprint(i)}, time.Hour, i)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s.Add(taskstore.Key{Agent: "b", ID: fmt.Sprint(i)}, time.Hour, i)
	}
}
