package audithttp_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lush-agents/lush/audit/audithttp"
	"github.com/lush-agents/lush/audit/graph"
	"github.com/lush-agents/lush/audit/review"
	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/test/projecttest"
)

// xssPrincipal is a principal a build may name (no spaces) that is also markup.
const xssPrincipal = "user:<img/src=x/onerror=alert(2)>"

// candidateFiles is projectFiles with user:dave let in (the researcher's ACL and a read grant on
// the notes server: it flips dave's denied search_notes of seed to allow), and xssPrincipal
// (ACL and a write grant).
func candidateFiles() map[string]string {
	files := maps.Clone(projectFiles)
	files["lush.yaml"] = strings.Replace(files["lush.yaml"], "      - {principal: group:eng, access: write}\n",
		"      - {principal: group:eng, access: write}\n      - {principal: user:dave, access: read}\n"+
			"      - {principal: \""+xssPrincipal+"\", access: write}\n", 1)
	files["agents/researcher/spec.yaml"] = strings.Replace(files["agents/researcher/spec.yaml"], "  - {principal: group:eng, role: execute}\n",
		"  - {principal: group:eng, role: execute}\n  - {principal: user:dave, role: execute}\n  - {principal: \""+xssPrincipal+"\", role: execute}\n", 1)
	return files
}

// buildFiles compiles a project of files offline.
func buildFiles(t testing.TB, files map[string]string) *compiler.Result {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("build: %v %v", err, res.Diagnostics)
	}
	return res
}

// keptBuilds is a build store holding the base build (projectFiles, deployed) and the candidate
// (candidateFiles, built after it).
type keptBuilds struct {
	store           *buildstore.Store
	base, candidate string
}

func keepBuilds(t testing.TB) keptBuilds {
	t.Helper()
	k := keptBuilds{store: buildstore.Open(filepath.Join(t.TempDir(), "build"))}
	base, cand := buildFiles(t, projectFiles), buildFiles(t, candidateFiles())
	for _, res := range []*compiler.Result{base, cand} {
		if err := k.store.Save(res.Hash, res.ManifestJSON, res.Bundle); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.store.Deploy(base.Hash); err != nil {
		t.Fatal(err)
	}
	k.base, k.candidate = base.Hash, cand.Hash
	return k
}

// newBuildsEnv is newEnv with the kept builds, deciding analyses with a test's deadline.
func newBuildsEnv(t testing.TB) (*env, keptBuilds) {
	t.Helper()
	k := keepBuilds(t)
	e := newEnv(t, true, func(c *audithttp.Config) {
		c.Builds, c.AnalysisTimeout = k.store, projecttest.DecisionTimeout
	})
	if e.hash != k.base {
		t.Fatalf("the env's build %s is not the kept base %s", e.hash, k.base)
	}
	return e, k
}

// do sends method path with the key as a bearer token and body (nil: none), with header h.
func (e *env) do(method, path, key string, body []byte, h map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, out
}

// TestConsoleBRoutes: each console-b route answers an auditor, refuses others with a logged
// decision (403 with its id, 401 without a token), names the parameter or field of a bad
// request (400), and every answer is an audit/read decision in the log with its route.
func TestConsoleBRoutes(t *testing.T) {
	e, k := newBuildsEnv(t)
	e.seed()
	denied := e.ids["denied"]
	evalBody := func(s string) []byte { return []byte(s) }
	daveCall := `{"principal":{"id":"user:dave"},"agent":"researcher","tool":{"ref":"` + notes + `","name":"search_notes"},"arguments":{"query":"x"}}`

	tests := []struct {
		name, method, path string
		body               []byte
		key                string
		status             int
		route              string // of the logged decision ("" for none: a 401)
		want               []string
	}{
		{"builds", "GET", "/audit/builds", nil, zoeKey, 200, "GET /audit/builds",
			[]string{`"hash":"` + k.base + `"`, `"hash":"` + k.candidate + `"`, `"deployed":"` + k.base + `"`, `"serving":"` + k.base + `"`}},
		{"builds: not an auditor", "GET", "/audit/builds", nil, aliceKey, 403, "GET /audit/builds", []string{"may not read the decision log"}},
		{"builds: no token", "GET", "/audit/builds", nil, "", 401, "", []string{"unauthenticated"}},
		{"builds: unknown param", "GET", "/audit/builds?x=1", nil, zoeKey, 400, "GET /audit/builds", []string{"param x: unknown parameter"}},
		{"graph", "GET", "/audit/builds/" + k.base[:8] + "/graph", nil, carolKey, 200, "GET /audit/builds/{hash}/graph",
			[]string{`"revision":"` + k.base + `"`, `{"from":"group:eng","to":"researcher","kind":"invokes","label":"execute"}`}},
		{"graph: not an auditor", "GET", "/audit/builds/" + k.base[:8] + "/graph", nil, samKey, 403, "GET /audit/builds/{hash}/graph", []string{"forbidden"}},
		{"graph: not a hash", "GET", "/audit/builds/zz/graph", nil, zoeKey, 400, "GET /audit/builds/{hash}/graph", []string{"param hash:", "at least 4 hex digits"}},
		{"graph: no such build", "GET", "/audit/builds/abcd/graph", nil, zoeKey, 404, "GET /audit/builds/{hash}/graph", []string{"param hash: no single kept build abcd"}},
		{"review", "GET", "/audit/builds/" + k.base + "/review", nil, zoeKey, 200, "GET /audit/builds/{hash}/review",
			[]string{`"subject":"group:eng","agent":"researcher","tool":"` + notes + `","name":"post_note","access":"write","outcome":"stub"`}},
		{"review: diff", "GET", "/audit/builds/" + k.candidate + "/review?diff=" + k.base[:6], nil, zoeKey, 200, "GET /audit/builds/{hash}/review",
			[]string{`"diff":"` + k.base + `"`, `"subject":"user:dave","agent":"researcher","tool":"` + notes + `","name":"search_notes","access":"read","outcome":"allow"`, `"change":"added"`}},
		{"review: bad format", "GET", "/audit/builds/" + k.base + "/review?format=xml", nil, zoeKey, 400, "GET /audit/builds/{hash}/review", []string{"param format:"}},
		{"review: bad diff", "GET", "/audit/builds/" + k.base + "/review?diff=x", nil, zoeKey, 400, "GET /audit/builds/{hash}/review", []string{"param diff:"}},
		{"review: not an auditor", "GET", "/audit/builds/" + k.base + "/review", nil, aliceKey, 403, "GET /audit/builds/{hash}/review", []string{"forbidden"}},
		{"replay", "GET", "/audit/replay?build=" + k.candidate[:10] + "&since=1h", nil, zoeKey, 200, "GET /audit/replay",
			[]string{`"decision_id":"` + denied + `"`, `"was":"deny","now":"allow"`, `"by_principal":[{"name":"user:dave","flips":1}]`, `"truncated":false`}},
		{"replay: no build", "GET", "/audit/replay?since=1h", nil, zoeKey, 400, "GET /audit/replay", []string{"param build: required"}},
		{"replay: window too wide", "GET", "/audit/replay?build=" + k.candidate + "&since=2400h", nil, zoeKey, 400, "GET /audit/replay", []string{"param since:", "longer than"}},
		{"replay: bad filter", "GET", "/audit/replay?build=" + k.candidate + "&outcom=deny", nil, zoeKey, 400, "GET /audit/replay", []string{"param outcom: unknown parameter"}},
		{"replay: bad limit", "GET", "/audit/replay?build=" + k.candidate + "&limit=5000", nil, zoeKey, 400, "GET /audit/replay", []string{"param limit:"}},
		{"replay: not an auditor", "GET", "/audit/replay?build=" + k.candidate, nil, aliceKey, 403, "GET /audit/replay", []string{"forbidden"}},
		{"eval: denied", "POST", "/audit/eval", evalBody(`{"input":` + daveCall + `}`), zoeKey, 200, "POST /audit/eval",
			[]string{`"outcome":"deny"`, "lush.privilege.no_grant", `decision: DENY\n`, `"build":"` + k.base + `"`}},
		{"eval: the candidate allows", "POST", "/audit/eval", evalBody(`{"build":"` + k.candidate[:8] + `","input":` + daveCall + `}`), zoeKey, 200, "POST /audit/eval",
			[]string{`"outcome":"allow"`, `decision: ALLOW\n`}},
		{"eval: a logged decision", "POST", "/audit/eval", evalBody(`{"decision_id":"` + denied + `","explain":"notes"}`), zoeKey, 200, "POST /audit/eval",
			[]string{`"outcome":"deny"`, "lush.privilege.no_grant", `"trace":"`}},
		{"eval: no input", "POST", "/audit/eval", evalBody(`{}`), zoeKey, 400, "POST /audit/eval", []string{"field input: required"}},
		{"eval: both", "POST", "/audit/eval", evalBody(`{"decision_id":"x","input":` + daveCall + `}`), zoeKey, 400, "POST /audit/eval", []string{"field decision_id:"}},
		{"eval: unknown field", "POST", "/audit/eval", evalBody(`{"inptu":{}}`), zoeKey, 400, "POST /audit/eval", []string{`unknown field \"inptu\"`}},
		{"eval: bad principal", "POST", "/audit/eval", evalBody(`{"input":{"principal":{"id":"dave"}}}`), zoeKey, 400, "POST /audit/eval", []string{"field input.principal.id:"}},
		{"eval: bad action", "POST", "/audit/eval", evalBody(`{"input":{"principal":{"id":"user:dave"},"action":"rm"}}`), zoeKey, 400, "POST /audit/eval", []string{"field input.action:"}},
		{"eval: bad explain", "POST", "/audit/eval", evalBody(`{"input":` + daveCall + `,"explain":"all"}`), zoeKey, 400, "POST /audit/eval", []string{"field explain:"}},
		{"eval: unknown decision", "POST", "/audit/eval", evalBody(`{"decision_id":"nope"}`), zoeKey, 404, "POST /audit/eval", []string{"field decision_id: no decision"}},
		{"eval: too large", "POST", "/audit/eval", evalBody(`{"input":{"principal":{"id":"user:x"},"arguments":{"a":"` + strings.Repeat("x", audithttp.MaxEvalBody) + `"}}}`),
			zoeKey, 413, "POST /audit/eval", []string{"larger than"}},
		{"eval: not an auditor", "POST", "/audit/eval", evalBody(`{"input":` + daveCall + `}`), aliceKey, 403, "POST /audit/eval", []string{"forbidden"}},
		{"eval: GET", "GET", "/audit/eval", nil, zoeKey, 405, "", []string{"POST"}},
		{"replay: POST", "POST", "/audit/replay", nil, zoeKey, 405, "", []string{"read-only"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := e.do(tc.method, tc.path, tc.key, tc.body, nil)
			var compact bytes.Buffer
			if json.Compact(&compact, body) == nil {
				body = compact.Bytes()
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			for _, w := range tc.want {
				if !bytes.Contains(body, []byte(w)) {
					t.Errorf("no %s in %s", w, body)
				}
			}
			id := resp.Header.Get(audithttp.HeaderDecisionID)
			if tc.route == "" {
				return
			}
			if tc.status == 403 {
				var ae apiError
				if err := json.Unmarshal(body, &ae); err != nil || ae.Error.DecisionID != id || id == "" {
					t.Errorf("403 without its decision id: header %q, body %s", id, body)
				}
			}
			ev := e.record(id).Event
			var in authz.Input
			if err := json.Unmarshal(ev.Input, &in); err != nil {
				t.Fatal(err)
			}
			args, _ := in.Arguments.(map[string]any)
			wantOutcome := "allow"
			if tc.status == 403 {
				wantOutcome = "deny"
			}
			if ev.Action != authz.ActionAuditRead || ev.Outcome != wantOutcome || args["route"] != tc.route || ev.Point != audithttp.Point {
				t.Errorf("logged as %s %s %v at %s", ev.Action, ev.Outcome, args, ev.Point)
			}
		})
	}
}

// TestReviewCSV: the CSV export is the JSON's rows, quoted by RFC 4180, with cells a spreadsheet
// would run as a formula defused; Accept: text/csv asks for it too.
func TestReviewCSV(t *testing.T) {
	e, k := newBuildsEnv(t)
	_, jsonBody := e.do("GET", "/audit/builds/"+k.candidate+"/review?diff="+k.base, zoeKey, nil, nil)
	var page audithttp.ReviewPage
	if err := json.Unmarshal(jsonBody, &page); err != nil {
		t.Fatal(err)
	}
	for _, how := range []struct {
		path   string
		header map[string]string
	}{
		{"/audit/builds/" + k.candidate + "/review?format=csv&diff=" + k.base, nil},
		{"/audit/builds/" + k.candidate + "/review?diff=" + k.base, map[string]string{"Accept": "text/csv"}},
	} {
		resp, body := e.do("GET", how.path, zoeKey, nil, how.header)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/csv; charset=utf-8" ||
			!strings.Contains(resp.Header.Get("Content-Disposition"), "attachment") {
			t.Fatalf("%s: %d %v", how.path, resp.StatusCode, resp.Header)
		}
		recs, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(recs[0], ",") != "change,subject,action,agent,tool,name,access,outcome,risk,granted_by,conditions,was_access,was_outcome" ||
			len(recs) != len(page.Rows)+1 {
			t.Fatalf("%d records for %d rows: %q", len(recs), len(page.Rows), recs[0])
		}
		for i, r := range page.Rows {
			change := r.Change
			if change == "" {
				change = "same"
			}
			if got := recs[i+1]; got[0] != change || got[1] != r.Subject || got[4] != r.Tool || got[5] != r.Name || got[7] != r.Outcome ||
				got[9] != strings.Join(r.GrantedBy, "; ") {
				t.Errorf("record %d %q, row %+v", i+1, got, r)
			}
		}
	}

	var b bytes.Buffer
	err := audithttp.WriteReviewCSV(&b, &audithttp.ReviewPage{Revision: "r", Rows: []audithttp.ReviewRow{
		{Row: reviewRow("=HYPERLINK(\"http://x\")", "+1", "-1", "@SUM(A1)", "a,b \"quoted\"\nline")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil || len(recs) != 2 {
		t.Fatalf("%q %v", b.String(), err)
	}
	for i, want := range []string{"'=HYPERLINK(\"http://x\")", "'+1", "'-1", "'@SUM(A1)", "a,b \"quoted\"\nline"} {
		if recs[1][i] != want {
			t.Errorf("cell %d: %q, want %q", i, recs[1][i], want)
		}
	}
	for in, want := range map[string]string{"\tx": "'\tx", "\rx": "'\rx", "user:x": "user:x", "": ""} {
		if got := audithttp.CSVCell(in); got != want {
			t.Errorf("CSVCell(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestGraphAPIMatchesDerive: the graph route answers what audit/graph derives from the build.
func TestGraphAPIMatchesDerive(t *testing.T) {
	e, k := newBuildsEnv(t)
	_, body := e.do("GET", "/audit/builds/"+k.candidate+"/graph", zoeKey, nil, nil)
	m, _, err := k.store.Manifest(k.candidate)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(graph.Derive(m, k.candidate))
	var got bytes.Buffer
	if err := json.Compact(&got, body); err != nil || got.String() != string(want) {
		t.Errorf("graph\n%s\nwant\n%s", body, want)
	}
}

func reviewRow(subject, action, agent, tool, name string) review.Row {
	return review.Row{Subject: subject, Action: action, Agent: agent, Tool: tool, Name: name}
}
