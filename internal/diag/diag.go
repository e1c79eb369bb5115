// Package diag reports problems found in a project's files. Every problem carries the position
// of the YAML or Rego that caused it, what is wrong, and, when there is one, a suggestion to fix
// it, so that a build error reads like the seed's:
//
//	agents/helper/spec.yaml:3:8
//	  ✗ unknown model "gpt-5"
//	    did you mean "gemini-2.5-flash"? known models: gemini-2.5-flash, gemini-2.5-pro
//
// A List collects problems from every validation step so a build reports all of them at once.
package diag

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Severity says whether a problem stops the build.
type Severity int

const (
	// Error stops the build.
	Error Severity = iota
	// Warning is reported but does not stop the build.
	Warning
)

func (s Severity) String() string {
	if s == Warning {
		return "warning"
	}
	return "error"
}

// MarshalText encodes the severity as "error" or "warning".
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes "error" or "warning".
func (s *Severity) UnmarshalText(b []byte) error {
	switch string(b) {
	case "error":
		*s = Error
	case "warning":
		*s = Warning
	default:
		return fmt.Errorf("unknown severity %q (want error or warning)", b)
	}
	return nil
}

// Step names the validation step that found a problem, in the order the build runs them.
type Step string

// The validation steps of `lushctl build`, in order.
const (
	StepParse      Step = "parse"      // YAML and Rego syntax, schema
	StepModels     Step = "models"     // known models
	StepTools      Step = "tools"      // local tools, MCP server reachability
	StepSkills     Step = "skills"     // skill resolution and lock integrity
	StepReferences Step = "references" // loop→agent, lush:// targets, call cycles
	StepACL        Step = "acl"        // principals, service accounts, grants
	StepBundle     Step = "bundle"     // policy compilation and bundle assembly
)

// Pos is a position in a project file. File is relative to the project root, with forward
// slashes, so that output is the same on every machine. Line and Col start at 1; zero means
// unknown.
type Pos struct {
	File string `json:"file"`
	Line int    `json:"line,omitempty"`
	Col  int    `json:"column,omitempty"`
}

// String renders the position as file:line:col, leaving out the unknown parts.
func (p Pos) String() string {
	switch {
	case p.File == "":
		return "<project>"
	case p.Line == 0:
		return p.File
	case p.Col == 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	default:
		return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
	}
}

// Compare orders positions by file, then line, then column.
func (p Pos) Compare(q Pos) int {
	return cmp.Or(strings.Compare(p.File, q.File), cmp.Compare(p.Line, q.Line), cmp.Compare(p.Col, q.Col))
}

// Diagnostic is one problem.
type Diagnostic struct {
	Severity Severity `json:"severity"`
	Pos
	Step       Step   `json:"step"`
	Code       string `json:"code"` // stable identifier for scripts, e.g. "unknown-field"
	Message    string `json:"message"`
	Suggestion string `json:"suggestion,omitempty"`
}

func (d Diagnostic) String() string {
	s := fmt.Sprintf("%s: %s: %s", d.Pos, d.Severity, d.Message)
	if d.Suggestion != "" {
		s += " (" + d.Suggestion + ")"
	}
	return s
}

// List collects diagnostics. It is safe for concurrent use, so that checks that run in parallel
// (server reachability) can report into one list.
type List struct {
	mu    sync.Mutex
	items []Diagnostic
	step  Step
}

// SetStep sets the step recorded on diagnostics added from now on.
func (l *List) SetStep(s Step) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.step = s
}

// Add records a diagnostic; an empty Step is filled with the current step.
func (l *List) Add(d Diagnostic) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d.Step == "" {
		d.Step = l.step
	}
	l.items = append(l.items, d)
}

// Errorf records an error at pos. Chain .Suggest on the result's caller side with Hint.
func (l *List) Errorf(pos Pos, code, format string, args ...any) {
	l.Add(Diagnostic{Severity: Error, Pos: pos, Code: code, Message: fmt.Sprintf(format, args...)})
}

// Warnf records a warning at pos.
func (l *List) Warnf(pos Pos, code, format string, args ...any) {
	l.Add(Diagnostic{Severity: Warning, Pos: pos, Code: code, Message: fmt.Sprintf(format, args...)})
}

// ErrorHint records an error at pos with a suggestion.
func (l *List) ErrorHint(pos Pos, code, suggestion, format string, args ...any) {
	l.Add(Diagnostic{Severity: Error, Pos: pos, Code: code, Message: fmt.Sprintf(format, args...), Suggestion: suggestion})
}

// WarnHint records a warning at pos with a suggestion.
func (l *List) WarnHint(pos Pos, code, suggestion, format string, args ...any) {
	l.Add(Diagnostic{Severity: Warning, Pos: pos, Code: code, Message: fmt.Sprintf(format, args...), Suggestion: suggestion})
}

// HasErrors reports whether any diagnostic is an error.
func (l *List) HasErrors() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.items {
		if d.Severity == Error {
			return true
		}
	}
	return false
}

// Counts returns the number of errors and warnings.
func (l *List) Counts() (errors, warnings int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.items {
		if d.Severity == Error {
			errors++
		} else {
			warnings++
		}
	}
	return errors, warnings
}

// Sorted returns the diagnostics ordered by file, line, column, severity and message, so output
// is stable whatever order the checks ran in. Exact duplicates are dropped.
func (l *List) Sorted() []Diagnostic {
	l.mu.Lock()
	out := slices.Clone(l.items)
	l.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Diagnostic) int {
		return cmp.Or(a.Pos.Compare(b.Pos), cmp.Compare(a.Severity, b.Severity),
			strings.Compare(a.Message, b.Message), strings.Compare(a.Suggestion, b.Suggestion))
	})
	return slices.Compact(out)
}

// MarshalJSON encodes the sorted diagnostics as a JSON array.
func (l *List) MarshalJSON() ([]byte, error) {
	items := l.Sorted()
	if items == nil {
		items = []Diagnostic{}
	}
	return json.Marshal(items)
}
