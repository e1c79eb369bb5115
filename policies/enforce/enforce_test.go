package enforce_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/test/projecttest"
)

const fs = "mcp://npx/@modelcontextprotocol/server-filesystem"

// engine builds a copy of the quickstart with a mask policy.
func engine(t testing.TB) *authz.Engine { return engineWith(t, "") }

// engineWith builds a copy of the quickstart with a mask policy and extra appended to its
// lush.yaml.
func engineWith(t testing.TB, extra string) *authz.Engine {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../../examples/quickstart")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, ".lush"))
	if extra != "" {
		f, err := os.OpenFile(filepath.Join(dir, "lush.yaml"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("\n" + extra); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	mask := "package lush.policies.logmask\n\nmask contains \"/input/arguments/content\"\n"
	if err := os.WriteFile(filepath.Join(dir, "policies", "logmask.rego"), []byte(mask), 0o644); err != nil {
		t.Fatal(err)
	}
	_, eng := projecttest.Build(t, dir)
	return eng
}

func TestDecideMasksAndRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db")
	log, err := decisionlog.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	e := enforce.NewPolicy(enforce.Config{Environment: "ci", Instance: "i1", Log: log}).Enforcer("test")

	// No policy yet: denied, and recorded.
	in := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "serviceaccount:digest-bot", Groups: []string{}}, Agent: "orchestrator",
		Tool: &authz.Tool{Ref: fs, Name: "write_file"}, Arguments: map[string]any{"path": "drafts/a.md", "content": "s3cr3t-payload"}}
	if v := e.Decide(context.Background(), in); v.Allow || v.Rules[0] != enforce.RuleNoPolicy || !v.Recorded {
		t.Fatalf("without a policy: %+v", v)
	}

	e.Policy().Set(engine(t))
	v := e.Decide(context.Background(), in)
	if v.Outcome != authz.OutcomeStub || !v.Recorded || v.ID == "" {
		t.Fatalf("verdict = %+v", v)
	}
	if err := v.Complete(decisionlog.StatusStubbed, 0, nil, ""); err != nil {
		t.Fatal(err)
	}
	log.Close()
	// The masked argument never reaches the database files; the rest of the input does.
	for _, f := range []string{path, path + "-wal"} {
		data, _ := os.ReadFile(f)
		if bytes.Contains(data, []byte("s3cr3t-payload")) {
			t.Errorf("%s holds the masked argument", filepath.Base(f))
		}
	}
	r, err := decisionlog.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Query(context.Background(), decisionlog.Filter{DecisionID: v.ID})
	if err != nil || len(recs) != 1 {
		t.Fatalf("query: %v %v", recs, err)
	}
	ev := recs[0].Event
	if !strings.Contains(string(ev.Input), `"drafts/a.md"`) || strings.Contains(string(ev.Input), "content") ||
		len(ev.Erased) != 1 || ev.Erased[0] != "/input/arguments/content" || ev.Environment != "ci" || ev.Labels["id"] != "i1" {
		t.Errorf("event = %+v (input %s)", ev, ev.Input)
	}
	if recs[0].Completion == nil || recs[0].Completion.Status != "stubbed" {
		t.Errorf("completion = %+v", recs[0].Completion)
	}
}

// TestUnrecordableDecisionDenies: when the decision log cannot be written (closed, or the store
// refuses the write), the call is denied, the caller is told that the decision was not recorded
// (its id cannot be looked up), and the Logger is told why, with the store's own error, at most
// once per interval with the count of the lines held back.
func TestUnrecordableDecisionDenies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		breakLog func(t *testing.T, log *decisionlog.Log, path string)
		cause    string // in the logged error
	}{
		{"closed", func(t *testing.T, log *decisionlog.Log, _ string) { log.Close() }, "decision log is closed"},
		{"the store refuses the write", func(t *testing.T, _ *decisionlog.Log, path string) {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`CREATE TRIGGER full BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'database or disk is full (simulated)'); END`); err != nil {
				t.Fatal(err)
			}
		}, "database or disk is full (simulated)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.db")
			log, err := decisionlog.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { log.Close() })
			now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
			var logs bytes.Buffer
			m := telemetry.NewMetrics()
			e := enforce.NewPolicy(enforce.Config{Log: log, Metrics: m, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
				Clock: func() time.Time { return now }}).Enforcer("test")
			e.Policy().Set(engine(t))
			tc.breakLog(t, log, path)
			in := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "researcher",
				Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}}
			var first *enforce.Verdict
			for i := range 3 {
				v := e.Decide(context.Background(), in)
				if v.Allow || v.Recorded || v.Outcome != authz.OutcomeError || v.Rules[0] != enforce.RuleLogUnavailable {
					t.Fatalf("verdict with an unwritable log = %+v", v)
				}
				if want := "(decision " + v.ID + ", not recorded: the decision log cannot be written)"; !strings.HasSuffix(v.Explain(), want) {
					t.Errorf("Explain() = %q, want it to end %q", v.Explain(), want)
				}
				if v.Meta()["recorded"] != false {
					t.Errorf("Meta() = %v, without recorded: false", v.Meta())
				}
				if i == 0 {
					first = v
				}
			}
			now = now.Add(enforce.UnrecordedLogInterval)
			last := e.Decide(context.Background(), in)
			type line struct {
				Level, Msg, Error, Point string
				DecisionID               string `json:"decision_id"`
				Suppressed               int
			}
			var lines []line
			dec := json.NewDecoder(&logs)
			for dec.More() {
				var l line
				if err := dec.Decode(&l); err != nil {
					t.Fatal(err)
				}
				lines = append(lines, l)
			}
			if len(lines) != 2 {
				t.Fatalf("logged %+v, want two lines (one, and one after the interval)", lines)
			}
			for i, want := range []struct {
				id   string
				held int
			}{{first.ID, 0}, {last.ID, 2}} {
				l := lines[i]
				if l.Level != "ERROR" || !strings.Contains(l.Msg, "not recorded") || !strings.Contains(l.Error, tc.cause) || l.Point != "test" ||
					l.DecisionID != want.id || l.Suppressed != want.held {
					t.Errorf("line %d: %+v, want the cause %q, decision %s and %d suppressed", i, l, tc.cause, want.id, want.held)
				}
			}
			if !strings.Contains(scrape(m), "lush_decision_log_write_failures_total 4\n") {
				t.Error("not every failure counted")
			}
		})
	}
}

// scrape is m as Prometheus scrapes it.
func scrape(m *telemetry.Metrics) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}
