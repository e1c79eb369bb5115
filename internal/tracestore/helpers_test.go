package tracestore

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is when the tests' first invocation starts.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// implementations are the stores every shared test runs against.
var implementations = []struct {
	name string
	open func(t *testing.T) Store
}{
	{"memory", func(*testing.T) Store { return NewMemory(0) }},
	{"sqlite", func(t *testing.T) Store { return openSQLite(t, filepath.Join(t.TempDir(), "traces.db")) }},
}

// openSQLite opens a SQLite store that the test closes when it ends.
func openSQLite(t *testing.T, path string) *SQLite {
	t.Helper()
	s, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// newTracer returns a tracer whose spans are exported, as each ends, to every store.
func newTracer(t *testing.T, stores ...sdktrace.SpanExporter) trace.Tracer {
	t.Helper()
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.AlwaysSample())}
	for _, s := range stores {
		opts = append(opts, sdktrace.WithSyncer(s))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	t.Cleanup(func() {
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return tp.Tracer("github.com/lush-agents/lush/internal/tracestore")
}

// invocation describes an agent invocation for invoke.
type invocation struct {
	agent, principal string
	start            time.Time
	status           string // lush.status
	// tools adds what agentd records for a run that calls tools: a tool call (fs.read_file), and a
	// lush:// call to the summarizer agent with its invocation nested under it.
	tools bool
}

// Offsets and lengths of the spans invoke creates, from the invocation's start.
const (
	rootDuration   = 2 * time.Second
	readStart      = 100 * time.Millisecond
	readEnd        = 300 * time.Millisecond
	callStart      = 400 * time.Millisecond
	nestedStart    = 500 * time.Millisecond
	exceptionAt    = 900 * time.Millisecond
	nestedEnd      = 1400 * time.Millisecond
	callEnd        = 1500 * time.Millisecond
	rootTokensIn   = 812
	rootTokensOut  = 240
	nestedTokensIn = 100
)

// invoke records inv the way agentd does and returns its trace id.
func invoke(tr trace.Tracer, inv invocation) string {
	at := func(d time.Duration) trace.SpanStartEventOption { return trace.WithTimestamp(inv.start.Add(d)) }
	ctx, root := tr.Start(context.Background(), "invoke_agent "+inv.agent, at(0), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String(AttrAgent, inv.agent), attribute.String(AttrPrincipal, inv.principal),
			attribute.String(AttrModel, "claude-sonnet-4")))
	if inv.tools {
		_, read := tr.Start(ctx, "tool fs.read_file", at(readStart), trace.WithAttributes(
			attribute.String("lush.tool", "fs.read_file"), attribute.String("lush.access", "read"),
			attribute.Float64("lush.latency_ms", 200.5), attribute.String("lush.status", "ok"),
			attribute.String("lush.decision_id", "019a0000-0000-7000-8000-000000000001"),
			attribute.StringSlice("lush.paths", []string{"q3.md", "q4.md"}), attribute.Bool("lush.stubbed", false),
			attribute.Float64("lush.score", math.Inf(1)), attribute.Float64Slice("lush.weights", []float64{0.5, math.NaN()}),
			attribute.Int64Slice("lush.sizes", []int64{120, 4096}), attribute.Float64Slice("lush.ratios", []float64{0.25, 1}),
			attribute.BoolSlice("lush.cached", []bool{true, false})))
		read.End(trace.WithTimestamp(inv.start.Add(readEnd)))

		callCtx, call := tr.Start(ctx, "tool lush://summarizer", at(callStart), trace.WithAttributes(
			attribute.String("lush.tool", "lush://summarizer"), attribute.String("lush.access", "invoke"),
			attribute.String("lush.decision_id", "019a0000-0000-7000-8000-000000000002")))
		_, nested := tr.Start(callCtx, "invoke_agent summarizer", at(nestedStart), trace.WithAttributes(
			attribute.String(AttrAgent, "summarizer"), attribute.String(AttrPrincipal, inv.principal),
			attribute.Int64(AttrTokensInput, nestedTokensIn), attribute.Int64(AttrTokensOutput, 0)))
		nested.AddEvent("exception", trace.WithTimestamp(inv.start.Add(exceptionAt)),
			trace.WithAttributes(attribute.String("exception.message", "model timeout")))
		nested.SetStatus(codes.Error, "model timeout")
		nested.SetAttributes(attribute.String(AttrStatus, "error"))
		nested.End(trace.WithTimestamp(inv.start.Add(nestedEnd)))
		call.SetAttributes(attribute.Float64("lush.latency_ms", 1100), attribute.String("lush.status", "error"))
		call.End(trace.WithTimestamp(inv.start.Add(callEnd)))
	}
	root.SetAttributes(attribute.Int64(AttrTokensInput, rootTokensIn), attribute.Int64(AttrTokensOutput, rootTokensOut),
		attribute.String(AttrStatus, inv.status))
	root.SetStatus(codes.Ok, "")
	root.End(trace.WithTimestamp(inv.start.Add(rootDuration)))
	return root.SpanContext().TraceID().String()
}

// recordRunning records an invocation that is still running: its tool call has ended (and been
// exported), its root has not. It returns the trace id.
func recordRunning(tr trace.Tracer, agent string, start time.Time) string {
	ctx, root := tr.Start(context.Background(), "invoke_agent "+agent, trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String(AttrAgent, agent)))
	_, tool := tr.Start(ctx, "tool fs.read_file", trace.WithTimestamp(start.Add(readStart)),
		trace.WithAttributes(attribute.String(AttrAgent, agent)))
	tool.End(trace.WithTimestamp(start.Add(readEnd)))
	return root.SpanContext().TraceID().String()
}

// fixture is what recordFixture records.
type fixture struct {
	full    string // triage for alice at t0, with tool calls and a nested invocation
	bob     string // triage for bob at t0+1m
	report  string // reporter for alice at t0+2m, denied
	running string // triage, started at t0+3m, still running
}

// recordFixture records the shared tests' traces into stores.
func recordFixture(t *testing.T, stores ...sdktrace.SpanExporter) fixture {
	t.Helper()
	tr := newTracer(t, stores...)
	return fixture{
		full:    invoke(tr, invocation{agent: "triage", principal: "alice", start: t0, status: "ok", tools: true}),
		bob:     invoke(tr, invocation{agent: "triage", principal: "bob", start: t0.Add(time.Minute), status: "ok"}),
		report:  invoke(tr, invocation{agent: "reporter", principal: "alice", start: t0.Add(2 * time.Minute), status: "denied"}),
		running: recordRunning(tr, "triage", t0.Add(3*time.Minute)),
	}
}

// traceIDs returns the ids of traces, in order.
func traceIDs(traces []Trace) []string {
	ids := make([]string, len(traces))
	for i, t := range traces {
		ids[i] = t.TraceID
	}
	return ids
}

// spanNamed returns the span of t called name, failing the test if there is none.
func spanNamed(t *testing.T, tr *Trace, name string) *Span {
	t.Helper()
	for i := range tr.Spans {
		if tr.Spans[i].Name == name {
			return &tr.Spans[i]
		}
	}
	t.Fatalf("trace %s has no span %q", tr.TraceID, name)
	return nil
}
