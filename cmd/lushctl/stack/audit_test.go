package stack_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lush-agents/lush/audit/audithttp"
	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// TestAuditAPI: the stack serves the decision-log API and its UI; the API decides audit/read
// with the deployed build (so a new build with roles: takes effect at once) and logs each read
// in the log it serves.
func TestAuditAPI(t *testing.T) {
	h := start(t, harnessOpts{})
	ctx := context.Background()

	// The UI's static files need no credentials.
	req, _ := http.NewRequest("GET", h.st.URL()+"/ui/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") != audithttp.ContentSecurityPolicy {
		t.Errorf("GET /ui/: %d %v", resp.StatusCode, resp.Header)
	}
	if code, _ := h.get("/audit/decisions", ""); code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d", code)
	}

	// The test project has no roles: nobody reads the log.
	code, body := h.get("/audit/decisions", carolKey)
	var refused struct {
		Error struct {
			DecisionID string `json:"decision_id"`
			Reasons    []struct{ Rule string }
		}
	}
	json.Unmarshal(body, &refused)
	if code != http.StatusForbidden || len(refused.Error.Reasons) != 1 || refused.Error.Reasons[0].Rule != "lush.role.no_audit" {
		t.Fatalf("carol without roles: %d %s", code, body)
	}

	// A build that gives carol the audit role.
	dir := project(t, "http://127.0.0.1:9/mcp")
	f, err := os.OpenFile(filepath.Join(dir, "lush.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("roles:\n  audit: [user:carol]\n")
	f.Close()
	res, err := compiler.Build(ctx, dir, compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("build: %v %v", err, res.Diagnostics)
	}
	if err := h.st.Deploy(ctx, res.Manifest, res.Hash, res.Bundle); err != nil {
		t.Fatal(err)
	}

	code, body = h.get("/audit/decisions?action=audit/read", carolKey)
	var page audithttp.Page
	if code != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Decisions) != 1 {
		t.Fatalf("carol with the audit role: %d %s", code, body)
	}
	ev := page.Decisions[0].Event
	if ev.DecisionID != refused.Error.DecisionID || ev.Outcome != "deny" || ev.Principal != "user:carol" || ev.Point != audithttp.Point {
		t.Errorf("carol's refused read is logged as %+v", ev)
	}
	if code, body := h.get("/audit/decisions", daveKey); code != http.StatusForbidden {
		t.Errorf("dave: %d %s", code, body)
	}
	var allowed bool
	for _, r := range h.decisions() {
		if r.Event.Action == audithttp.ActionRead && r.Event.Outcome == "allow" && r.Event.Revision == res.Hash &&
			slices.Equal(r.Event.Rules, []string{"lush.role.audit"}) && r.Completion != nil {
			allowed = true
		}
	}
	if !allowed {
		t.Error("carol's allowed read is not in the log with its completion")
	}

	// The console's build pages read the project's build store and know the serving build.
	if err := buildstore.ForProject(h.dir).Save(res.Hash, res.ManifestJSON, res.Bundle); err != nil {
		t.Fatal(err)
	}
	code, body = h.get("/audit/builds", carolKey)
	var builds audithttp.Builds
	if code != http.StatusOK || json.Unmarshal(body, &builds) != nil || len(builds.Builds) != 1 || !builds.Builds[0].Serving ||
		builds.Serving != res.Hash || builds.Builds[0].Hash != res.Hash {
		t.Errorf("GET /audit/builds: %d %s", code, body)
	}
	if code, body = h.get("/audit/builds/"+res.Hash[:8]+"/graph", carolKey); code != http.StatusOK {
		t.Errorf("the serving build's graph: %d %s", code, body)
	}
}

// TestShutdownSignsTheLog: a process that shuts down cleanly signs its decision log's last
// entry, so that verify vouches for every entry (a process killed between checkpoints leaves the
// entries since its last one unprotected).
func TestShutdownSignsTheLog(t *testing.T) {
	h := start(t, harnessOpts{})
	if code, _, body := h.chat("researcher", aliceKey, "What do the notes say?"); code != http.StatusOK {
		t.Fatalf("chat: %d %s", code, body)
	}
	h.stop()
	r, err := decisionlog.OpenReader(h.log)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err := r.Verify(context.Background(), decisionlog.VerifyOptions{})
	if err != nil || !rep.OK || rep.Partitions[0].Last < 3 || rep.Uncovered != 0 {
		t.Fatalf("verify after shutdown: %+v %v", rep, err)
	}
}

// TestConsoleRoutes: the stack hands the audit API its trace store and build store: an
// auditor reads an invocation's trace (its model turns and the child invocation through
// lush://) and a decision's rules described by the build that decided, also once another build
// serves.
func TestConsoleRoutes(t *testing.T) {
	h := start(t, harnessOpts{console: true, lushYAML: "roles:\n  audit: [user:carol]\n"})
	code, res, body := h.chat("orchestrator", aliceKey, "Write a report on Q3")
	if code != 200 || res.TraceID == "" {
		t.Fatalf("chat: %d %s", code, body)
	}
	code, body = h.get("/audit/traces/"+res.TraceID, carolKey)
	var tr struct {
		Spans []struct {
			Name       string         `json:"name"`
			Attributes map[string]any `json:"attributes"`
		} `json:"spans"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &tr) != nil {
		t.Fatalf("trace: %d %s", code, body)
	}
	names := map[string]int{}
	for _, s := range tr.Spans {
		names[s.Name]++
	}
	if names["invoke_agent orchestrator"] != 1 || names["invoke_agent researcher"] != 1 || names["chat gemini-2.5-flash"] < 3 || names["tool researcher"] != 1 {
		t.Errorf("the trace's spans: %v", names)
	}
	if code, body := h.get("/audit/traces/"+res.TraceID, aliceKey); code != http.StatusForbidden {
		t.Errorf("alice reads a trace: %d %s", code, body)
	}

	rules := func() audithttp.DecisionContext {
		t.Helper()
		code, body := h.get("/audit/decisions/"+res.ID+"/context", carolKey)
		var c audithttp.DecisionContext
		if code != http.StatusOK || json.Unmarshal(body, &c) != nil || len(c.Rules) == 0 {
			t.Fatalf("context: %d %s", code, body)
		}
		return c
	}
	if c := rules(); !c.Rules[0].Known || c.Rules[0].File == "" || c.Revision != h.hash {
		t.Errorf("the invocation's rules (serving build): %+v", c)
	}
	// Another build serves: the invocation's rules come from the build store.
	dir := project(t, "http://127.0.0.1:9/mcp")
	f, err := os.OpenFile(filepath.Join(dir, "lush.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("roles:\n  audit: [user:carol, user:dave]\n")
	f.Close()
	other, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
	if err != nil || !other.OK() || other.Hash == h.hash {
		t.Fatalf("build: %v", err)
	}
	if err := h.st.Deploy(context.Background(), other.Manifest, other.Hash, other.Bundle); err != nil {
		t.Fatal(err)
	}
	if c := rules(); !c.Rules[0].Known || c.Rules[0].File == "" || c.RulesNote != "" {
		t.Errorf("the invocation's rules (from the build store): %+v", c)
	}
}
