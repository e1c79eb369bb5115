package approvalhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/gateway/approvalhttp"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// pageRequest sends a request to the approval page as a browser would (headers hdr), without
// following redirects.
func (e *env) pageRequest(method, path, key, form string, hdr map[string]string) (int, http.Header, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(form))
	if err != nil {
		e.t.Fatal(err)
	}
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestPage: the approval page shows the call to those who may read approvals, and only an
// approver who did not make the call decides it from there, from the page's own origin; every
// answer, refusals included, is a page.
func TestPage(t *testing.T) {
	e := newEnv(t, true)
	page := approvalhttp.PagePath("ap-1")
	same := map[string]string{"Origin": e.srv.URL}
	tests := []struct {
		name, method, key, form string
		hdr                     map[string]string
		code                    int
		want                    string
	}{
		{"no credentials", "GET", "", "", nil, 401, "unauthenticated"},
		{"requester without a role may not read it", "GET", aliceKey, "", nil, 403, "lush.role.no_approval_read"},
		{"auditor reads it", "GET", zoeKey, "", nil, 200, "<code>tools/shell</code>"},
		{"approver reads it", "GET", samKey, "", nil, 200, `value="approve"`},
		{"requester may not approve", "POST", aliceKey, "decision=approve", same, 403, "lush.approval.self"},
		{"auditor may not approve", "POST", zoeKey, "decision=approve", same, 403, "lush.role.no_approve"},
		{"no origin", "POST", samKey, "decision=approve", nil, 403, "not sent from this server"},
		{"another site", "POST", samKey, "decision=approve", map[string]string{"Origin": "https://evil.example"}, 403, "not sent from this server"},
		{"another site, says the browser", "POST", samKey, "decision=approve", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": e.srv.URL}, 403, "not sent from"},
		{"bad decision", "POST", samKey, "decision=maybe", same, 400, "decision:"},
		{"long reason", "POST", samKey, "decision=deny&reason=" + strings.Repeat("x", 3000), same, 400, "reason:"},
		{"approve", "POST", samKey, "decision=approve&reason=" + url.QueryEscape("ticket <OPS-1>"), same, 303, ""},
		{"approved", "GET", zoeKey, "", nil, 200, `id="decided-by">user:sam<`},
		{"the reason, escaped", "GET", zoeKey, "", nil, 200, "ticket &lt;OPS-1&gt;"},
		{"twice", "POST", samKey, "decision=deny", map[string]string{"Sec-Fetch-Site": "same-origin"}, 303, ""},
		{"unknown", "GET", samKey, "", nil, 404, "There is no approval"},
	}
	for _, tt := range tests {
		path := page
		if tt.name == "unknown" {
			path = approvalhttp.PagePath("ap-9")
		}
		code, hdr, body := e.pageRequest(tt.method, path, tt.key, tt.form, tt.hdr)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("%s: %d %s\nwant %d with %q", tt.name, code, body, tt.code, tt.want)
		}
		if code != 303 && !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
			t.Errorf("%s: answered %s, not a page", tt.name, hdr.Get("Content-Type"))
		}
		if code == 303 && hdr.Get("Location") != "page" {
			t.Errorf("%s: redirected to %q", tt.name, hdr.Get("Location"))
		}
		if code == 200 && (hdr.Get("X-Frame-Options") != "DENY" || !strings.Contains(hdr.Get("Content-Security-Policy"), "frame-ancestors 'none'")) {
			t.Errorf("%s: the page can be framed: %v", tt.name, hdr)
		}
		if tt.name == "approved" && strings.Contains(body, `value="approve"`) {
			t.Errorf("a decided approval still offers Approve")
		}
	}
	ap, err := e.store.Get(context.Background(), "ap-1")
	if err != nil || ap.Status != decisionlog.ApprovalApproved || ap.DecidedBy != "user:sam" || ap.Note != "ticket <OPS-1>" {
		t.Fatalf("the approval after the page: %+v %v", ap, err)
	}
	// The decision is logged as the API's, with the page's route.
	e.log.Sync(context.Background())
	recs, _ := e.log.Query(context.Background(), decisionlog.Filter{Action: authz.ActionApprovalDecide, Limit: 20})
	var routes []string
	for _, r := range recs {
		if strings.Contains(string(r.Event.Input), `"POST /approvals/{id}/page"`) {
			routes = append(routes, r.Event.Outcome)
		}
	}
	if len(routes) != 4 { // alice and zoe denied, sam's approval, sam's second try
		t.Errorf("approval/decide decisions from the page: %v", routes)
	}
}

// TestPageArguments: the page shows the call's arguments as logged: masked, and as text.
func TestPageArguments(t *testing.T) {
	e := newEnv(t, true)
	const secret = "SECRET-TOKEN-0123"
	v := e.dec.Decide(context.Background(), authz.Input{Action: authz.ActionToolsCall, Principal: authz.Principal{ID: "user:alice", Groups: []string{}},
		Agent: "ops", Tool: &authz.Tool{Ref: "tools/shell"}, Arguments: map[string]any{"host": "<script>alert(1)</script>", "token": secret}})
	now := time.Now().UTC()
	if err := e.store.Create(context.Background(), decisionlog.Approval{ID: v.ID, Created: now, Expires: now.Add(time.Hour), Digest: "d2",
		Principal: "user:alice", Agent: "ops", Tool: "tools/shell", Reasons: []byte(`[{"rule":"lush.approval.risk","message":"tools/shell is destructive"}]`)}); err != nil {
		t.Fatal(err)
	}
	code, _, body := e.pageRequest("GET", approvalhttp.PagePath(v.ID), samKey, "", nil)
	if code != 200 || strings.Contains(body, secret) || strings.Contains(body, "<script>") ||
		!strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(body, "tools/shell is destructive") {
		t.Errorf("the page: %d %s", code, body)
	}
}
