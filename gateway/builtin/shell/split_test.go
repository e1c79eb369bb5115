package shell

import (
	"slices"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
		err  string
	}{
		{"ls -la", []string{"ls", "-la"}, ""},
		{"  echo   a\tb  ", []string{"echo", "a", "b"}, ""},
		{`echo "a b" 'c d' e\ f`, []string{"echo", "a b", "c d", "e f"}, ""},
		{`echo "say \"hi\" \\ \n"`, []string{"echo", `say "hi" \ \n`}, ""},
		{`echo 'it''s'`, []string{"echo", "its"}, ""},
		{`echo ""`, []string{"echo", ""}, ""},
		{`grep "a|b" 'x;y' "$HOME"`, []string{"grep", "a|b", "x;y", "$HOME"}, ""},
		{"echo x; rm", nil, `';' is shell syntax`},
		{"a && b", nil, `'&' is shell syntax`},
		{"a | b", nil, `'|' is shell syntax`},
		{"cat < f", nil, `'<' is shell syntax`},
		{"echo $HOME", nil, `'$' is shell syntax`},
		{"echo `id`", nil, "'`' is shell syntax"},
		{"echo (x)", nil, `'(' is shell syntax`},
		{"a\nb", nil, `'\n' is shell syntax`},
		{`echo 'open`, nil, "unterminated single quote"},
		{`echo "open`, nil, "unterminated double quote"},
		{`echo x\`, nil, "a backslash ends the command"},
		{"echo \x00", nil, "NUL"},
		{"", nil, "empty"},
		{"   ", nil, "empty"},
	} {
		got, err := Split(tc.line)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Split(%q) = %q, %v; want error %q", tc.line, got, err, tc.err)
			}
		case err != nil || !slices.Equal(got, tc.want):
			t.Errorf("Split(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
}

// quote is the inverse of Split for any argument: single quotes, with ' written as '\”.
func quote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// FuzzSplit: Split never panics, an accepted line has no empty-command result, and quoting any
// arguments (without NUL) splits back to them.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"ls -la", `echo "a\"b" 'c'`, "echo x; rm -rf /", "a\\ b", "'", `"\\`, "$(id)", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args, err := Split(line)
		if err == nil && len(args) == 0 {
			t.Fatal("no arguments and no error")
		}
		want := strings.Fields(strings.ReplaceAll(line, "\x00", ""))
		if len(want) == 0 {
			return
		}
		got, err := Split(quote(want))
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("quote/split %q: %q %v", want, got, err)
		}
	})
}
