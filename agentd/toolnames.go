package agentd

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/lush-agents/lush/agentd/model"
)

// offerNames returns, for each of the gateway's tool names (in order), the name it is offered to
// a model under: one rule accepts, unique, and the same for the same set of names whatever their
// order, so the same tools make the same prompt.
//
//   - A name the rule accepts is kept.
//   - Otherwise each character the rule refuses becomes '_' (prefixed "t_" where the rule wants
//     a letter first), and a name longer than the rule allows is cut, ending in '_' and the first
//     8 hex digits of the SHA-256 of the gateway's name.
//   - Where two names come out the same, a name the gateway uses as it is keeps it; the others
//     end in '_' and that hash (16 digits, then a counter, in the unlikely case it is taken too).
//
// A name the gateway lists twice is offered once: its second entry is "".
func offerNames(rule model.NameRule, names []string) []string {
	out := make([]string, len(names))
	first := map[string]int{} // a gateway name -> its first index
	byCandidate := map[string][]int{}
	for i, n := range names {
		if _, dup := first[n]; dup {
			continue
		}
		first[n] = i
		c := candidate(rule, n)
		byCandidate[c] = append(byCandidate[c], i)
	}
	taken := map[string]bool{}
	var clashing []int
	for c, idx := range byCandidate {
		if len(idx) == 1 {
			out[idx[0]], taken[c] = c, true
			continue
		}
		for _, i := range idx {
			if names[i] == c {
				out[i], taken[c] = c, true
			} else {
				clashing = append(clashing, i)
			}
		}
	}
	// Clashing names take hashed names in the order of the gateway's names, not of the listing.
	slices.SortFunc(clashing, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	for _, i := range clashing {
		c := candidate(rule, names[i])
		name := withSuffix(rule, c, "_"+nameHash(names[i], 8))
		if taken[name] {
			name = withSuffix(rule, c, "_"+nameHash(names[i], 16))
		}
		for k := 2; taken[name]; k++ {
			name = withSuffix(rule, c, fmt.Sprintf("_%s_%d", nameHash(names[i], 8), k))
		}
		out[i], taken[name] = name, true
	}
	return out
}

// candidate is name made acceptable to rule: refused characters as '_', "t_" before a first
// character the rule refuses there, cut with a hash when too long.
func candidate(rule model.NameRule, name string) string {
	if rule.Valid(name) {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		if r < 0x80 && rule.Allowed(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" || rule.LetterFirst && !(s[0] == '_' || s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		s = "t_" + s
	}
	if len(s) > rule.Max {
		s = withSuffix(rule, s, "_"+nameHash(name, 8))
	}
	return s
}

// withSuffix is s cut so that s+suffix fits rule.Max, then suffix.
func withSuffix(rule model.NameRule, s, suffix string) string {
	return s[:max(0, min(len(s), rule.Max-len(suffix)))] + suffix
}

// nameHash is the first n hex digits of the SHA-256 of name.
func nameHash(name string, n int) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])[:n]
}
