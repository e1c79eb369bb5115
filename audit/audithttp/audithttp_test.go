package audithttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/audit/audithttp"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// page gets a page of GET /audit/decisions.
func (e *env) page(path, key string) audithttp.Page {
	e.t.Helper()
	resp, body := e.get(path, key)
	return decode(e.t, resp, body)
}

// decode decodes a 200 answer of GET /audit/decisions.
func decode(t testing.TB, resp *http.Response, body []byte) audithttp.Page {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var p audithttp.Page
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return p
}

func ids(p audithttp.Page) []string {
	out := []string{}
	for _, r := range p.Decisions {
		out = append(out, r.Event.DecisionID)
	}
	return out
}

// TestFilters: each query parameter selects what `lushctl audit query` would, newest first.
func TestFilters(t *testing.T) {
	e := newEnv(t, true)
	e.seed()
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	calls := "action=tools/call&"
	tests := []struct {
		query string
		want  []string // names of seeded decisions, newest first
	}{
		{calls, []string{"denied", "stub", "live", "read"}},
		{"principal=user:alice", []string{"stub", "live", "read"}},
		{"principal=user:dave", []string{"denied"}},
		{calls + "group=group:eng", []string{"stub", "live", "read"}},
		{calls + "agent=researcher", []string{"denied", "stub", "live", "read"}},
		{"tool=" + url.QueryEscape(notes) + "&tool_name=post_note", []string{"stub", "live"}},
		{"tool_name=search_notes", []string{"denied", "read"}},
		{calls + "access=write", []string{"stub", "live"}},
		{calls + "access=read", []string{"denied", "read"}},
		{calls + "outcome=allow", []string{"live", "read"}},
		{calls + "outcome=deny", []string{"denied"}},
		{"outcome=stub", []string{"stub"}},
		{"outcome=live_write", []string{"live"}},
		{"outcome=approval_required", nil},
		{"text=onerror", []string{"live"}},
		{calls + "text=" + url.QueryEscape(`"query"`), []string{"denied", "read"}},
		{calls + "revision=" + e.hash[:8], []string{"denied", "stub", "live", "read"}},
		{calls + "revision=" + e.hash, []string{"denied", "stub", "live", "read"}},
		{calls + "revision=0000", nil},
		{calls + "since=1h", []string{"denied", "stub", "live", "read"}},
		{calls + "since=" + url.QueryEscape(past) + "&until=" + url.QueryEscape(future), []string{"denied", "stub", "live", "read"}},
		{calls + "until=" + url.QueryEscape(past), nil},
		{calls + "since=7d&until=1ns", []string{"denied", "stub", "live", "read"}},
		{"principal=user:alice&outcome=deny", nil},
		{"principal=%ff%fe", nil},                                                 // not UTF-8: matches nothing, breaks nothing
		{calls + "principal=&agent=", []string{"denied", "stub", "live", "read"}}, // empty form fields filter nothing
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			p := e.page("/audit/decisions?"+tt.query, zoeKey)
			want := []string{}
			for _, name := range tt.want {
				want = append(want, e.ids[name])
			}
			if got := ids(p); !slices.Equal(got, want) {
				t.Errorf("got %v, want %v (%v)", got, want, tt.want)
			}
			if p.NextBefore != 0 {
				t.Errorf("next_before %d on the only page", p.NextBefore)
			}
		})
	}

	// A search leaves its own decision out of its answer, but the next search with the same
	// text finds it: what auditors searched for is in the log too.
	resp, _ := e.get("/audit/decisions?text=secret-thing", zoeKey)
	first := resp.Header.Get(audithttp.HeaderDecisionID)
	if p := e.page("/audit/decisions?text=secret-thing", zoeKey); !slices.Equal(ids(p), []string{first}) || p.Decisions[0].Event.Action != audithttp.ActionRead {
		t.Errorf("second search found %v, want the first search %s", ids(p), first)
	}

	// A decision id, whole or a prefix, finds that decision.
	id := e.ids["live"]
	for _, q := range []string{id, id[:len(id)-1]} {
		p := e.page("/audit/decisions?decision_id="+q, carolKey)
		if got := ids(p); !slices.Equal(got, []string{id}) {
			t.Errorf("decision_id=%s: %v", q, got)
		}
	}

	// The live write carries its completion and the XSS argument as logged.
	p := e.page("/audit/decisions?outcome=live_write", carolKey)
	rec := p.Decisions[0]
	if rec.Completion == nil || rec.Completion.Status != decisionlog.StatusOK || !strings.Contains(string(rec.Event.Input), "onerror") ||
		rec.Event.TraceID == "" || rec.Event.Revision != e.hash {
		t.Errorf("live write record = %+v", rec)
	}
}

// TestPaging: next_before leads through every page exactly once, and is omitted on the last.
func TestPaging(t *testing.T) {
	e := newEnv(t, true)
	e.seed()
	e.seed() // eight tools/call decisions
	var all []string
	query := "/audit/decisions?action=tools/call&limit=3"
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		p := e.page(query, zoeKey)
		all = append(all, ids(p)...)
		if p.NextBefore == 0 {
			if len(p.Decisions) != 2 {
				t.Errorf("last page has %d decisions, want 2", len(p.Decisions))
			}
			break
		}
		if len(p.Decisions) != 3 || p.NextBefore != p.Decisions[2].Seq {
			t.Fatalf("page of %d decisions with next_before %d", len(p.Decisions), p.NextBefore)
		}
		query = "/audit/decisions?action=tools/call&limit=3&before=" + jsonNumber(p.NextBefore)
	}
	whole := e.page("/audit/decisions?action=tools/call", zoeKey)
	if !slices.Equal(all, ids(whole)) || len(all) != 8 {
		t.Errorf("pages gave %v, one query %v", all, ids(whole))
	}
	// Exactly a page's worth: no next page.
	if p := e.page("/audit/decisions?action=tools/call&limit=8", zoeKey); p.NextBefore != 0 || len(p.Decisions) != 8 {
		t.Errorf("limit=8 of 8: next_before %d, %d decisions", p.NextBefore, len(p.Decisions))
	}
	// Without a limit, a page is 100.
	for range 100 {
		e.call("more", authz.Principal{ID: "user:alice", Groups: []string{"group:eng"}}, "search_notes", nil, false)
	}
	e.sync()
	if p := e.page("/audit/decisions?action=tools/call", zoeKey); len(p.Decisions) != audithttp.DefaultLimit || p.NextBefore == 0 {
		t.Errorf("default page: %d decisions, next_before %d", len(p.Decisions), p.NextBefore)
	}
}

func jsonNumber(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestBadParams: a parameter that cannot be used is a 400 naming it and how to fix it, and the
// refused query is still decided and logged (the caller was an auditor).
func TestBadParams(t *testing.T) {
	e := newEnv(t, true)
	tests := []struct{ query, param, fix string }{
		{"since=yesterday", "since", "use RFC 3339, e.g. 2026-01-02T15:04:05Z, or a duration like 24h"},
		{"until=2026-13-01T00:00:00Z", "until", "use RFC 3339"},
		{"since=-5m", "since", "not a positive duration"},
		{"since=1h&until=2h", "since", "is not before until"},
		{"limit=0", "limit", "from 1 to 1000"},
		{"limit=1001", "limit", "from 1 to 1000"},
		{"limit=ten", "limit", "from 1 to 1000"},
		{"before=-1", "before", "next_before"},
		{"before=x", "before", "next_before"},
		{"outcome=maybe", "outcome", "allow, deny, stub, approval_required, error or live_write"},
		{"outcome=live_write&access=read", "outcome", "cannot be combined with access=read"},
		{"access=admin", "access", "use read or write"},
		{"group=eng", "group", "write group:eng"},
		{"princpal=user:alice", "princpal", `did you mean "principal"?`},
		{"banana=1", "banana", "the parameters are principal, group"},
		{"principal=user:a&principal=user:b", "principal", "give it once"},
		{"text=" + url.QueryEscape("a\x00b"), "text", "control character"},
		{"agent=" + strings.Repeat("a", 2000), "agent", "longer than 1024 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.query[:min(len(tt.query), 40)], func(t *testing.T) {
			resp, body := e.get("/audit/decisions?"+tt.query, carolKey)
			var ae apiError
			json.Unmarshal(body, &ae)
			if resp.StatusCode != http.StatusBadRequest || ae.Error.Code != "bad_request" ||
				!strings.HasPrefix(ae.Error.Message, "param "+tt.param+": ") || !strings.Contains(ae.Error.Message, tt.fix) {
				t.Fatalf("answer %d %s, want 400 naming %s with %q", resp.StatusCode, body, tt.param, tt.fix)
			}
			rec := e.record(resp.Header.Get(audithttp.HeaderDecisionID))
			if rec.Event.Action != audithttp.ActionRead || rec.Event.Outcome != "allow" || rec.Completion == nil ||
				rec.Completion.Status != decisionlog.StatusError || !strings.Contains(rec.Completion.Error, tt.param) {
				t.Errorf("logged %+v %+v", rec.Event, rec.Completion)
			}
		})
	}
	// A query string too long to be a filter is refused before anything else.
	resp, body := e.get("/audit/decisions?text="+strings.Repeat("x", 9000), carolKey)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "longer than 8192 bytes") {
		t.Errorf("long query: %d %s", resp.StatusCode, body)
	}
}

// TestAccess: credentials and the audit role decide who reads; every read, allowed or denied, is
// itself in the log as an audit/read decision of the audit API.
func TestAccess(t *testing.T) {
	e := newEnv(t, true)
	e.seed()

	t.Run("no credentials", func(t *testing.T) {
		resp, body := e.get("/audit/decisions", "")
		var ae apiError
		json.Unmarshal(body, &ae)
		if resp.StatusCode != http.StatusUnauthorized || ae.Error.Code != "unauthenticated" || resp.Header.Get("WWW-Authenticate") == "" ||
			!strings.Contains(ae.Error.Message, "no credentials") {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
		if resp.Header.Get(audithttp.HeaderDecisionID) != "" {
			t.Error("an unauthenticated request was decided")
		}
	})
	t.Run("unknown key is not echoed", func(t *testing.T) {
		secret := "sk-live-SECRET-0123456789"
		resp, body := e.get("/audit/decisions/"+e.ids["read"], secret)
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), secret) || !strings.Contains(string(body), "not configured") {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
	})

	for _, tt := range []struct {
		name, key, path, principal string
	}{
		{"non-auditor lists", aliceKey, "/audit/decisions?principal=user:dave", "user:alice"},
		{"non-auditor opens one", aliceKey, "/audit/decisions/" + e.ids["read"], "user:alice"},
		{"approve is not audit", samKey, "/audit/decisions", "user:sam"},
		{"denied before params are read", samKey, "/audit/decisions?limit=0", "user:sam"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.get(tt.path, tt.key)
			var ae apiError
			json.Unmarshal(body, &ae)
			id := resp.Header.Get(audithttp.HeaderDecisionID)
			if resp.StatusCode != http.StatusForbidden || ae.Error.Code != "forbidden" || ae.Error.DecisionID == "" || ae.Error.DecisionID != id ||
				len(ae.Error.Reasons) != 1 || ae.Error.Reasons[0].Rule != "lush.role.no_audit" ||
				!strings.Contains(ae.Error.Message, "principal "+tt.principal+" may not read the decision log") {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if strings.Contains(string(body), "revenue") || strings.Contains(string(body), "salaries") {
				t.Error("a refusal shows logged data")
			}
			rec := e.record(id)
			ev := rec.Event
			if ev.Action != audithttp.ActionRead || ev.Outcome != "deny" || ev.Principal != tt.principal || ev.Point != audithttp.Point ||
				!slices.Equal(ev.Rules, []string{"lush.role.no_audit"}) || rec.Completion != nil || ev.Revision != e.hash {
				t.Errorf("logged %+v", ev)
			}
		})
	}

	t.Run("project policy denies by what is asked", func(t *testing.T) {
		resp, body := e.get("/audit/decisions?agent=payroll", zoeKey)
		var ae apiError
		json.Unmarshal(body, &ae)
		if resp.StatusCode != http.StatusForbidden || len(ae.Error.Reasons) != 1 || ae.Error.Reasons[0].Rule != "corp.audit.payroll" {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
	})
	t.Run("a read that needs approval is not served", func(t *testing.T) {
		resp, body := e.get("/audit/decisions", patKey)
		var ae apiError
		json.Unmarshal(body, &ae)
		if resp.StatusCode != http.StatusForbidden || ae.Error.Code != "approval_required" || len(ae.Error.Reasons) != 1 ||
			ae.Error.Reasons[0].Rule != "corp.audit.pat" || !strings.Contains(ae.Error.Message, "does not wait for approvals") ||
			strings.Contains(string(body), "revenue") {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
		if ev := e.record(ae.Error.DecisionID).Event; ev.Outcome != "approval_required" || ev.Action != audithttp.ActionRead {
			t.Errorf("logged %+v", ev)
		}
	})
	t.Run("auditor's read is logged with what was asked", func(t *testing.T) {
		resp, body := e.get("/audit/decisions?principal=user:dave&since=1h", zoeKey)
		p := decode(t, resp, body)
		if got := ids(p); !slices.Equal(got, []string{e.ids["denied"]}) {
			t.Errorf("got %v", got)
		}
		rec := e.record(resp.Header.Get(audithttp.HeaderDecisionID))
		ev := rec.Event
		var in struct {
			Arguments struct {
				Route string            `json:"route"`
				Query map[string]string `json:"query"`
			} `json:"arguments"`
		}
		json.Unmarshal(ev.Input, &in)
		if ev.Action != audithttp.ActionRead || ev.Outcome != "allow" || ev.Principal != "user:zoe" || !slices.Equal(ev.Groups, []string{"group:auditors"}) ||
			!slices.Equal(ev.Rules, []string{"lush.role.audit"}) || ev.Point != audithttp.Point || ev.Access != "read" ||
			in.Arguments.Route != "GET /audit/decisions" || in.Arguments.Query["principal"] != "user:dave" || in.Arguments.Query["since"] != "1h" {
			t.Errorf("logged %+v input %s", ev, ev.Input)
		}
		if rec.Completion == nil || rec.Completion.Status != decisionlog.StatusOK {
			t.Errorf("completion %+v", rec.Completion)
		}
		// Auditors find their own reads (and other auditors') with action=audit/read.
		p = e.page("/audit/decisions?action=audit/read&principal=user:zoe", carolKey)
		if len(p.Decisions) == 0 || p.Decisions[0].Event.DecisionID != ev.DecisionID {
			t.Errorf("zoe's reads: %v", ids(p))
		}
	})
}

// TestGetOne: GET /audit/decisions/{id} answers exactly that decision, or 404.
func TestGetOne(t *testing.T) {
	e := newEnv(t, true)
	e.seed()
	id := e.ids["live"]
	resp, body := e.get("/audit/decisions/"+id, carolKey)
	var rec decisionlog.Record
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &rec) != nil || rec.Event.DecisionID != id || rec.Completion == nil ||
		rec.Event.ToolName != "post_note" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if got := e.record(resp.Header.Get(audithttp.HeaderDecisionID)); !strings.Contains(string(got.Event.Input), id) {
		t.Errorf("the read does not record which decision was opened: %s", got.Event.Input)
	}
	for _, missing := range []string{id[:8], "no-such-decision", url.PathEscape("a b")} {
		resp, body := e.get("/audit/decisions/"+missing, carolKey)
		var ae apiError
		json.Unmarshal(body, &ae)
		if resp.StatusCode != http.StatusNotFound || ae.Error.Code != "not_found" {
			t.Errorf("%s: %d %s", missing, resp.StatusCode, body)
		}
	}
	if resp, body := e.get("/audit/nothing", carolKey); resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "GET /audit/decisions") {
		t.Errorf("unknown route: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("DELETE", e.srv.URL+"/audit/decisions/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+carolKey)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %v %v", resp, err)
	}
}

// TestFailClosed: without a policy, or when the log cannot be read, nothing is shown.
func TestFailClosed(t *testing.T) {
	t.Run("no policy", func(t *testing.T) {
		e := newEnv(t, false)
		e.seed()
		resp, body := e.get("/audit/decisions", carolKey)
		var ae apiError
		json.Unmarshal(body, &ae)
		if resp.StatusCode != http.StatusServiceUnavailable || ae.Error.Code != "policy_error" || ae.Error.DecisionID == "" {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if rec := e.record(ae.Error.DecisionID); rec.Event.Outcome != "error" || rec.Event.Action != audithttp.ActionRead {
			t.Errorf("logged %+v", rec.Event)
		}
	})
	t.Run("log unreadable", func(t *testing.T) {
		e := newEnv(t, true)
		auth, err := identity.New(context.Background(), identity.Config{APIKeys: []identity.APIKeyConfig{
			{Name: "carol", SHA256: sha(carolKey), Principal: "user:carol"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer auth.Close()
		a, err := audithttp.New(audithttp.Config{Log: failingLog{}, Decider: e.auditor, Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(a.Handler())
		defer srv.Close()
		for _, path := range []string{"/audit/decisions", "/audit/decisions/x"} {
			req, _ := http.NewRequest("GET", srv.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+carolKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var ae apiError
			json.NewDecoder(resp.Body).Decode(&ae)
			resp.Body.Close()
			if resp.StatusCode != http.StatusInternalServerError || ae.Error.Code != "log_unavailable" || strings.Contains(ae.Error.Message, "/var/lib") {
				t.Errorf("%s: %d %+v", path, resp.StatusCode, ae)
			}
			rec := e.record(resp.Header.Get(audithttp.HeaderDecisionID))
			if rec.Completion == nil || rec.Completion.Status != decisionlog.StatusError || !strings.Contains(rec.Completion.Error, "/var/lib") {
				t.Errorf("%s: completion %+v", path, rec.Completion)
			}
		}
	})
	t.Run("config", func(t *testing.T) {
		if _, err := audithttp.New(audithttp.Config{}); err == nil {
			t.Error("New accepted an empty config")
		}
	})
}

type failingLog struct{}

func (failingLog) Query(context.Context, decisionlog.Filter) ([]decisionlog.Record, error) {
	return nil, errors.New("query decision log /var/lib/lush/decisions.db: disk I/O error")
}

// TestUIFiles: the UI's static files are served without credentials, with a strict CSP, and
// contain no inline script or style and no HTML sinks.
func TestUIFiles(t *testing.T) {
	e := newEnv(t, true)
	resp, _ := e.get("/ui", "")
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "ui/" {
		t.Errorf("/ui: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	files := map[string]string{"/ui/": "text/html", "/ui/index.html": "text/html", "/ui/app.js": "text/javascript", "/ui/app.css": "text/css"}
	bodies := map[string]string{}
	for path, ctype := range files {
		resp, body := e.get(path, "")
		h := resp.Header
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), ctype) || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("Content-Security-Policy") != audithttp.ContentSecurityPolicy {
			t.Errorf("%s: %d %v", path, resp.StatusCode, h)
		}
		bodies[path] = string(body)
	}
	csp := audithttp.ContentSecurityPolicy
	for _, want := range []string{"default-src 'self'", "script-src 'self';", "style-src 'self';", "object-src 'none'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") || strings.Contains(csp, "http") {
		t.Errorf("CSP %q allows inline code or other origins", csp)
	}
	html := bodies["/ui/"]
	if strings.Contains(html, "<script>") || strings.Contains(html, "<style") || strings.Contains(html, " style=") ||
		regexp.MustCompile(`\son[a-z]+=`).MatchString(html) || strings.Contains(html, "http://") || strings.Contains(html, "https://") {
		t.Error("index.html has inline script or style, or loads from elsewhere")
	}
	js := bodies["/ui/app.js"]
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(js, sink) {
			t.Errorf("app.js uses %s", sink)
		}
	}
	for path, code := range map[string]int{"/ui/nope.js": 404, "/ui/ui/app.js": 404, "/ui/x/index.html": 404} {
		if resp, _ := e.get(path, ""); resp.StatusCode != code {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, code)
		}
	}
	req, _ := http.NewRequest("POST", e.srv.URL+"/ui/", strings.NewReader("x"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %v %v", resp, err)
	}
}
