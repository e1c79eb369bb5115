package enforce

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/authz"
)

// MetaJSON gives the bytes of json.Marshal(Meta()) for every verdict: random ones, and strings
// that JSON escapes (HTML characters, quotes, control characters, invalid UTF-8, U+2028).
func TestMetaJSONIsMeta(t *testing.T) {
	words := []string{"", "allow", "deny", "<script>&", `"quoted"\`, "\x00\x1f\n", "\xff\xfe", "\u2028\u2029", "é", "lush.capability.unknown_tool"}
	r := rand.New(rand.NewPCG(1, 2))
	w := func() string { return words[r.IntN(len(words))] + words[r.IntN(len(words))] }
	reasons := func() []authz.Reason {
		switch r.IntN(3) {
		case 0:
			return nil
		case 1:
			return []authz.Reason{}
		}
		var rs []authz.Reason
		for range r.IntN(3) + 1 {
			rs = append(rs, authz.Reason{Rule: w(), Message: w()})
		}
		return rs
	}
	for i := range 5000 {
		v := &Verdict{ID: w(), Tool: w(), Recorded: r.IntN(2) == 0}
		v.Outcome, v.Access, v.Risk, v.Revision = w(), w(), w(), w()
		v.Reasons, v.Approvals = reasons(), reasons()
		if r.IntN(3) > 0 {
			v.Rules = []string{}
			for range r.IntN(3) {
				v.Rules = append(v.Rules, w())
			}
		}
		if r.IntN(2) == 0 {
			v.RetryAfter = time.Duration(r.Int64N(int64(time.Minute))) - time.Second
		}
		want, err := json.Marshal(v.Meta())
		if err != nil {
			t.Fatal(err)
		}
		if got := v.MetaJSON(); !bytes.Equal(got, want) {
			t.Fatalf("verdict %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// Events share their Bundles per revision; an event keeps the revision it was decided by when
// another revision decides next, concurrently too.
func TestEventBundlesPerRevision(t *testing.T) {
	p := NewPolicy(Config{Instance: "i"})
	a := p.eventBundles("r1")
	if b := p.eventBundles("r1"); b["lush"].Revision != "r1" {
		t.Fatal(b)
	}
	done := make(chan struct{})
	for _, rev := range []string{"r2", "r3"} {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 1000 {
				if got := p.eventBundles(rev)["lush"].Revision; got != rev {
					t.Errorf("revision %s: bundles of %s", rev, got)
					return
				}
			}
		}()
	}
	<-done
	<-done
	if a["lush"].Revision != "r1" || len(a) != 1 {
		t.Errorf("an earlier event's bundles changed: %v", a)
	}
	if l := p.labels; l["id"] != "i" || len(l) != 3 {
		t.Errorf("labels %v", l)
	}
}
