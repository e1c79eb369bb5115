package gateway

import (
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"
)

// The subscriptions against a model, on random operations: a session's subscriptions last until
// it is dropped (DELETE) or expires; the set never holds more than its bound, refuses exactly
// when it is full of live sessions' subscriptions, and names exactly the live subscribers of a
// resource.
func TestSubscriptionsBounded(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 21))
		now := time.Unix(1_800_000_000, 0)
		var s subscriptions
		s.init()
		s.max, s.now = 1+rng.IntN(10), func() time.Time { return now }
		type sub struct {
			expires int64
			uris    []string
		}
		model := map[string]*sub{}
		expiry := map[string]int64{} // each session's fixed expiry
		live := func() int {
			n := 0
			for _, e := range model {
				if e.expires > now.Unix() {
					n += len(e.uris)
				}
			}
			return n
		}
		for step := range 500 {
			id := "s" + strconv.Itoa(rng.IntN(8))
			if _, ok := expiry[id]; !ok {
				expiry[id] = now.Unix() + int64(1+rng.IntN(100))
			}
			uri := "u" + strconv.Itoa(rng.IntN(4))
			switch op := rng.IntN(10); {
			case op < 5:
				if expiry[id] <= now.Unix() {
					continue // an expired session's requests are refused before they get here
				}
				e := model[id]
				has := e != nil && slices.Contains(e.uris, uri)
				total := 0
				for _, x := range model {
					total += len(x.uris)
				}
				// Full: room only once expired sessions are swept, and only if that frees some.
				want := has || total < s.max || live() < s.max
				if got := s.add(id, expiry[id], uri); got != want {
					t.Fatalf("seed %d step %d: add with %d live of %d: %v, want %v", seed, step, live(), s.max, got, want)
				}
				if !want || has {
					break
				}
				if total >= s.max { // swept
					for k, x := range model {
						if x.expires <= now.Unix() {
							delete(model, k)
						}
					}
				}
				if model[id] == nil {
					model[id] = &sub{expires: expiry[id]}
				}
				model[id].uris = append(model[id].uris, uri)
			case op < 7:
				s.remove(id, uri)
				if e := model[id]; e != nil {
					e.uris = slices.DeleteFunc(e.uris, func(u string) bool { return u == uri })
					if len(e.uris) == 0 {
						delete(model, id)
					}
				}
			case op < 8:
				s.drop(id)
				delete(model, id)
			case op < 9:
				now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
			default:
				got := s.sessions(uri)
				var want []string
				for k, e := range model {
					if e.expires > now.Unix() && slices.Contains(e.uris, uri) {
						want = append(want, k)
					}
				}
				sort.Strings(got)
				sort.Strings(want)
				if !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: subscribers of %s: %v, want %v", seed, step, uri, got, want)
				}
			}
			held := 0
			for _, e := range s.byID {
				held += len(e.uris)
			}
			if held != s.n || held > s.max {
				t.Fatalf("seed %d step %d: holds %d, counts %d, bound %d", seed, step, held, s.n, s.max)
			}
		}
	}
}
