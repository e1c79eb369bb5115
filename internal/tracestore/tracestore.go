// Package tracestore keeps the traces agentd records, one per agent invocation, and answers
// queries about them: which invocations ran (List) and what one of them did, span by span (Get).
//
// A store is an OpenTelemetry span exporter: register it with a TracerProvider (WithSyncer or
// WithBatcher) and every ended span lands in it. Two stores implement Store: Memory, a bounded
// ring for `lushctl run`, and SQLite, a file for `lushctl serve` (TRACE_BACKEND=sqlite). Handler
// serves either over HTTP as JSON.
//
// A trace's root is its invocation span ("invoke_agent <name>"), and its summary (agent,
// principal, model, status, tokens) is read from the root's lush.* attributes. Spans are exported
// when they end, so a running invocation's tool spans arrive before its root: until the root
// arrives, Get returns what there is and List leaves the trace out.
//
// Attributes are stored exactly as the spans carry them; the stores add nothing and redact
// nothing, so whatever a span records (a tool's input, say) is as sensitive here as it was there.
package tracestore

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ErrNotFound is wrapped by the error Get returns for a trace the store does not hold.
var ErrNotFound = errors.New("trace not found")

// List's limits on how many traces one call returns.
const (
	DefaultLimit = 50   // when Filter.Limit is zero or negative
	MaxLimit     = 1000 // larger Filter.Limits are lowered to this
)

// The lush.* attributes a trace's summary is read from (on its root span).
const (
	AttrAgent        = "lush.agent"
	AttrPrincipal    = "lush.principal"
	AttrModel        = "lush.model"
	AttrStatus       = "lush.status"
	AttrTokensInput  = "lush.tokens.input"
	AttrTokensOutput = "lush.tokens.output"
)

// Span statuses (OpenTelemetry's status codes).
const (
	StatusUnset = "unset"
	StatusOK    = "ok"
	StatusError = "error"
)

// Store holds spans exported to it and answers queries about their traces. Implementations are
// safe for concurrent use.
//
// Shutdown (called by the TracerProvider's own Shutdown) does not stop the store: it goes on
// accepting spans and answering queries, so that it can outlive the provider that fed it and be
// shared by the next one. Whoever created the store releases it (SQLite.Close).
type Store interface {
	sdktrace.SpanExporter
	// List returns the summaries of the traces that match f, newest (by root start) first. Their
	// Root is set; Spans is empty.
	List(ctx context.Context, f Filter) ([]Trace, error)
	// Get returns the trace with every span the store holds for it. A trace the store does not
	// hold is an error wrapping ErrNotFound.
	Get(ctx context.Context, traceID string) (*Trace, error)
}

// Filter selects the traces List returns. Zero fields select everything.
type Filter struct {
	Agent     string    // the root's lush.agent, exactly
	Principal string    // the root's lush.principal, exactly
	Limit     int       // at most this many traces: DefaultLimit if not positive, at most MaxLimit
	Since     time.Time // only traces whose root started at or after Since
}

// limit returns the number of traces to return for f.Limit.
func (f Filter) limit() int {
	switch {
	case f.Limit <= 0:
		return DefaultLimit
	case f.Limit > MaxLimit:
		return MaxLimit
	}
	return f.Limit
}

// match reports whether a trace with summary t passes f (apart from the limit).
func (f Filter) match(t *Trace) bool {
	return (f.Agent == "" || t.Agent == f.Agent) &&
		(f.Principal == "" || t.Principal == f.Principal) &&
		(f.Since.IsZero() || !t.Start.Before(f.Since))
}

// Span is one recorded span. Times are in UTC.
//
// Attribute values keep their OpenTelemetry types: string, int64, float64, bool, []string,
// []int64, []float64 and []bool. JSON has no NaN or infinity, so a non-finite float64 is kept as
// the string "NaN", "+Inf" or "-Inf" (and a []float64 holding one as a []string).
type Span struct {
	TraceID       string         `json:"trace_id"`
	SpanID        string         `json:"span_id"`
	ParentSpanID  string         `json:"parent_span_id,omitempty"`
	Name          string         `json:"name"`
	Kind          string         `json:"kind"` // internal, server, client, producer, consumer or unspecified
	Start         time.Time      `json:"start"`
	End           time.Time      `json:"end"`
	DurationMS    float64        `json:"duration_ms"`
	Status        string         `json:"status"` // StatusOK, StatusError or StatusUnset
	StatusMessage string         `json:"status_message,omitempty"`
	Attributes    map[string]any `json:"attributes,omitempty"`
	Events        []Event        `json:"events,omitempty"`
}

// Event is a timestamped annotation on a span (an exception, say).
type Event struct {
	Name       string         `json:"name"`
	Time       time.Time      `json:"time"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// Trace is one agent invocation: its summary, its root span and (from Get) all its spans.
type Trace struct {
	TraceID    string    `json:"trace_id"`
	Agent      string    `json:"agent,omitempty"`     // the root's lush.agent
	Principal  string    `json:"principal,omitempty"` // the root's lush.principal
	Model      string    `json:"model,omitempty"`     // the root's lush.model
	Status     string    `json:"status"`              // the root's lush.status, or else its span status
	Start      time.Time `json:"start"`               // the root's start
	DurationMS float64   `json:"duration_ms"`         // the root's duration
	Tokens     Tokens    `json:"tokens"`              // the root's lush.tokens.*
	SpanCount  int       `json:"span_count"`          // how many spans the store holds for the trace
	Root       *Span     `json:"root,omitempty"`
	Spans      []Span    `json:"spans,omitempty"` // sorted by start; empty in List's results
}

// Tokens counts the model tokens an invocation used.
type Tokens struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// record is a span as the stores keep it: the span and whether it may be its trace's root,
// that is whether it has no parent or a remote one (the invocation was called from elsewhere).
type record struct {
	Span
	root bool
}

// fromSDK converts an exported span.
func fromSDK(s sdktrace.ReadOnlySpan) record {
	sc, parent := s.SpanContext(), s.Parent()
	start, end := s.StartTime().UTC(), s.EndTime().UTC()
	r := record{
		Span: Span{
			TraceID:       sc.TraceID().String(),
			SpanID:        sc.SpanID().String(),
			Name:          s.Name(),
			Kind:          s.SpanKind().String(),
			Start:         start,
			End:           end,
			DurationMS:    durationMS(start, end),
			Status:        statusName(s.Status().Code),
			StatusMessage: s.Status().Description,
			Attributes:    attributeMap(s.Attributes()),
		},
		root: !parent.IsValid() || parent.IsRemote(),
	}
	if parent.IsValid() {
		r.ParentSpanID = parent.SpanID().String()
	}
	for _, e := range s.Events() {
		r.Events = append(r.Events, Event{Name: e.Name, Time: e.Time.UTC(), Attributes: attributeMap(e.Attributes)})
	}
	return r
}

func durationMS(start, end time.Time) float64 {
	return float64(end.Sub(start)) / float64(time.Millisecond)
}

func statusName(c codes.Code) string {
	switch c {
	case codes.Ok:
		return StatusOK
	case codes.Error:
		return StatusError
	}
	return StatusUnset
}

// attributeMap converts attributes to typed Go values; it returns nil for none.
func attributeMap(kvs []attribute.KeyValue) map[string]any {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		if v := attributeValue(kv.Value); v != nil {
			m[string(kv.Key)] = v
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// attributeValue returns v as a Go value that JSON can represent (see Span), or nil if v is
// invalid.
func attributeValue(v attribute.Value) any {
	switch v.Type() {
	case attribute.BOOL:
		return v.AsBool()
	case attribute.INT64:
		return v.AsInt64()
	case attribute.FLOAT64:
		if f := v.AsFloat64(); !finite(f) {
			return formatFloat(f)
		}
		return v.AsFloat64()
	case attribute.STRING:
		return v.AsString()
	case attribute.BOOLSLICE:
		return v.AsBoolSlice()
	case attribute.INT64SLICE:
		return v.AsInt64Slice()
	case attribute.FLOAT64SLICE:
		fs := v.AsFloat64Slice()
		if !slices.ContainsFunc(fs, func(f float64) bool { return !finite(f) }) {
			return fs
		}
		ss := make([]string, len(fs))
		for i, f := range fs {
			ss[i] = formatFloat(f)
		}
		return ss
	case attribute.STRINGSLICE:
		return v.AsStringSlice()
	}
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// clone returns a deep copy of s, so that a caller may modify what a store returns.
func (s Span) clone() Span {
	s.Attributes = cloneAttributes(s.Attributes)
	if s.Events != nil {
		events := make([]Event, len(s.Events))
		for i, e := range s.Events {
			e.Attributes = cloneAttributes(e.Attributes)
			events[i] = e
		}
		s.Events = events
	}
	return s
}

func cloneAttributes(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	c := make(map[string]any, len(m))
	for k, v := range m {
		switch v := v.(type) {
		case []string:
			c[k] = slices.Clone(v)
		case []int64:
			c[k] = slices.Clone(v)
		case []float64:
			c[k] = slices.Clone(v)
		case []bool:
			c[k] = slices.Clone(v)
		default:
			c[k] = v
		}
	}
	return c
}

// spanOrder orders spans by start, then by span id (for spans that started together).
func spanOrder(a, b *Span) int {
	if c := a.Start.Compare(b.Start); c != 0 {
		return c
	}
	return strings.Compare(a.SpanID, b.SpanID)
}

// traceOrder orders trace summaries newest first: by start descending, then by trace id
// descending.
func traceOrder(a, b Trace) int {
	if c := b.Start.Compare(a.Start); c != 0 {
		return c
	}
	return strings.Compare(b.TraceID, a.TraceID)
}

// rootIndex returns the index in rs (one trace's spans) of the trace's root: the earliest span
// without a local parent; else, while the root has not arrived, the earliest span whose parent
// the store does not hold; else the earliest span. It returns -1 only for no spans.
func rootIndex(rs []record) int {
	best, bestRank := -1, 0
	var present map[string]bool
	for i := range rs {
		rank := 1 // the worst: some span's child
		if rs[i].root {
			rank = 3
		} else {
			if present == nil {
				present = make(map[string]bool, len(rs))
				for _, r := range rs {
					present[r.SpanID] = true
				}
			}
			if !present[rs[i].ParentSpanID] {
				rank = 2
			}
		}
		if best < 0 || rank > bestRank || rank == bestRank && spanOrder(&rs[i].Span, &rs[best].Span) < 0 {
			best, bestRank = i, rank
		}
	}
	return best
}

// summarize returns the summary of the trace whose root is root and of which the store holds
// count spans. The summary's Root is a copy of root.
func summarize(root *Span, count int) Trace {
	status := stringAttr(root.Attributes, AttrStatus)
	if status == "" {
		status = root.Status
	}
	r := root.clone()
	return Trace{
		TraceID:    root.TraceID,
		Agent:      stringAttr(root.Attributes, AttrAgent),
		Principal:  stringAttr(root.Attributes, AttrPrincipal),
		Model:      stringAttr(root.Attributes, AttrModel),
		Status:     status,
		Start:      root.Start,
		DurationMS: root.DurationMS,
		Tokens:     Tokens{Input: intAttr(root.Attributes, AttrTokensInput), Output: intAttr(root.Attributes, AttrTokensOutput)},
		SpanCount:  count,
		Root:       &r,
	}
}

// assemble returns the whole trace made of rs (one trace's spans, at least one): spans sorted by
// start, the root chosen by rootIndex. Of two spans with the same id, the later in rs is kept.
func assemble(rs []record) *Trace {
	byID := make(map[string]int, len(rs))
	unique := make([]record, 0, len(rs))
	for _, r := range rs {
		if i, ok := byID[r.SpanID]; ok {
			unique[i] = r
			continue
		}
		byID[r.SpanID] = len(unique)
		unique = append(unique, r)
	}
	root := unique[rootIndex(unique)].Span
	t := summarize(&root, len(unique))
	t.Spans = make([]Span, len(unique))
	for i, r := range unique {
		t.Spans[i] = r.clone()
	}
	slices.SortFunc(t.Spans, func(a, b Span) int { return spanOrder(&a, &b) })
	return &t
}

func stringAttr(attrs map[string]any, key string) string {
	s, _ := attrs[key].(string)
	return s
}

func intAttr(attrs map[string]any, key string) int64 {
	switch v := attrs[key].(type) {
	case int64:
		return v
	case float64:
		return int64(v)
	}
	return 0
}
