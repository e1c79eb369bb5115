package shell

import (
	"fmt"
	"strings"
)

// operators are the characters a shell would treat as syntax. Commands run without a shell, so
// unquoted they are refused (rather than passed on as literal arguments): a model that writes
// `make test | tail` or `echo x; rm -rf /` learns that pipes and lists do not exist here.
const operators = ";&|<>`$(){}\n\r"

// SyntaxError is a command line that does not split into arguments.
type SyntaxError struct {
	Offset int // byte offset in the command line
	Msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("at byte %d: %s", e.Offset, e.Msg) }

// Split splits a command line into arguments the way a POSIX shell splits words, without any
// expansion: 'single quotes' keep everything, "double quotes" keep everything but \" and \\,
// a backslash outside quotes escapes the next byte. Unquoted shell operators (; & | < > ` $ ( )
// { } and newlines) are errors: there is no shell to run them.
func Split(line string) ([]string, error) {
	if i := strings.IndexByte(line, 0); i >= 0 {
		return nil, &SyntaxError{i, "a NUL byte cannot be part of a command"}
	}
	var (
		args  []string
		cur   strings.Builder
		inArg bool
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, &SyntaxError{i, "unterminated single quote"}
			}
			cur.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inArg = true
		case c == '"':
			j := i + 1
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) && (line[j+1] == '"' || line[j+1] == '\\') {
					j++
				}
				cur.WriteByte(line[j])
			}
			if j >= len(line) {
				return nil, &SyntaxError{i, "unterminated double quote"}
			}
			i = j
			inArg = true
		case c == '\\':
			if i+1 >= len(line) {
				return nil, &SyntaxError{i, "a backslash ends the command"}
			}
			i++
			cur.WriteByte(line[i])
			inArg = true
		case strings.IndexByte(operators, c) >= 0:
			return nil, &SyntaxError{i, fmt.Sprintf("%q is shell syntax, and commands run without a shell: run one command, and quote the character if it is part of an argument", c)}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	if len(args) == 0 {
		return nil, &SyntaxError{0, "the command is empty"}
	}
	return args, nil
}
