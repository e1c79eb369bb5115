package decisionlog

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
)

// encodeEvent is encodeJSON(e), the event's stored document, written field by field instead of
// through reflection: Record runs it for every decision. It gives the same bytes as encodeJSON
// (TestEncodeEventIsEncodeJSON compares them on random and adversarial events) and falls back to
// encodeJSON for what it does not write itself (a timestamp MarshalJSON refuses, an empty but
// non-nil raw document).
func encodeEvent(e *Event) (string, error) {
	if data, ok := encodeEventFast(e); ok {
		return data, nil
	}
	data, err := encodeJSON(e)
	return string(data), err
}

// encodeEventFast is encodeEvent's own writer; it reports false when encodeJSON must write e.
func encodeEventFast(e *Event) (string, bool) {
	if (e.Input != nil && len(e.Input) == 0) || (e.Result != nil && len(e.Result) == 0) {
		return "", false
	}
	var tsBuf [40]byte
	ts, ok := timestampJSON(tsBuf[:0], e.Timestamp)
	if !ok {
		return "", false
	}
	buf := eventBufs.Get().(*bytes.Buffer)
	defer eventBufs.Put(buf)
	buf.Reset()
	w := eventWriter{buf: buf}
	w.key(`{"decision_id":`, e.DecisionID)
	w.key(`,"path":`, e.Path)
	buf.WriteString(`,"input":`)
	if !w.raw(e.Input) {
		return "", false
	}
	buf.WriteString(`,"result":`)
	if !w.raw(e.Result) {
		return "", false
	}
	buf.WriteString(`,"timestamp":`)
	buf.Write(ts)
	buf.WriteString(`,"labels":`)
	w.stringMap(e.Labels)
	buf.WriteString(`,"bundles":`)
	if e.Bundles == nil {
		buf.WriteString("null")
	} else {
		buf.WriteByte('{')
		for i, k := range slices.Sorted(maps.Keys(e.Bundles)) {
			if i > 0 {
				buf.WriteByte(',')
			}
			w.str(k)
			buf.WriteString(`:{"revision":`)
			w.str(e.Bundles[k].Revision)
			buf.WriteByte('}')
		}
		buf.WriteByte('}')
	}
	buf.WriteString(`,"metrics":`)
	if e.Metrics == nil {
		buf.WriteString("null")
	} else {
		buf.WriteByte('{')
		for i, k := range slices.Sorted(maps.Keys(e.Metrics)) {
			if i > 0 {
				buf.WriteByte(',')
			}
			w.str(k)
			buf.WriteByte(':')
			w.int(e.Metrics[k])
		}
		buf.WriteByte('}')
	}
	if len(e.Erased) > 0 {
		buf.WriteString(`,"erased":`)
		w.strings(e.Erased)
	}
	if len(e.Masked) > 0 {
		buf.WriteString(`,"masked":`)
		w.strings(e.Masked)
	}
	w.key(`,"revision":`, e.Revision)
	w.key(`,"enforcement_point":`, e.Point)
	w.key(`,"principal":`, e.Principal)
	buf.WriteString(`,"groups":`)
	w.strings(e.Groups)
	w.omit(`,"agent":`, e.Agent)
	if len(e.Chain) > 0 {
		buf.WriteString(`,"chain":`)
		w.strings(e.Chain)
	}
	w.key(`,"action":`, e.Action)
	w.omit(`,"tool":`, e.Tool)
	w.omit(`,"tool_name":`, e.ToolName)
	w.omit(`,"access":`, e.Access)
	w.omit(`,"risk":`, e.Risk)
	w.key(`,"outcome":`, e.Outcome)
	buf.WriteString(`,"rules":`)
	w.strings(e.Rules)
	buf.WriteString(`,"latency_ns":`)
	w.int(e.LatencyNS)
	w.omit(`,"environment":`, e.Environment)
	w.omit(`,"trace_id":`, e.TraceID)
	w.omit(`,"span_id":`, e.SpanID)
	w.omit(`,"error":`, e.Error)
	w.omit(`,"parent_id":`, e.Parent)
	if c := e.Credential; c != nil {
		w.key(`,"credential":{"type":`, c.Type)
		w.key(`,"obtained":`, c.Obtained)
		w.omit(`,"source":`, c.Source)
		if len(c.Act) > 0 {
			buf.WriteString(`,"act":`)
			w.strings(c.Act)
		}
		buf.WriteByte('}')
	}
	buf.WriteByte('}')
	if w.slow {
		return "", false
	}
	return buf.String(), true
}

// timestampJSON appends t.MarshalJSON()'s bytes to b, without its allocation for a UTC time (as
// Record stores them) in the years it can write; it reports false when MarshalJSON fails.
func timestampJSON(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); t.Location() == time.UTC && y >= 0 && y <= 9999 {
		b = append(t.AppendFormat(append(b, '"'), time.RFC3339Nano), '"')
		return b, true
	}
	ts, err := t.MarshalJSON()
	return append(b, ts...), err == nil
}

var eventBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// eventWriter writes JSON values as encoding/json does without HTML escaping. A string it does
// not write itself (one with control characters or non-ASCII bytes, which JSON escapes in ways
// this writer leaves to encoding/json) sets slow.
type eventWriter struct {
	buf  *bytes.Buffer
	slow bool
}

func (w *eventWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 {
			w.slow = true
			return
		}
	}
	w.buf.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			w.buf.WriteString(s[start:i])
			w.buf.WriteByte('\\')
			w.buf.WriteByte(c)
			start = i + 1
		}
	}
	w.buf.WriteString(s[start:])
	w.buf.WriteByte('"')
}

func (w *eventWriter) key(key, s string) {
	w.buf.WriteString(key)
	w.str(s)
}

// omit writes a field tagged omitempty.
func (w *eventWriter) omit(key, s string) {
	if s != "" {
		w.key(key, s)
	}
}

func (w *eventWriter) int(n int64) {
	var b [20]byte
	w.buf.Write(strconv.AppendInt(b[:0], n, 10))
}

func (w *eventWriter) strings(ss []string) {
	if ss == nil {
		w.buf.WriteString("null")
		return
	}
	w.buf.WriteByte('[')
	for i, s := range ss {
		if i > 0 {
			w.buf.WriteByte(',')
		}
		w.str(s)
	}
	w.buf.WriteByte(']')
}

func (w *eventWriter) stringMap(m map[string]string) {
	if m == nil {
		w.buf.WriteString("null")
		return
	}
	w.buf.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			w.buf.WriteByte(',')
		}
		w.str(k)
		w.buf.WriteByte(':')
		w.str(m[k])
	}
	w.buf.WriteByte('}')
}

// raw writes a raw document compacted, as encoding/json writes a json.RawMessage; it reports
// false for one that is not valid JSON.
func (w *eventWriter) raw(m json.RawMessage) bool {
	if m == nil {
		w.buf.WriteString("null")
		return true
	}
	w.buf.Grow(len(m))
	b, ok := appendCompact(w.buf.AvailableBuffer(), m)
	if ok {
		w.buf.Write(b)
		return true
	}
	return json.Compact(w.buf, m) == nil
}

// appendCompact appends json.Compact's bytes for src to dst, without its scanner's call per byte;
// it reports false for src that is not valid JSON, and for JSON that nests deeper than
// maxCompactDepth, which json.Compact is left to judge (TestAppendCompactIsCompact compares
// the two on random and mangled documents).
func appendCompact(dst, src []byte) ([]byte, bool) {
	c := compactor{src: src, dst: dst}
	c.space()
	if !c.value(0) {
		return dst, false
	}
	c.space()
	if c.i != len(src) {
		return dst, false
	}
	return c.dst, true
}

// maxCompactDepth bounds appendCompact's recursion.
const maxCompactDepth = 128

type compactor struct {
	src, dst []byte
	i        int
}

func (c *compactor) space() {
	for c.i < len(c.src) {
		switch c.src[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

// value copies one JSON value at c.i, reporting whether it is valid.
func (c *compactor) value(depth int) bool {
	if c.i >= len(c.src) || depth > maxCompactDepth {
		return false
	}
	switch ch := c.src[c.i]; {
	case ch == '{' || ch == '[':
		end := byte('}')
		if ch == '[' {
			end = ']'
		}
		c.dst = append(c.dst, ch)
		c.i++
		c.space()
		if c.i < len(c.src) && c.src[c.i] == end {
			c.dst = append(c.dst, end)
			c.i++
			return true
		}
		for {
			if ch == '{' {
				if c.i >= len(c.src) || c.src[c.i] != '"' || !c.string() {
					return false
				}
				c.space()
				if c.i >= len(c.src) || c.src[c.i] != ':' {
					return false
				}
				c.dst = append(c.dst, ':')
				c.i++
				c.space()
			}
			if !c.value(depth + 1) {
				return false
			}
			c.space()
			if c.i >= len(c.src) {
				return false
			}
			switch c.src[c.i] {
			case ',':
				c.dst = append(c.dst, ',')
				c.i++
				c.space()
			case end:
				c.dst = append(c.dst, end)
				c.i++
				return true
			default:
				return false
			}
		}
	case ch == '"':
		return c.string()
	case ch == '-' || ('0' <= ch && ch <= '9'):
		return c.number()
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	}
	return false
}

// string copies the string at c.i (its opening quote).
func (c *compactor) string() bool {
	start := c.i
	for c.i++; c.i < len(c.src); c.i++ {
		switch ch := c.src[c.i]; {
		case ch == '"':
			c.i++
			c.dst = append(c.dst, c.src[start:c.i]...)
			return true
		case ch < 0x20:
			return false
		case ch == '\\':
			c.i++
			if c.i >= len(c.src) {
				return false
			}
			switch c.src[c.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if c.i+4 >= len(c.src) {
					return false
				}
				for _, h := range c.src[c.i+1 : c.i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				c.i += 4
			default:
				return false
			}
		}
	}
	return false
}

func (c *compactor) digits() int {
	n := 0
	for c.i < len(c.src) && '0' <= c.src[c.i] && c.src[c.i] <= '9' {
		c.i++
		n++
	}
	return n
}

// number copies the number at c.i.
func (c *compactor) number() bool {
	start := c.i
	if c.src[c.i] == '-' {
		c.i++
	}
	if c.i < len(c.src) && c.src[c.i] == '0' {
		c.i++
	} else if c.digits() == 0 {
		return false
	}
	if c.i < len(c.src) && c.src[c.i] == '.' {
		c.i++
		if c.digits() == 0 {
			return false
		}
	}
	if c.i < len(c.src) && (c.src[c.i] == 'e' || c.src[c.i] == 'E') {
		c.i++
		if c.i < len(c.src) && (c.src[c.i] == '+' || c.src[c.i] == '-') {
			c.i++
		}
		if c.digits() == 0 {
			return false
		}
	}
	c.dst = append(c.dst, c.src[start:c.i]...)
	return true
}

func (c *compactor) literal(lit string) bool {
	if len(c.src)-c.i < len(lit) || string(c.src[c.i:c.i+len(lit)]) != lit {
		return false
	}
	c.i += len(lit)
	c.dst = append(c.dst, lit...)
	return true
}
