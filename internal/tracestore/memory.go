package tracestore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// DefaultMaxSpans is how many spans a Memory store holds when NewMemory is given no positive
// bound.
const DefaultMaxSpans = 10_000

// Memory is a Store that keeps the most recent spans in memory, for `lushctl run`. It holds at
// most a fixed number of spans: once full, each new span evicts the oldest one, so an old trace
// loses its spans one by one (Get then returns what is left; List omits it once its root is
// gone). It is safe for concurrent use.
type Memory struct {
	max int

	mu     sync.RWMutex
	ring   []record            // grows to max, then slot seq%max holds span number seq
	next   uint64              // the number of the next span
	traces map[string][]uint64 // trace id → the numbers of its spans held, oldest first
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store holding at most maxSpans spans (DefaultMaxSpans if maxSpans
// is not positive).
func NewMemory(maxSpans int) *Memory {
	if maxSpans <= 0 {
		maxSpans = DefaultMaxSpans
	}
	return &Memory{max: maxSpans, traces: make(map[string][]uint64)}
}

// ExportSpans stores spans, evicting the oldest spans held beyond the store's bound.
func (m *Memory) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("export %d spans: %w", len(spans), err)
	}
	rs := make([]record, len(spans))
	for i, s := range spans {
		rs[i] = fromSDK(s)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rs {
		m.add(r)
	}
	return nil
}

// add stores r, evicting the oldest span if the ring is full. m.mu must be held for writing.
func (m *Memory) add(r record) {
	seq := m.next
	m.next++
	if len(m.ring) < m.max {
		m.ring = append(m.ring, r)
	} else {
		slot := m.slot(seq)
		// Spans are evicted in the order they were added, so the evicted span is the oldest its
		// trace has left.
		evicted := m.ring[slot].TraceID
		if rest := m.traces[evicted][1:]; len(rest) > 0 {
			m.traces[evicted] = rest
		} else {
			delete(m.traces, evicted)
		}
		m.ring[slot] = r
	}
	m.traces[r.TraceID] = append(m.traces[r.TraceID], seq)
}

// slot returns the index in m.ring of span number seq.
func (m *Memory) slot(seq uint64) int { return int(seq % uint64(m.max)) }

// Shutdown does nothing: the store goes on accepting spans and answering queries (see Store).
func (m *Memory) Shutdown(context.Context) error { return nil }

// List returns the summaries of the traces that match f, newest first (see Store).
func (m *Memory) List(ctx context.Context, f Filter) ([]Trace, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list traces: %w", err)
	}
	var out []Trace
	m.mu.RLock()
	for _, seqs := range m.traces {
		var root *record
		ids := make(map[string]struct{}, len(seqs))
		for _, seq := range seqs {
			r := &m.ring[m.slot(seq)]
			ids[r.SpanID] = struct{}{}
			if r.root && (root == nil || spanOrder(&r.Span, &root.Span) < 0) {
				root = r
			}
		}
		if root == nil {
			continue // still running, or its root was evicted
		}
		if t := summarize(&root.Span, len(ids)); f.match(&t) {
			out = append(out, t)
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(out, traceOrder)
	if n := f.limit(); len(out) > n {
		out = slices.Clip(out[:n])
	}
	return out, nil
}

// Get returns the trace with every span the store holds for it (see Store).
func (m *Memory) Get(ctx context.Context, traceID string) (*Trace, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get trace %s: %w", traceID, err)
	}
	m.mu.RLock()
	seqs := m.traces[traceID]
	rs := make([]record, len(seqs))
	for i, seq := range seqs {
		// Copying a record shares its maps and slices, which are never modified once stored;
		// assemble copies them for the caller.
		rs[i] = m.ring[m.slot(seq)]
	}
	m.mu.RUnlock()
	if len(rs) == 0 {
		return nil, fmt.Errorf("get trace %s: %w", traceID, ErrNotFound)
	}
	return assemble(rs), nil
}
