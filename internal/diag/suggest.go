package diag

import (
	"fmt"
	"slices"
	"strings"
)

// Closest returns the candidate nearest to word by edit distance, if it is near enough to be a
// plausible typo (at most a third of the word's length, and at least one edit allowed). Ties go
// to the candidate that sorts first, so suggestions are deterministic.
func Closest(word string, candidates []string) (string, bool) {
	best, bestDist := "", -1
	limit := max(1, len([]rune(word))/3)
	sorted := slices.Clone(candidates)
	slices.Sort(sorted)
	for _, c := range sorted {
		d := distance(strings.ToLower(word), strings.ToLower(c))
		if d <= limit && (bestDist < 0 || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best, bestDist >= 0
}

// DidYouMean renders `did you mean "x"?` for the closest candidate, or "" when none is close.
func DidYouMean(word string, candidates []string) string {
	if c, ok := Closest(word, candidates); ok && c != word {
		return fmt.Sprintf("did you mean %q?", c)
	}
	return ""
}

// distance is the Damerau–Levenshtein (optimal string alignment) distance, so that a swapped
// pair of letters counts as one edit.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
