package tracestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestNewMemoryBound(t *testing.T) {
	for _, tt := range []struct{ in, want int }{{0, DefaultMaxSpans}, {-1, DefaultMaxSpans}, {1, 1}, {250, 250}} {
		if got := NewMemory(tt.in).max; got != tt.want {
			t.Errorf("NewMemory(%d) holds %d spans, want %d", tt.in, got, tt.want)
		}
	}
}

func TestMemoryEviction(t *testing.T) {
	ctx := context.Background()
	// Room for one full invocation (4 spans) and nothing more. Spans arrive as they end: the
	// read tool, the nested invocation, the lush:// call, then the root.
	m := NewMemory(4)
	tr := newTracer(t, m)
	first := invoke(tr, invocation{agent: "triage", principal: "alice", start: t0, status: "ok", tools: true})

	steps := []struct {
		name      string
		agent     string // the invocation (one span) recorded in this step
		wantSpans int    // how many spans of first are left
		wantList  []string
	}{
		{"full", "", 4, []string{"triage"}},
		{"evicts the read tool", "a", 3, []string{"a", "triage"}},
		{"evicts the nested invocation", "b", 2, []string{"b", "a", "triage"}},
		{"evicts the lush:// call", "c", 1, []string{"c", "b", "a", "triage"}},
		{"evicts the root", "d", 0, []string{"d", "c", "b", "a"}},
	}
	for i, step := range steps {
		if step.agent != "" {
			invoke(tr, invocation{agent: step.agent, principal: "alice", start: t0.Add(time.Duration(i) * time.Minute), status: "ok"})
		}
		got, err := m.Get(ctx, first)
		switch {
		case step.wantSpans == 0:
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: Get = %v, want ErrNotFound", step.name, err)
			}
		case err != nil:
			t.Fatalf("%s: %v", step.name, err)
		case len(got.Spans) != step.wantSpans || got.SpanCount != step.wantSpans:
			t.Errorf("%s: %d spans (count %d), want %d", step.name, len(got.Spans), got.SpanCount, step.wantSpans)
		}
		list, err := m.List(ctx, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		var agents []string
		for _, tr := range list {
			agents = append(agents, tr.Agent)
		}
		if !slices.Equal(agents, step.wantList) {
			t.Errorf("%s: List = %v, want %v", step.name, agents, step.wantList)
		}
	}
	if n := len(m.traces); n != 4 {
		t.Errorf("the index holds %d traces, want 4", n)
	}
}

func TestMemoryConcurrent(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(100)
	tr := newTracer(t, m)
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				invoke(tr, invocation{agent: fmt.Sprint("agent-", w), principal: "alice",
					start: t0.Add(time.Duration(i) * time.Second), status: "ok", tools: i%2 == 0})
			}
		})
		wg.Go(func() {
			for range each {
				if _, err := m.List(ctx, Filter{Agent: fmt.Sprint("agent-", w)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := len(m.ring); got != 100 {
		t.Errorf("the ring holds %d spans, want 100", got)
	}
	held := 0
	for _, seqs := range m.traces {
		held += len(seqs)
	}
	if held != 100 {
		t.Errorf("the index holds %d spans, want 100", held)
	}
}
