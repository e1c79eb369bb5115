package audithttp

import (
	"fmt"
	"testing"
)

// TestAnalysesKeepTheMostRecentlyUsed: at most MaxAnalyses builds are kept; a get makes a build
// the most recently used; the least recently used goes first; a build put twice is kept once.
func TestAnalysesKeepTheMostRecentlyUsed(t *testing.T) {
	var a analyses
	for i := range MaxAnalyses {
		a.put(&analysis{hash: fmt.Sprint(i)})
	}
	if a.get("0") == nil { // 0 is now the most recently used; 1 the least
		t.Fatal("0 is not kept")
	}
	first := a.get("2")
	if again := a.put(&analysis{hash: "2"}); again != first {
		t.Error("a build put twice is kept twice")
	}
	a.put(&analysis{hash: "new"})
	for _, tc := range []struct {
		hash string
		kept bool
	}{{"1", false}, {"0", true}, {"2", true}, {"3", true}, {"new", true}} {
		if got := a.get(tc.hash) != nil; got != tc.kept {
			t.Errorf("%s kept %v, want %v", tc.hash, got, tc.kept)
		}
	}
	if len(a.items) != MaxAnalyses {
		t.Errorf("%d kept, at most %d", len(a.items), MaxAnalyses)
	}
}
