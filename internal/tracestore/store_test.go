package tracestore

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestList(t *testing.T) {
	ctx := context.Background()
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			store := impl.open(t)
			fx := recordFixture(t, store)
			tests := []struct {
				name   string
				filter Filter
				want   []string
			}{
				{"everything, newest first, without the running trace", Filter{}, []string{fx.report, fx.bob, fx.full}},
				{"by agent", Filter{Agent: "triage"}, []string{fx.bob, fx.full}},
				{"by a nested invocation's agent", Filter{Agent: "summarizer"}, nil},
				{"by principal", Filter{Principal: "alice"}, []string{fx.report, fx.full}},
				{"by agent and principal", Filter{Agent: "triage", Principal: "bob"}, []string{fx.bob}},
				{"since a root's start", Filter{Since: t0.Add(time.Minute)}, []string{fx.report, fx.bob}},
				{"since after everything", Filter{Since: t0.Add(time.Hour)}, nil},
				{"limit", Filter{Limit: 2}, []string{fx.report, fx.bob}},
				{"limit above the maximum", Filter{Limit: MaxLimit + 1}, []string{fx.report, fx.bob, fx.full}},
				{"no match", Filter{Agent: "nobody"}, nil},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					got, err := store.List(ctx, tt.filter)
					if err != nil {
						t.Fatal(err)
					}
					if ids := traceIDs(got); !slices.Equal(ids, tt.want) {
						t.Errorf("List(%+v) = %v, want %v", tt.filter, ids, tt.want)
					}
					for _, tr := range got {
						if len(tr.Spans) != 0 {
							t.Errorf("List returned trace %s with %d spans, want a summary", tr.TraceID, len(tr.Spans))
						}
					}
				})
			}

			t.Run("summary", func(t *testing.T) {
				got, err := store.List(ctx, Filter{Agent: "triage", Principal: "alice"})
				if err != nil || len(got) != 1 {
					t.Fatalf("List = %v, %v; want one trace", traceIDs(got), err)
				}
				s := got[0]
				s.Root = nil
				want := Trace{TraceID: fx.full, Agent: "triage", Principal: "alice", Model: "claude-sonnet-4", Status: "ok",
					Start: t0, DurationMS: 2000, Tokens: Tokens{Input: rootTokensIn, Output: rootTokensOut}, SpanCount: 4}
				if !reflect.DeepEqual(s, want) {
					t.Errorf("summary:\n got %+v\nwant %+v", s, want)
				}
				if got[0].Root == nil || got[0].Root.Name != "invoke_agent triage" {
					t.Errorf("summary's root = %+v, want the invoke_agent triage span", got[0].Root)
				}
			})
		})
	}
}

func TestGet(t *testing.T) {
	ctx := context.Background()
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			store := impl.open(t)
			fx := recordFixture(t, store)

			t.Run("tree", func(t *testing.T) {
				tr, err := store.Get(ctx, fx.full)
				if err != nil {
					t.Fatal(err)
				}
				type shape struct{ name, parent, status string }
				var got []shape
				names := map[string]string{}
				for _, s := range tr.Spans {
					names[s.SpanID] = s.Name
				}
				for _, s := range tr.Spans {
					if s.TraceID != fx.full {
						t.Errorf("span %s has trace id %s, want %s", s.Name, s.TraceID, fx.full)
					}
					got = append(got, shape{s.Name, names[s.ParentSpanID], s.Status})
				}
				want := []shape{ // sorted by start
					{"invoke_agent triage", "", StatusOK},
					{"tool fs.read_file", "invoke_agent triage", StatusUnset},
					{"tool lush://summarizer", "invoke_agent triage", StatusUnset},
					{"invoke_agent summarizer", "tool lush://summarizer", StatusError},
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("spans:\n got %v\nwant %v", got, want)
				}
				if tr.Root == nil || tr.Root.Name != "invoke_agent triage" || tr.Agent != "triage" || tr.SpanCount != 4 {
					t.Errorf("root %+v, agent %q, span count %d; want invoke_agent triage, triage, 4", tr.Root, tr.Agent, tr.SpanCount)
				}
				if tr.Root.Kind != "server" || tr.Spans[1].Kind != "internal" {
					t.Errorf("kinds %q and %q, want server and internal", tr.Root.Kind, tr.Spans[1].Kind)
				}
			})

			attrs := []struct {
				span, key string
				want      any
			}{
				{"invoke_agent triage", AttrTokensInput, int64(rootTokensIn)},
				{"invoke_agent triage", AttrModel, "claude-sonnet-4"},
				{"tool fs.read_file", "lush.latency_ms", 200.5},
				{"tool fs.read_file", "lush.paths", []string{"q3.md", "q4.md"}},
				{"tool fs.read_file", "lush.stubbed", false},
				{"tool fs.read_file", "lush.score", "+Inf"},
				{"tool fs.read_file", "lush.weights", []string{"0.5", "NaN"}},
				{"tool fs.read_file", "lush.sizes", []int64{120, 4096}},
				{"tool fs.read_file", "lush.ratios", []float64{0.25, 1}},
				{"tool fs.read_file", "lush.cached", []bool{true, false}},
				{"tool lush://summarizer", "lush.latency_ms", float64(1100)}, // a whole float64 stays a float64
				{"tool lush://summarizer", "lush.decision_id", "019a0000-0000-7000-8000-000000000002"},
				{"invoke_agent summarizer", AttrTokensInput, int64(nestedTokensIn)},
			}
			for _, tt := range attrs {
				t.Run("attribute "+tt.key+" of "+tt.span, func(t *testing.T) {
					tr, err := store.Get(ctx, fx.full)
					if err != nil {
						t.Fatal(err)
					}
					if got := spanNamed(t, tr, tt.span).Attributes[tt.key]; !reflect.DeepEqual(got, tt.want) {
						t.Errorf("%s = %#v, want %#v", tt.key, got, tt.want)
					}
				})
			}

			t.Run("status, events and times", func(t *testing.T) {
				tr, err := store.Get(ctx, fx.full)
				if err != nil {
					t.Fatal(err)
				}
				nested := spanNamed(t, tr, "invoke_agent summarizer")
				wantEvents := []Event{{Name: "exception", Time: t0.Add(exceptionAt),
					Attributes: map[string]any{"exception.message": "model timeout"}}}
				if nested.StatusMessage != "model timeout" || !reflect.DeepEqual(nested.Events, wantEvents) {
					t.Errorf("nested invocation: status message %q, events %+v", nested.StatusMessage, nested.Events)
				}
				if !nested.Start.Equal(t0.Add(nestedStart)) || !nested.End.Equal(t0.Add(nestedEnd)) || nested.DurationMS != 900 {
					t.Errorf("nested invocation: %s to %s (%vms)", nested.Start, nested.End, nested.DurationMS)
				}
				if nested.Start.Location() != time.UTC {
					t.Errorf("start is in %s, want UTC", nested.Start.Location())
				}
				if _, err := json.Marshal(tr); err != nil {
					t.Errorf("trace does not encode as JSON: %v", err)
				}
			})

			t.Run("running trace", func(t *testing.T) {
				tr, err := store.Get(ctx, fx.running)
				if err != nil {
					t.Fatal(err)
				}
				// Its root has not arrived: the earliest span without a parent in the store stands in.
				if len(tr.Spans) != 1 || tr.Root == nil || tr.Root.Name != "tool fs.read_file" || tr.Agent != "triage" {
					t.Errorf("got %d spans, root %+v, agent %q", len(tr.Spans), tr.Root, tr.Agent)
				}
			})

			t.Run("copies", func(t *testing.T) {
				tr, err := store.Get(ctx, fx.full)
				if err != nil {
					t.Fatal(err)
				}
				tr.Root.Attributes[AttrAgent] = "changed"
				spanNamed(t, tr, "tool fs.read_file").Attributes["lush.paths"].([]string)[0] = "changed"
				again, err := store.Get(ctx, fx.full)
				if err != nil {
					t.Fatal(err)
				}
				if again.Root.Attributes[AttrAgent] != "triage" || spanNamed(t, again, "tool fs.read_file").Attributes["lush.paths"].([]string)[0] != "q3.md" {
					t.Error("changing a returned trace changed the store")
				}
			})

			for _, id := range []string{"0123456789abcdef0123456789abcdef", "", "not-a-trace-id"} {
				t.Run("unknown "+id, func(t *testing.T) {
					if tr, err := store.Get(ctx, id); !errors.Is(err, ErrNotFound) {
						t.Errorf("Get(%q) = %v, %v; want ErrNotFound", id, tr, err)
					}
				})
			}
		})
	}
}

// TestStoresAgree checks that the two stores return the same traces for the same spans: what
// SQLite writes down, it reads back with the same types.
func TestStoresAgree(t *testing.T) {
	ctx := context.Background()
	mem := NewMemory(0)
	db := openSQLite(t, filepath.Join(t.TempDir(), "traces.db"))
	fx := recordFixture(t, mem, db)
	for _, id := range []string{fx.full, fx.bob, fx.report, fx.running} {
		fromMem, err := mem.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		fromDB, err := db.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fromMem, fromDB) {
			m, _ := json.Marshal(fromMem)
			d, _ := json.Marshal(fromDB)
			t.Errorf("trace %s:\nmemory %s\nsqlite %s", id, m, d)
		}
	}
	fromMem, err := mem.List(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	fromDB, err := db.List(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromMem, fromDB) {
		t.Errorf("List:\nmemory %+v\nsqlite %+v", fromMem, fromDB)
	}
}

func TestCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			store := impl.open(t)
			if _, err := store.List(ctx, Filter{}); !errors.Is(err, context.Canceled) {
				t.Errorf("List = %v, want context.Canceled", err)
			}
			if _, err := store.Get(ctx, "0123456789abcdef0123456789abcdef"); !errors.Is(err, context.Canceled) {
				t.Errorf("Get = %v, want context.Canceled", err)
			}
			stub := tracetest.SpanStub{Name: "span", StartTime: t0, EndTime: t0.Add(time.Second),
				SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})}
			if err := store.ExportSpans(ctx, tracetest.SpanStubs{stub}.Snapshots()); !errors.Is(err, context.Canceled) {
				t.Errorf("ExportSpans = %v, want context.Canceled", err)
			}
		})
	}
}
