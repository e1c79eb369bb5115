package enforce_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
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
	res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("build: %v %v", err, res.Diagnostics)
	}
	eng, err := authz.FromBytes(context.Background(), res.Bundle)
	if err != nil {
		t.Fatal(err)
	}
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

func TestUnrecordableDecisionDenies(t *testing.T) {
	log, err := decisionlog.Open(context.Background(), filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	e := enforce.NewPolicy(enforce.Config{Log: log}).Enforcer("test")
	e.Policy().Set(engine(t))
	log.Close()
	in := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "researcher",
		Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}}
	v := e.Decide(context.Background(), in)
	if v.Allow || v.Recorded || v.Outcome != authz.OutcomeError || v.Rules[0] != enforce.RuleLogUnavailable {
		t.Fatalf("verdict with a closed log = %+v", v)
	}
}
