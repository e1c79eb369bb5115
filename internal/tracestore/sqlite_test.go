package tracestore

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestSQLiteReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state", "traces", "traces.db") // parents do not exist yet
	s, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	fx := recordFixture(t, s)
	before, err := s.Get(ctx, fx.full)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.List(ctx, Filter{}); err == nil {
		t.Error("List after Close succeeded")
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("database file: %v, %v; want mode 0600", info, err)
	}

	s = openSQLite(t, path)
	after, err := s.Get(ctx, fx.full)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Errorf("trace changed across reopening:\nbefore %+v\n after %+v", before, after)
	}
	list, err := s.List(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if ids, want := traceIDs(list), []string{fx.report, fx.bob, fx.full}; !slices.Equal(ids, want) {
		t.Errorf("List after reopening = %v, want %v", ids, want)
	}
}

func TestSQLiteRetain(t *testing.T) {
	ctx := context.Background()
	day := 24 * time.Hour
	cutoff := t0.Add(-7 * day)
	tests := []struct {
		name string
		inv  func(tr trace.Tracer) string
		kept bool
	}{
		{"ended before the cutoff", func(tr trace.Tracer) string {
			return invoke(tr, invocation{agent: "old", start: cutoff.Add(-day), status: "ok", tools: true})
		}, false},
		{"ended just before the cutoff", func(tr trace.Tracer) string {
			return invoke(tr, invocation{agent: "old", start: cutoff.Add(-rootDuration - time.Nanosecond), status: "ok"})
		}, false},
		{"ends at the cutoff", func(tr trace.Tracer) string {
			return invoke(tr, invocation{agent: "edge", start: cutoff.Add(-rootDuration), status: "ok"})
		}, true},
		{"started before the cutoff and ended after it", func(tr trace.Tracer) string {
			// Its tool spans ended before the cutoff; the trace is kept whole.
			return invoke(tr, invocation{agent: "long", start: cutoff.Add(-time.Second), status: "ok", tools: true})
		}, true},
		{"recent", func(tr trace.Tracer) string {
			return invoke(tr, invocation{agent: "new", start: t0, status: "ok", tools: true})
		}, true},
		{"old remains without a root", func(tr trace.Tracer) string { return recordRunning(tr, "crashed", cutoff.Add(-day)) }, false},
	}
	s := openSQLite(t, filepath.Join(t.TempDir(), "traces.db"))
	tr := newTracer(t, s)
	ids := make([]string, len(tests))
	counts := make([]int, len(tests))
	for i, tt := range tests {
		ids[i] = tt.inv(tr)
		got, err := s.Get(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		counts[i] = len(got.Spans)
	}
	if err := s.Retain(ctx, cutoff); err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Get(ctx, ids[i])
			switch {
			case !tt.kept:
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("Get = %v, %v; want ErrNotFound", got, err)
				}
			case err != nil:
				t.Fatal(err)
			case len(got.Spans) != counts[i]:
				t.Errorf("%d spans left of %d", len(got.Spans), counts[i])
			}
		})
	}
}

func TestSQLiteExportIsOneTransaction(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t, filepath.Join(t.TempDir(), "traces.db"))
	stubs := make(tracetest.SpanStubs, 3)
	for i := range stubs {
		stubs[i] = tracetest.SpanStub{
			Name:        "span",
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{byte(i + 1)}}),
			StartTime:   t0, EndTime: t0.Add(time.Second),
		}
	}
	// A trigger fails the last insert: none of the batch may be stored.
	raw, err := sql.Open("sqlite", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.ExecContext(ctx, `CREATE TRIGGER fail_third BEFORE INSERT ON spans WHEN NEW.span_id = '0300000000000000'
		BEGIN SELECT RAISE(ABORT, 'refused'); END`); err != nil {
		t.Fatal(err)
	}
	err = s.ExportSpans(ctx, stubs.Snapshots())
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("ExportSpans = %v, want the trigger's error", err)
	}
	if tr, err := s.Get(ctx, trace.TraceID{1}.String()); !errors.Is(err, ErrNotFound) {
		t.Errorf("after a failed export, Get = %+v, %v; want ErrNotFound", tr, err)
	}

	if _, err := raw.ExecContext(ctx, `DROP TRIGGER fail_third`); err != nil {
		t.Fatal(err)
	}
	if err := s.ExportSpans(ctx, stubs.Snapshots()); err != nil {
		t.Fatal(err)
	}
	// Exporting the same spans again replaces them.
	if err := s.ExportSpans(ctx, stubs.Snapshots()); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, trace.TraceID{1}.String())
	if err != nil || len(got.Spans) != 3 {
		t.Fatalf("Get = %+v, %v; want 3 spans", got, err)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.ExportSpans(canceled, stubs.Snapshots()); !errors.Is(err, context.Canceled) {
		t.Errorf("ExportSpans with a canceled context = %v, want context.Canceled", err)
	}
}

func TestSQLiteShutdownKeepsStoreOpen(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t, filepath.Join(t.TempDir(), "traces.db"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(s))
	id := invoke(tp.Tracer("test"), invocation{agent: "triage", start: t0, status: "ok"})
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, id); err != nil {
		t.Errorf("Get after the provider's Shutdown: %v", err)
	}
	// The next provider can use the same store.
	tr := newTracer(t, s)
	if _, err := s.Get(ctx, invoke(tr, invocation{agent: "triage", start: t0, status: "ok"})); err != nil {
		t.Errorf("Get of a span exported after Shutdown: %v", err)
	}
}

func TestOpenSQLiteErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	newer := filepath.Join(dir, "newer.db")
	raw, err := sql.Open("sqlite", newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, "PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, path, want string }{
		{"empty path", "", "path is empty"},
		{"newer schema", newer, "newer than this program supports"},
		{"parent is a file", filepath.Join(notDir, "traces.db"), "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := OpenSQLite(ctx, tt.path)
			if err == nil {
				s.Close()
				t.Fatal("OpenSQLite succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("OpenSQLite = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
