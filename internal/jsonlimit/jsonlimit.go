// Package jsonlimit bounds the shape of a JSON value before anything decodes it: its encoded
// size, how deep it nests and how many values it holds, and that its strings are text (valid
// UTF-8, no unpaired UTF-16 surrogate escapes, which decoders silently replace with U+FFFD). Check
// reads the raw bytes once, without building anything, and stops at the first problem, so a value
// it refuses costs about what reading a flat value of the same size costs.
//
// Every enforcement point checks a call's arguments with it before it decodes them for the
// policy: the MCP gateway's tools/call, the ext_authz server's, and agentd's agent tools.
package jsonlimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Defaults of Limits. No real tool call comes near them: models write a few levels and at most
// some thousands of values per call (a model's whole turn is tens of thousands of tokens), and
// JSON Schemas of MCP tools describe a handful of levels. What they bound is what one call can
// cost to decide and to log: the decision converts every value of the arguments for the policy
// and records them in the decision log.
const (
	DefaultMaxDepth = 64      // nested objects and arrays, the outermost counted
	DefaultMaxNodes = 100_000 // values: objects, arrays, strings, numbers, booleans and nulls
	DefaultMaxBytes = 1 << 20 // the encoded value as sent: 1 MiB
)

// MaxDepthLimit is the most MaxDepth may be: Go's JSON decoder refuses values nested deeper.
const MaxDepthLimit = 10_000

// Limits bound a JSON value. The zero value of a field is its default.
type Limits struct {
	MaxDepth int   `yaml:"max_depth"` // default DefaultMaxDepth
	MaxNodes int   `yaml:"max_nodes"` // default DefaultMaxNodes
	MaxBytes int64 `yaml:"max_bytes"` // default DefaultMaxBytes
	// Setting names where the limits are configured, such as "gateway config limits.arguments":
	// an Error names the setting to raise (Setting + ".max_depth"). It is not read from YAML.
	Setting string `yaml:"-"`
}

// WithDefaults fills the fields left zero.
func (l Limits) WithDefaults() Limits {
	if l.MaxDepth == 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxNodes == 0 {
		l.MaxNodes = DefaultMaxNodes
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	return l
}

// Validate names every bad field as field.max_depth and so on (field is where the limits sit in
// a config file, such as "limits.arguments").
func (l Limits) Validate(field string) error {
	var errs []error
	if l.MaxDepth < 0 || l.MaxDepth > MaxDepthLimit {
		errs = append(errs, fmt.Errorf("%s.max_depth: %d is not between 1 and %d (0 or unset: the default, %d)", field, l.MaxDepth, MaxDepthLimit, DefaultMaxDepth))
	}
	if l.MaxNodes < 0 {
		errs = append(errs, fmt.Errorf("%s.max_nodes: %d must be positive (0 or unset: the default, %d)", field, l.MaxNodes, DefaultMaxNodes))
	}
	if l.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("%s.max_bytes: %d must be positive (0 or unset: the default, %d)", field, l.MaxBytes, DefaultMaxBytes))
	}
	return errors.Join(errs...)
}

// The limits an Error can name (Error.Limit).
const (
	LimitDepth = "max_depth"
	LimitNodes = "max_nodes"
	LimitBytes = "max_bytes"
)

// Error is why Check refused a value: a limit it exceeds, or a string that is not text. Its
// message reads after the value's name: "tools/call arguments " + err.Error().
type Error struct {
	// Limit is the limit exceeded (LimitDepth, LimitNodes, LimitBytes); "" when the value is not
	// text or not JSON.
	Limit string
	Max   int64  // the limit's value
	Bytes int64  // the value's encoded size
	Path  string // a JSON pointer to where the problem was found ("" for the whole value)
	msg   string
}

func (e *Error) Error() string { return e.msg }

// exceeded is the Error of a value over the limit named limit.
func (l Limits) exceeded(limit string, max, size int64, path, what string) *Error {
	msg := fmt.Sprintf("%s; the limit is %d", what, max)
	if l.Setting != "" {
		msg += " (" + l.Setting + "." + limit + ")"
	}
	return &Error{Limit: limit, Max: max, Bytes: size, Path: path, msg: msg}
}

// Check reads one JSON value and returns the first problem found, or nil: a size over
// MaxBytes, nesting deeper than MaxDepth, more values than MaxNodes, a string (or member name)
// that is not valid UTF-8 or holds an unpaired surrogate escape, or text that is not one JSON
// value. It reads data at most once; it allocates the stack of open objects and arrays (once for
// values less than 17 levels deep) and the Error it returns.
func (l Limits) Check(data []byte) *Error {
	l = l.WithDefaults()
	if size := int64(len(data)); size > l.MaxBytes {
		return l.exceeded(LimitBytes, l.MaxBytes, size, "", fmt.Sprintf("are %d bytes", size))
	}
	s := scanner{data: data, lim: l, stack: make([]frame, 0, min(l.MaxDepth, 16))}
	return s.run()
}

// frame is one object or array the scanner is in: enough to name a path when there is a problem.
type frame struct {
	object     bool
	index      int // arrays: the element being read
	key0, key1 int // objects: the raw member name being read, data[key0:key1] without quotes
}

// scanner reads one JSON value, keeping the objects and arrays it is in on a stack no deeper
// than the depth limit.
type scanner struct {
	data  []byte
	lim   Limits
	stack []frame
	nodes int
}

// run reads the value: a loop of "a value starts here" and "a value ended here" steps, with the
// open objects and arrays on the stack.
func (s *scanner) run() *Error {
	i := 0
	for {
		var opened bool
		var err *Error
		if i, opened, err = s.value(i); err != nil {
			return err
		}
		if opened {
			continue // the first value of an object or array starts
		}
		if i, err = s.next(i); err != nil || len(s.stack) == 0 {
			return err
		}
	}
}

// next reads what follows a value that ended at i: the ends of the objects and arrays it closes,
// then the comma (and member name) before the next value, whose start it returns; or the end of
// the text, when the outermost value ended (the stack is then empty).
func (s *scanner) next(i int) (int, *Error) {
	for {
		i = s.space(i)
		if len(s.stack) == 0 {
			if i != len(s.data) {
				return i, s.syntax(i, "more than one JSON value")
			}
			return i, nil
		}
		if i >= len(s.data) {
			return i, s.syntax(i, "the value ends early")
		}
		top := &s.stack[len(s.stack)-1]
		c := s.data[i]
		if (c == '}' && top.object) || (c == ']' && !top.object) {
			s.stack = s.stack[:len(s.stack)-1]
			i++
			continue // the object or array is a value that ended
		}
		if c != ',' {
			return i, s.syntax(i, "expected , or the end of the "+containerName(top.object))
		}
		if !top.object {
			top.index++
			return i + 1, nil
		}
		return s.member(s.space(i + 1))
	}
}

// value reads the value that starts at i: a whole scalar, or an empty object or array; or the
// opening of an object or array (with its first member name), which it pushes on the stack
// (opened).
func (s *scanner) value(i int) (next int, opened bool, err *Error) {
	i = s.space(i)
	if i >= len(s.data) {
		return i, false, s.syntax(i, "a value is missing")
	}
	s.nodes++
	if s.nodes > s.lim.MaxNodes {
		return i, false, s.lim.exceeded(LimitNodes, int64(s.lim.MaxNodes), int64(len(s.data)), s.path(), fmt.Sprintf("hold more than %d values", s.lim.MaxNodes))
	}
	switch c := s.data[i]; c {
	case '{', '[':
		if len(s.stack) == s.lim.MaxDepth {
			return i, false, s.lim.exceeded(LimitDepth, int64(s.lim.MaxDepth), int64(len(s.data)), s.path(), fmt.Sprintf("nest more than %d levels deep", s.lim.MaxDepth))
		}
		object, closer := c == '{', byte(']')
		if object {
			closer = '}'
		}
		j := s.space(i + 1)
		if j < len(s.data) && s.data[j] == closer {
			return j + 1, false, nil
		}
		s.stack = append(s.stack, frame{object: object})
		if object {
			j, err = s.member(j)
		}
		return j, true, err
	case '"':
		next, err = s.str(i, false)
	case 't':
		next, err = s.literal(i, "true")
	case 'f':
		next, err = s.literal(i, "false")
	case 'n':
		next, err = s.literal(i, "null")
	default:
		next, err = s.number(i)
	}
	return next, false, err
}

// member reads a member name and its colon at i, in the object on top of the stack.
func (s *scanner) member(i int) (int, *Error) {
	if i >= len(s.data) || s.data[i] != '"' {
		return i, s.syntax(i, "expected a member name")
	}
	end, err := s.str(i, true)
	if err != nil {
		return end, err
	}
	top := &s.stack[len(s.stack)-1]
	top.key0, top.key1 = i+1, end-1
	end = s.space(end)
	if end >= len(s.data) || s.data[end] != ':' {
		return end, s.syntax(end, "expected : after a member name")
	}
	return end + 1, nil
}

// str reads a string at i (its opening quote), a member name when name is set, and returns the
// index after its closing quote.
func (s *scanner) str(i int, name bool) (int, *Error) {
	i++
	for i < len(s.data) {
		c := s.data[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			n, err := s.escape(i, name)
			if err != nil {
				return i, err
			}
			i = n
		case c < 0x20:
			return i, s.syntax(i, "a control character in a string")
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(s.data[i:])
			if r == utf8.RuneError && size == 1 {
				return i, s.notText(name, "invalid UTF-8")
			}
			i += size
		}
	}
	return i, s.syntax(i, "a string is not closed")
}

// escape reads the escape sequence at i (its backslash) in a string (a member name when name is
// set), and returns the index after it. A \u escape of a UTF-16 surrogate must be one of a pair.
func (s *scanner) escape(i int, name bool) (int, *Error) {
	if i+1 >= len(s.data) {
		return i, s.syntax(i, "a string is not closed")
	}
	switch s.data[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2, nil
	case 'u':
	default:
		return i, s.syntax(i, "an invalid escape in a string")
	}
	r, ok := s.hex4(i + 2)
	if !ok {
		return i, s.syntax(i, "an invalid \\u escape in a string")
	}
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return i, s.notText(name, "an unpaired UTF-16 surrogate escape")
	case r >= 0xD800 && r <= 0xDBFF:
		if i+11 < len(s.data) && s.data[i+6] == '\\' && s.data[i+7] == 'u' {
			if lo, ok := s.hex4(i + 8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				return i + 12, nil
			}
		}
		return i, s.notText(name, "an unpaired UTF-16 surrogate escape")
	}
	return i + 6, nil
}

// hex4 reads the four hex digits of a \u escape at i.
func (s *scanner) hex4(i int) (rune, bool) {
	if i+4 > len(s.data) {
		return 0, false
	}
	var r rune
	for _, c := range s.data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// literal reads true, false or null at i.
func (s *scanner) literal(i int, word string) (int, *Error) {
	if len(s.data)-i < len(word) || string(s.data[i:i+len(word)]) != word {
		return i, s.syntax(i, "an invalid literal")
	}
	return i + len(word), nil
}

// number reads a number at i: -?int frac? exp?.
func (s *scanner) number(i int) (int, *Error) {
	start := i
	if i < len(s.data) && s.data[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s.data) && s.data[i] >= '0' && s.data[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if d := i; digits() == 0 || (s.data[d] == '0' && i-d > 1) {
		return start, s.syntax(start, "an invalid value")
	}
	if i < len(s.data) && s.data[i] == '.' {
		i++
		if digits() == 0 {
			return start, s.syntax(start, "an invalid number")
		}
	}
	if i < len(s.data) && (s.data[i] == 'e' || s.data[i] == 'E') {
		i++
		if i < len(s.data) && (s.data[i] == '+' || s.data[i] == '-') {
			i++
		}
		if digits() == 0 {
			return start, s.syntax(start, "an invalid number")
		}
	}
	return i, nil
}

// space skips JSON whitespace from i.
func (s *scanner) space(i int) int {
	for i < len(s.data) {
		switch s.data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// notText is the Error of a string that is not text (what): a member name (name) is named by
// its object's path, any other string by its own.
func (s *scanner) notText(name bool, what string) *Error {
	path, where := s.path(), "a string"
	if name {
		path, where = pointer(s.data, s.stack[:len(s.stack)-1]), "a member name"
	}
	msg := fmt.Sprintf("hold %s with %s", where, what)
	if path != "" {
		msg += " at " + path
	}
	msg += ": send text as UTF-8, and binary data base64-encoded"
	return &Error{Path: path, Bytes: int64(len(s.data)), msg: msg}
}

// syntax is the Error of text that is not one JSON value.
func (s *scanner) syntax(i int, what string) *Error {
	return &Error{Bytes: int64(len(s.data)), Path: s.path(), msg: fmt.Sprintf("are not valid JSON: %s at byte %d", what, i)}
}

// path is a JSON pointer to the value being read.
func (s *scanner) path() string { return pointer(s.data, s.stack) }

// Bounds of the paths errors name: each token, and the whole pointer.
const (
	maxToken = 40
	maxPath  = 200
)

// pointer is a JSON pointer through the frames (RFC 6901), its member names unescaped and
// bounded.
func pointer(data []byte, frames []frame) string {
	var b strings.Builder
	for _, f := range frames {
		tok := strconv.Itoa(f.index)
		if f.object {
			tok = memberName(data[f.key0:f.key1])
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
		b.WriteString("/" + bounded(tok, maxToken))
		if b.Len() > maxPath {
			return bounded(b.String(), maxPath)
		}
	}
	return b.String()
}

// memberName is a raw member name (already checked) unescaped, with control characters spelt
// as \u escapes: it goes into messages and logs.
func memberName(raw []byte) string {
	name := string(raw)
	if bytes.ContainsRune(raw, '\\') {
		json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &name)
	}
	return controlEscaped(name)
}

// controlEscaped spells the control characters of s as \u escapes.
func controlEscaped(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			fmt.Fprintf(&b, "\\u%04x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// containerName names an object or an array.
func containerName(object bool) string {
	if object {
		return "object"
	}
	return "array"
}

// bounded cuts s to at most n bytes at a rune boundary, marking the cut with "…".
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
