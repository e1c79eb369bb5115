package enforce

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/lush-agents/lush/policies/authz"
)

// inputJSON is json.Marshal(in), nil when that fails: the policy input as the decision log keeps
// it. It is written field by field instead of through reflection, since every decision logs its
// input; TestInputJSONIsMarshal compares the two on random and adversarial inputs. What the
// writer does not write itself (a string with control characters or non-ASCII bytes, a number
// json.Marshal refuses, an argument of a type decoded JSON does not have) goes to json.Marshal.
func inputJSON(in *authz.Input) []byte {
	w := getJSONWriter()
	defer putJSONWriter(w)
	w.input(in)
	if !w.slow {
		return slices.Clone(w.buf)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil
	}
	return b
}

// decisionJSON is json.Marshal(d), written as inputJSON writes the input.
func decisionJSON(d *authz.Decision) []byte {
	w := getJSONWriter()
	defer putJSONWriter(w)
	w.decision(d)
	if !w.slow {
		return slices.Clone(w.buf)
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil
	}
	return b
}

var jsonWriters = sync.Pool{New: func() any { return new(jsonWriter) }}

func getJSONWriter() *jsonWriter {
	w := jsonWriters.Get().(*jsonWriter)
	w.buf, w.slow = w.buf[:0], false
	return w
}

// maxPooledJSON bounds the buffers kept for reuse: one large input does not stay in memory.
const maxPooledJSON = 64 << 10

func putJSONWriter(w *jsonWriter) {
	if cap(w.buf) <= maxPooledJSON {
		jsonWriters.Put(w)
	}
}

// jsonWriter appends JSON as encoding/json's Marshal does (HTML characters escaped). A value it
// does not write itself sets slow, and the caller gives the whole value to json.Marshal.
type jsonWriter struct {
	buf  []byte
	slow bool
}

func (w *jsonWriter) raw(s string) { w.buf = append(w.buf, s...) }

func (w *jsonWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 {
			w.slow = true
			return
		}
	}
	w.buf = append(w.buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		var esc string
		switch s[i] {
		case '"':
			esc = `\"`
		case '\\':
			esc = `\\`
		case '<':
			esc = `\u003c`
		case '>':
			esc = `\u003e`
		case '&':
			esc = `\u0026`
		default:
			continue
		}
		w.buf = append(append(w.buf, s[start:i]...), esc...)
		start = i + 1
	}
	w.buf = append(append(w.buf, s[start:]...), '"')
}

// field writes key (`,"name":` with its comma, or without for the first) and the string s.
func (w *jsonWriter) field(key, s string) {
	w.raw(key)
	w.str(s)
}

// omit writes a string field tagged omitempty.
func (w *jsonWriter) omit(key, s string) {
	if s != "" {
		w.field(key, s)
	}
}

func (w *jsonWriter) bool(b bool) {
	if b {
		w.raw("true")
	} else {
		w.raw("false")
	}
}

func (w *jsonWriter) int(n int64) { w.buf = strconv.AppendInt(w.buf, n, 10) }

// float writes f as encoding/json's float64 encoder does.
func (w *jsonWriter) float(f float64) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		w.slow = true
		return
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	w.buf = strconv.AppendFloat(w.buf, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		if n := len(w.buf); n >= 4 && w.buf[n-4] == 'e' && w.buf[n-3] == '-' && w.buf[n-2] == '0' {
			w.buf[n-2] = w.buf[n-1]
			w.buf = w.buf[:n-1]
		}
	}
}

func (w *jsonWriter) strings(ss []string) {
	if ss == nil {
		w.raw("null")
		return
	}
	w.buf = append(w.buf, '[')
	for i, s := range ss {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.str(s)
	}
	w.buf = append(w.buf, ']')
}

// maxAnyDepth bounds the nesting the writer follows in decoded JSON; deeper goes to json.Marshal.
const maxAnyDepth = 256

// any writes decoded JSON (and the ints the enforcer puts in place of omitted arguments).
func (w *jsonWriter) any(v any, depth int) {
	if w.slow {
		return
	}
	if depth > maxAnyDepth {
		w.slow = true
		return
	}
	switch v := v.(type) {
	case nil:
		w.raw("null")
	case string:
		w.str(v)
	case bool:
		w.bool(v)
	case float64:
		w.float(v)
	case int:
		w.int(int64(v))
	case int64:
		w.int(v)
	case map[string]any:
		if v == nil {
			w.raw("null")
			return
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		w.buf = append(w.buf, '{')
		for i, k := range keys {
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			w.str(k)
			w.buf = append(w.buf, ':')
			w.any(v[k], depth+1)
		}
		w.buf = append(w.buf, '}')
	case []any:
		if v == nil {
			w.raw("null")
			return
		}
		w.buf = append(w.buf, '[')
		for i, x := range v {
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			w.any(x, depth+1)
		}
		w.buf = append(w.buf, ']')
	default:
		w.slow = true
	}
}

// input writes authz.Input's fields in their order, with their tags.
func (w *jsonWriter) input(in *authz.Input) {
	w.field(`{"action":`, in.Action)
	w.field(`,"principal":{"id":`, in.Principal.ID)
	w.raw(`,"groups":`)
	w.strings(in.Principal.Groups)
	w.omit(`,"authentication":`, in.Principal.Authentication)
	w.raw("}")
	w.omit(`,"agent":`, in.Agent)
	if len(in.Chain) > 0 {
		w.raw(`,"chain":`)
		w.strings(in.Chain)
	}
	if in.Depth != 0 {
		w.raw(`,"depth":`)
		w.int(int64(in.Depth))
	}
	if t := in.Tool; t != nil {
		w.field(`,"tool":{"ref":`, t.Ref)
		w.omit(`,"name":`, t.Name)
		w.omit(`,"access":`, t.Access)
		w.omit(`,"risk":`, t.Risk)
		if t.ArgumentsValid != nil {
			w.raw(`,"arguments_valid":`)
			w.bool(*t.ArgumentsValid)
		}
		if len(t.SchemaErrors) > 0 {
			w.raw(`,"schema_errors":`)
			w.strings(t.SchemaErrors)
		}
		w.omit(`,"refusal":`, t.Refusal)
		w.raw("}")
	}
	if in.Arguments != nil {
		w.raw(`,"arguments":`)
		w.any(in.Arguments, 0)
	}
	w.raw(`,"live_writes":`)
	w.bool(in.LiveWrites)
	w.omit(`,"environment":`, in.Environment)
	w.omit(`,"loop":`, in.Loop)
	if r := in.RateLimit; r != nil {
		w.raw(`,"rate_limit":{"exceeded":`)
		w.bool(r.Exceeded)
		w.field(`,"limit":`, r.Limit)
		w.raw(`,"retry_after_ms":`)
		w.int(r.RetryAfterMS)
		w.raw("}")
	}
	if a := in.Approval; a != nil {
		w.field(`,"approval":{"id":`, a.ID)
		w.field(`,"status":`, a.Status)
		w.field(`,"approved_by":`, a.ApprovedBy)
		w.raw("}")
	}
	if b := in.Budget; b != nil {
		w.raw(`,"budget":{"exhausted":`)
		w.bool(b.Exhausted)
		w.raw(`,"budgets":`)
		w.budgets(b.Budgets)
		w.raw(`,"exhausted_by":`)
		w.budgets(b.ExhaustedBy)
		w.omit(`,"error":`, b.Error)
		w.raw("}")
	}
	if c := in.Call; c != nil {
		w.field(`,"call":{"decision_id":`, c.DecisionID)
		w.field(`,"action":`, c.Action)
		w.field(`,"outcome":`, c.Outcome)
		w.raw("}")
	}
	w.raw("}")
}

func (w *jsonWriter) budgets(bs []authz.BudgetState) {
	if bs == nil {
		w.raw("null")
		return
	}
	w.buf = append(w.buf, '[')
	for i := range bs {
		b := &bs[i]
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.field(`{"name":`, b.Name)
		w.field(`,"subject":`, b.Subject)
		w.field(`,"unit":`, b.Unit)
		w.field(`,"per":`, b.Per)
		w.raw(`,"limit":`)
		w.int(b.Limit)
		w.raw(`,"used":`)
		w.int(b.Used)
		w.raw(`,"granted":`)
		w.int(b.Granted)
		w.raw(`,"remaining":`)
		w.int(b.Remaining)
		w.raw(`,"cost":`)
		w.int(b.Cost)
		w.field(`,"period_end":`, b.PeriodEnd)
		w.buf = append(w.buf, '}')
	}
	w.buf = append(w.buf, ']')
}

// decision writes authz.Decision's fields in their order, with their tags.
func (w *jsonWriter) decision(d *authz.Decision) {
	w.raw(`{"allow":`)
	w.bool(d.Allow)
	w.field(`,"outcome":`, d.Outcome)
	w.raw(`,"stub":`)
	w.bool(d.Stub)
	w.raw(`,"approval_required":`)
	w.bool(d.ApprovalRequired)
	w.field(`,"access":`, d.Access)
	w.field(`,"risk":`, d.Risk)
	w.raw(`,"reasons":`)
	w.reasons(d.Reasons)
	w.raw(`,"approvals":`)
	w.reasons(d.Approvals)
	w.raw(`,"rules":`)
	w.strings(d.Rules)
	w.field(`,"revision":`, d.Revision)
	w.omit(`,"error":`, d.Error)
	w.raw("}")
}

func (w *jsonWriter) reasons(rs []authz.Reason) {
	if rs == nil {
		w.raw("null")
		return
	}
	w.buf = append(w.buf, '[')
	for i := range rs {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.field(`{"rule":`, rs[i].Rule)
		w.field(`,"message":`, rs[i].Message)
		w.buf = append(w.buf, '}')
	}
	w.buf = append(w.buf, ']')
}
