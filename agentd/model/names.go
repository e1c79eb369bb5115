package model

import "context"

// NameRule is what a provider accepts as a tool (function) name: ASCII letters and digits, the
// characters in Punct, at most Max bytes, and, when LetterFirst is set, beginning with a letter
// or '_'. agentd offers every tool the gateway lists under a name its target's rule accepts,
// and maps the model's calls back to the gateway's names.
type NameRule struct {
	Max         int
	Punct       string
	LetterFirst bool
}

// defaultNames is the rule of a Model that does not implement ToolNamer, and Gemini's: letters,
// digits, '_', '.' and '-', beginning with a letter or '_', at most 64 (the narrowest of what
// Gemini's API references document: ':' and names up to 128 are accepted by some of them only).
var defaultNames = NameRule{Max: 64, Punct: "_.-", LetterFirst: true}

// Allowed reports whether the rule accepts the byte c anywhere in a name.
func (r NameRule) Allowed(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	for i := range len(r.Punct) {
		if r.Punct[i] == c {
			return true
		}
	}
	return false
}

// Valid reports whether the rule accepts name.
func (r NameRule) Valid(name string) bool {
	if name == "" || len(name) > r.Max {
		return false
	}
	if c := name[0]; r.LetterFirst && !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		return false
	}
	for i := range len(name) {
		if !r.Allowed(name[i]) {
			return false
		}
	}
	return true
}

// ToolNamer is a Model that says which tool names its provider accepts for a request (its
// Target): the tools of the request must be named by that rule.
type ToolNamer interface {
	ToolNames(ctx context.Context, req Request) NameRule
}

// ToolNamesOf is the rule m applies to the tool names of req: m's own when it is a ToolNamer,
// else defaultNames.
func ToolNamesOf(ctx context.Context, m Model, req Request) NameRule {
	if n, ok := m.(ToolNamer); ok {
		return n.ToolNames(ctx, req)
	}
	return defaultNames
}
