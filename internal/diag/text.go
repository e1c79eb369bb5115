package diag

import (
	"fmt"
	"io"
	"strings"
)

// WriteText prints diagnostics in the build's human format: the position on its own line, then
// the problem marked ✗ (error) or ⚠ (warning), then the suggestion.
func WriteText(w io.Writer, ds []Diagnostic) error {
	var b strings.Builder
	for _, d := range ds {
		mark := "✗"
		if d.Severity == Warning {
			mark = "⚠ warning:"
		}
		fmt.Fprintf(&b, "%s\n  %s %s\n", d.Pos, mark, indent(d.Message, "    "))
		if d.Suggestion != "" {
			fmt.Fprintf(&b, "    %s\n", indent(d.Suggestion, "    "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func indent(s, prefix string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

// Summary is a one-line count such as "2 errors, 1 warning".
func Summary(errors, warnings int) string {
	return fmt.Sprintf("%s, %s", Plural(errors, "error"), Plural(warnings, "warning"))
}

// Plural renders a count with its noun: "1 error", "2 errors".
func Plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
