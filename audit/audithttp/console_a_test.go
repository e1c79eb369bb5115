package audithttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lush-agents/lush/audit/audithttp"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/tracestore"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/test/projecttest"
)

// seedTrace records an orchestrator's invocation by alice as one trace with known times: two
// model turns, a call of lush://researcher through the gateway (decided, allowed) whose child
// invocation runs a model turn and a denied tool call. It returns the trace id and the
// decision ids of the two tool calls.
func (e *env) seedTrace() (traceID, parentCall, childCall string) {
	e.t.Helper()
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tr := e.tracer.Tracer("test")
	alice := authz.Principal{ID: "user:alice", Groups: []string{"group:eng"}}
	span := func(ctx context.Context, name string, from int, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
		return tr.Start(ctx, name, trace.WithTimestamp(at(from)), trace.WithAttributes(attrs...))
	}
	end := func(s trace.Span, ms int) { s.End(trace.WithTimestamp(at(ms))) }
	decide := func(ctx context.Context, agent string, chain []string, p authz.Principal, ref, tool string) string {
		v := e.gateway.Decide(ctx, authz.Input{Action: authz.ActionToolsCall, Principal: p, Agent: agent, Chain: chain,
			Tool: &authz.Tool{Ref: ref, Name: tool}, Arguments: map[string]any{"query": xss}})
		if v.Allow {
			v.Complete(decisionlog.StatusOK, 5*time.Millisecond, nil, "")
		}
		return v.ID
	}
	ctx, root := span(context.Background(), "invoke_agent orchestrator", 0, attribute.String(tracestore.AttrAgent, "orchestrator"),
		attribute.String(tracestore.AttrPrincipal, "user:alice"), attribute.String(tracestore.AttrModel, "gemini-2.5-flash"),
		attribute.Int(tracestore.AttrTokensInput, 300), attribute.Int(tracestore.AttrTokensOutput, 40), attribute.String(tracestore.AttrStatus, "ok"))
	_, turn := span(ctx, "chat gemini-2.5-flash", 0, attribute.Int("lush.turn", 1), attribute.Int("lush.tokens.input", 100), attribute.Int("lush.tokens.output", 10))
	end(turn, 100)
	tctx, tool := span(ctx, "tool researcher", 100, attribute.String("lush.agent", "orchestrator"), attribute.String("lush.tool.name", "researcher"))
	gctx, gw := span(tctx, "tools/call researcher", 110, attribute.String("lush.tool", "lush://researcher"))
	parentCall = decide(gctx, "researcher", []string{"researcher"}, alice, notes, "search_notes")
	cctx, child := span(gctx, "invoke_agent researcher", 120, attribute.String(tracestore.AttrAgent, "researcher"),
		attribute.String(tracestore.AttrPrincipal, "user:alice"), attribute.Int(tracestore.AttrTokensInput, 150))
	_, cturn := span(cctx, "chat gemini-2.5-flash", 120, attribute.Int("lush.turn", 1), attribute.Int("lush.tokens.input", 150), attribute.Int("lush.tokens.output", 20))
	end(cturn, 220)
	ctool, ct := span(cctx, "tool "+xss, 220, attribute.String("lush.tool.name", xss))
	childCall = decide(ctool, "researcher", []string{"orchestrator", "researcher"}, authz.Principal{ID: "user:dave"}, notes, "search_notes")
	ct.SetAttributes(attribute.String("lush.decision_id", childCall), attribute.String("lush.decision", "deny"), attribute.String("lush.status", "denied"))
	end(ct, 260)
	end(child, 300)
	end(gw, 305)
	tool.SetAttributes(attribute.String("lush.decision_id", parentCall), attribute.String("lush.decision", "allow"), attribute.String("lush.status", "ok"))
	end(tool, 310)
	_, turn2 := span(ctx, "chat gemini-2.5-flash", 310, attribute.Int("lush.turn", 2), attribute.Int("lush.tokens.input", 200), attribute.Int("lush.tokens.output", 30))
	end(turn2, 400)
	end(root, 400)
	e.sync()
	return root.SpanContext().TraceID().String(), parentCall, childCall
}

// TestConsoleAAccess: the console's routes sit behind the audit/read gate like the rest of the
// API: an auditor is served (and the read is logged with its route), others get 403 with the
// id of the logged refusal, and bad parameters 400 naming the parameter.
func TestConsoleAAccess(t *testing.T) {
	e := newEnv(t, true)
	e.seed()
	traceID, _, _ := e.seedTrace()
	denied := e.ids["denied"]
	routes := []struct{ path, route string }{
		{"/audit/stats", "GET /audit/stats"},
		{"/audit/decisions/" + denied + "/context", "GET /audit/decisions/{id}/context"},
		{"/audit/traces/" + traceID, "GET /audit/traces/{id}"},
	}
	for _, r := range routes {
		t.Run("allowed "+r.route, func(t *testing.T) {
			resp, body := e.get(r.path, zoeKey)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			rec := e.record(resp.Header.Get(audithttp.HeaderDecisionID))
			var in struct {
				Arguments struct {
					Route string `json:"route"`
				} `json:"arguments"`
			}
			json.Unmarshal(rec.Event.Input, &in)
			if rec.Event.Action != audithttp.ActionRead || rec.Event.Outcome != "allow" || in.Arguments.Route != r.route ||
				rec.Completion == nil || rec.Completion.Status != decisionlog.StatusOK {
				t.Errorf("logged %+v (input %s) completion %+v", rec.Event, rec.Event.Input, rec.Completion)
			}
		})
		t.Run("denied "+r.route, func(t *testing.T) {
			resp, body := e.get(r.path, aliceKey)
			var ae apiError
			json.Unmarshal(body, &ae)
			if resp.StatusCode != http.StatusForbidden || ae.Error.DecisionID == "" || ae.Error.DecisionID != resp.Header.Get(audithttp.HeaderDecisionID) ||
				strings.Contains(string(body), "salaries") || strings.Contains(string(body), "invoke_agent") {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if ev := e.record(ae.Error.DecisionID).Event; ev.Outcome != "deny" || ev.Principal != "user:alice" || ev.Action != audithttp.ActionRead {
				t.Errorf("logged %+v", ev)
			}
		})
		t.Run("unauthenticated "+r.route, func(t *testing.T) {
			if resp, body := e.get(r.path, ""); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%d %s", resp.StatusCode, body)
			}
		})
	}
	for _, tc := range []struct{ path, param, want string }{
		{"/audit/stats?since=yesterday", "since", "neither a time nor a duration"},
		{"/audit/stats?until=soon", "until", "neither a time nor a duration"},
		{"/audit/stats?bucket=fortnight", "bucket", "not a duration"},
		{"/audit/stats?bucket=500ms", "bucket", "a second or more"},
		{"/audit/stats?since=30d&bucket=1m", "bucket", "more than 500"},
		{"/audit/stats?top=0", "top", "from 1 to 50"},
		{"/audit/stats?top=51", "top", "from 1 to 50"},
		{"/audit/stats?since=1h&until=2h", "since", "not before until"},
		{"/audit/stats?buckets=1h", "buckets", "did you mean \"bucket\""},
		{"/audit/stats?top=1&top=2", "top", "given 2 times"},
		{"/audit/decisions/" + strings.Repeat("x", 2000) + "/context", "", "decision id is longer"},
		{"/audit/traces/" + strings.Repeat("a", 65), "", "trace id is longer"},
	} {
		t.Run("bad "+tc.path[:min(len(tc.path), 40)], func(t *testing.T) {
			resp, body := e.get(tc.path, zoeKey)
			var ae apiError
			json.Unmarshal(body, &ae)
			if resp.StatusCode != http.StatusBadRequest || ae.Error.Code != "bad_request" || !strings.Contains(ae.Error.Message, tc.want) ||
				tc.param != "" && !strings.HasPrefix(ae.Error.Message, "param "+tc.param+":") {
				t.Errorf("%d %s", resp.StatusCode, body)
			}
		})
	}
	for _, tc := range []struct{ path, want string }{
		{"/audit/decisions/nope/context", "no decision"},
		{"/audit/traces/00000000000000000000000000000000", "no trace"},
	} {
		resp, body := e.get(tc.path, zoeKey)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d %s", tc.path, resp.StatusCode, body)
		}
	}
	req, _ := http.NewRequest("POST", e.srv.URL+"/audit/stats", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /audit/stats: %v %v", resp, err)
	}
}

// TestStatsCountsTheLog: GET /audit/stats counts what the log holds in its window, by outcome,
// with the seeded denial's rule, principal and tool on top, the serving revision and the chain's
// health.
func TestStatsCountsTheLog(t *testing.T) {
	e := newEnv(t, true)
	for range 3 {
		e.seed()
	}
	resp, body := e.get("/audit/stats?since=1h&bucket=5m&top=3", carolKey)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var o audithttp.Overview
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatal(err)
	}
	if len(o.Buckets) != 12 || o.Bucket != "5m0s" {
		t.Errorf("%d buckets of %s", len(o.Buckets), o.Bucket)
	}
	// The log's own counts in the same window.
	for _, outcome := range authz.Outcomes {
		recs, err := e.log.Query(context.Background(), decisionlog.Filter{Since: o.Since, Until: o.Until, Outcome: outcome, Limit: decisionlog.MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, b := range o.Buckets {
			sum += b.Counts[outcome]
		}
		if int64(len(recs)) != o.Totals[outcome] || sum != o.Totals[outcome] {
			t.Errorf("%s: log %d, totals %d, buckets %d", outcome, len(recs), o.Totals[outcome], sum)
		}
	}
	if o.Totals["deny"] != 3 || o.Totals["stub"] != 3 || o.LiveWrites != 3 {
		t.Errorf("totals %v, live writes %d", o.Totals, o.LiveWrites)
	}
	// dave's denials have two reasons each: no execute on the agent, no grant on the tool.
	if len(o.TopDeniedRules) != 2 || o.TopDeniedRules[0].Key != "lush.acl.no_agent_execute" || o.TopDeniedRules[1].Key != "lush.privilege.no_grant" ||
		o.TopDeniedRules[0].Count != 3 || o.TopDeniedRules[1].Count != 3 ||
		len(o.TopDeniedPrincipals) == 0 || o.TopDeniedPrincipals[0].Key != "user:dave" ||
		len(o.TopDeniedTools) == 0 || o.TopDeniedTools[0].Key != notes+" (search_notes)" {
		t.Errorf("tops: %+v %+v %+v", o.TopDeniedRules, o.TopDeniedPrincipals, o.TopDeniedTools)
	}
	if len(o.Revisions) != 1 || o.Revisions[0].Revision != e.hash || o.Revisions[0].Decisions < 12 {
		t.Errorf("revisions %+v", o.Revisions)
	}
	if len(o.Health.Partitions) != 1 || o.Health.Partitions[0].Head == 0 || o.Health.Writes == nil || o.Health.Writes.Failed != 0 {
		t.Errorf("health %+v", o.Health)
	}
	// The default window is the last 24 hours, in at most 48 buckets.
	resp, body = e.get("/audit/stats", carolKey)
	json.Unmarshal(body, &o)
	if resp.StatusCode != http.StatusOK || o.Until.Sub(o.Since) != 24*time.Hour || len(o.Buckets) != 48 {
		t.Errorf("default: %d since %s until %s, %d buckets", resp.StatusCode, o.Since, o.Until, len(o.Buckets))
	}
}

// TestDecisionContext: a denied decision's rules, with their descriptions and the policy
// file:line they come from, and its place in the chain; a decision of another build is described
// from the build store, or says why it cannot be.
func TestDecisionContext(t *testing.T) {
	e := newEnv(t, true)
	e.seed()
	var c audithttp.DecisionContext
	resp, body := e.get("/audit/decisions/"+e.ids["denied"]+"/context", carolKey)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &c) != nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var reason *audithttp.DecidingRule
	for i := range c.Rules {
		if c.Rules[i].ID == "lush.privilege.no_grant" && slices.Equal(c.Rules[i].Roles, []string{"decided", "reason"}) {
			reason = &c.Rules[i]
		}
	}
	if reason == nil || !reason.Known || reason.Title != "No tool grant" || !strings.Contains(reason.Description, "tool_grant") ||
		reason.File != "/lush/authz/tools.rego" || reason.Line < 1 || len(reason.Messages) != 1 || !strings.Contains(reason.Messages[0], "user:dave") || c.RulesNote != "" {
		t.Fatalf("the denial's rule: %+v (all: %+v, note %q)", reason, c.Rules, c.RulesNote)
	}
	src, _ := os.ReadFile("../../policies/tools.rego")
	lines := strings.Split(string(src), "\n")
	if above := strings.Join(lines[max(0, reason.Line-4):reason.Line-1], "\n"); !strings.Contains(above, "id: lush.privilege.no_grant") {
		t.Errorf("tools.rego:%d is not the rule under its METADATA:\n%s", reason.Line, above)
	}
	if c.Chain == nil || c.Chain.Entry.DecisionID != e.ids["denied"] || c.Chain.Previous == nil || c.Chain.Entry.Pos != c.Chain.Previous.Pos+1 {
		t.Errorf("chain %+v", c.Chain)
	}

	// A decision by a build that is not serving: described from the build store when it is
	// there, else the note says why.
	res := buildProject(t)
	other := strings.Replace(projectFiles["policies/audits.rego"], "HR only", "HR only, always", 1)
	orig := projectFiles["policies/audits.rego"]
	projectFiles["policies/audits.rego"] = other
	res2 := buildProject(t)
	projectFiles["policies/audits.rego"] = orig
	if res2.Hash == res.Hash {
		t.Fatal("the second build has the same hash")
	}
	e.gateway.Policy().Set(projecttest.Engine(t, res2.Bundle))
	old := e.call("old", authz.Principal{ID: "user:dave"}, "search_notes", map[string]any{"query": "q"}, false)
	e.sync()
	resp, body = e.get("/audit/decisions/"+old+"/context", carolKey)
	c = audithttp.DecisionContext{}
	json.Unmarshal(body, &c)
	if resp.StatusCode != http.StatusOK || c.Revision != res2.Hash || !strings.Contains(c.RulesNote, "reads no build store") || c.Rules[0].Known {
		t.Errorf("without a build store: %d %s", resp.StatusCode, body)
	}
	store := buildstore.Open(filepath.Join(t.TempDir(), "build"))
	if err := store.Save(res2.Hash, res2.ManifestJSON, res2.Bundle); err != nil {
		t.Fatal(err)
	}
	auth, err := identity.New(context.Background(), identity.Config{APIKeys: []identity.APIKeyConfig{{Name: "carol", SHA256: sha(carolKey), Principal: "user:carol"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	a, err := audithttp.New(audithttp.Config{Log: e.log, Decider: e.auditor, Auth: auth, Builds: store})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/audit/decisions/"+url.PathEscape(old)+"/context", nil)
	req.Header.Set("Authorization", "Bearer "+carolKey)
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	c = audithttp.DecisionContext{}
	json.Unmarshal(rec.Body.Bytes(), &c)
	if rec.Code != http.StatusOK || c.RulesNote != "" || len(c.Rules) == 0 || !c.Rules[0].Known || c.Rules[0].File == "" {
		t.Errorf("with the build store: %d %s", rec.Code, rec.Body)
	}
}

// TestProjectRuleLocated: a project's rule without METADATA is still located (its file:line in
// the bundle), though not described.
func TestProjectRuleLocated(t *testing.T) {
	e := newEnv(t, true)
	resp, body := e.get("/audit/decisions?agent=payroll", zoeKey)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	c := e.contextOf(resp.Header.Get(audithttp.HeaderDecisionID))
	var got *audithttp.DecidingRule
	for i := range c.Rules {
		if c.Rules[i].ID == "corp.audit.payroll" {
			got = &c.Rules[i]
		}
	}
	if got == nil || !got.Known || !strings.HasSuffix(got.File, "policies/audits.rego") || got.Line != 3 || got.Title != "" {
		t.Errorf("the project's rule: %+v (all %+v)", got, c.Rules)
	}
}

// TestConsoleAFiles: the console's pages are served with the UI's CSP and hold no inline code,
// and their scripts write no HTML and build no code from strings.
func TestConsoleAFiles(t *testing.T) {
	e := newEnv(t, true)
	for _, name := range []string{"overview", "decision", "trace"} {
		for ext, ctype := range map[string]string{".html": "text/html", ".js": "text/javascript"} {
			resp, body := e.get("/ui/"+name+ext, "")
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) ||
				resp.Header.Get("Content-Security-Policy") != audithttp.ContentSecurityPolicy {
				t.Errorf("%s%s: %d %v", name, ext, resp.StatusCode, resp.Header)
			}
			src := string(body)
			if ext == ".html" && (strings.Contains(src, "<script>") || strings.Contains(src, "<style") || strings.Contains(src, " style=") ||
				regexp.MustCompile(`\son[a-z]+=`).MatchString(src) || strings.Contains(src, "http://") || strings.Contains(src, "https://")) {
				t.Errorf("%s.html has inline script or style, or loads from elsewhere", name)
			}
			if ext == ".js" {
				for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "fetch(", "http"} {
					if strings.Contains(src, sink) {
						t.Errorf("%s.js uses %s (requests go through LushUI.getJSON)", name, sink)
					}
				}
			}
		}
	}
	_, lush := e.get("/ui/lush.js", "")
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(string(lush), sink) {
			t.Errorf("lush.js uses %s", sink)
		}
	}
}
