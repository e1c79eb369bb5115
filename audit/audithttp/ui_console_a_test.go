package audithttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/lush-agents/lush/audit/audithttp"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// signIn opens page as zoe (an auditor) and waits until ready holds.
func (b *browser) signIn(t *testing.T, url, ready string) {
	t.Helper()
	b.do(t, "open "+url, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), zoeKey), chromedp.Click(chromedp.CSS("#token-save")), poll(ready))
}

// afterNavigation waits, across the navigation a click or key started, until the JavaScript
// predicate holds on the new page (a poll running while the old page goes away loses its
// context, and is asked again).
func (b *browser) afterNavigation(t *testing.T, js string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	for {
		err := chromedp.Do(ctx, poll(js))
		if err == nil {
			return
		}
		if ctx.Err() != nil || !strings.Contains(err.Error(), "context") {
			t.Fatalf("waiting for %s: %v\nconsole: %v", js, err, b.messages())
		}
	}
}

// clean fails t if a dialog opened, a logged string became an element, a request left the
// page's origin, or the page logged anything but failed loads.
func (b *browser) clean(t *testing.T) {
	t.Helper()
	var n int
	b.eval(t, `document.querySelectorAll('img, [onerror]').length`, &n)
	if n != 0 {
		t.Errorf("%d elements made of logged strings", n)
	}
	if n := b.dialogCount(); n != 0 {
		t.Errorf("%d dialogs opened: %v", n, b.dialogs)
	}
	var foreign []string
	b.eval(t, `performance.getEntriesByType('resource').map(e => e.name).filter(u => new URL(u).origin !== location.origin)`, &foreign)
	if len(foreign) != 0 {
		t.Errorf("requests to other origins: %v", foreign)
	}
	for _, m := range b.messages() {
		if !strings.HasPrefix(m, "debug: ") && !strings.Contains(m, "Failed to load resource") {
			t.Errorf("console: %s", m)
		}
	}
}

// TestConsoleShellInBrowser: every page has the same nav bar (the console's seven pages, the
// current one marked) and one sign-in box; the nav is reachable by keyboard; the API helper
// keeps every request on the page's origin, so the token is sent nowhere else.
func TestConsoleShellInBrowser(t *testing.T) {
	b := newBrowser(t)
	e := newEnv(t, true)
	e.seed()
	wantNav := []string{"overview.html|Overview", "./|Decisions", "approvals.html|Approvals", "graph.html|Graph", "review.html|Access review",
		"replay.html|Replay", "playground.html|Playground"}
	for _, page := range []struct{ file, current string }{
		{"overview.html", "Overview"}, {"", "Decisions"}, {"index.html", "Decisions"}, {"approvals.html", "Approvals"},
		{"decision.html", ""}, {"trace.html", ""},
		{"graph.html", "Graph"}, {"review.html", "Access review"}, {"replay.html", "Replay"}, {"playground.html", "Playground"},
	} {
		b.do(t, "open "+page.file, chromedp.Navigate(e.srv.URL+"/ui/"+page.file), chromedp.WaitVisible(chromedp.CSS("#token")))
		var nav []string
		b.eval(t, `Array.from(document.querySelectorAll('nav#nav li a')).map(a => a.getAttribute('href') + '|' + a.textContent)`, &nav)
		if !slices.Equal(nav, wantNav) {
			t.Errorf("%s: nav %v", page.file, nav)
		}
		var current string
		b.eval(t, `Array.from(document.querySelectorAll('nav#nav a[aria-current="page"]')).map(a => a.textContent).join(',')`, &current)
		if current != page.current {
			t.Errorf("%s: current page %q, want %q", page.file, current, page.current)
		}
		var boxes int
		b.eval(t, `document.querySelectorAll('#token-form').length + document.querySelectorAll('#token').length`, &boxes)
		if boxes != 2 {
			t.Errorf("%s: %d sign-in forms and inputs, want one each", page.file, boxes)
		}
	}
	// Keyboard: the first Tab reaches the nav's first link, Enter follows it.
	b.do(t, "tab to the nav", chromedp.Navigate(e.srv.URL+"/ui/trace.html"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.KeyEvent(kb.Tab), poll(`document.activeElement && document.activeElement.textContent === 'Overview'`),
		chromedp.KeyEvent(kb.Enter))
	// The page's deferred scripts run after the address changes: wait for the shell too.
	b.afterNavigation(t, `location.pathname.endsWith('/ui/overview.html') && window.LushUI !== undefined`)
	// Whatever path a page asks for, the API helper keeps it on the page's origin.
	var origins string
	b.eval(t, `['//evil.example/x', 'https://evil.example/audit/stats', '/audit/stats'].map(u => LushUI.api(u).origin).join(',')`, &origins)
	if origins != strings.Repeat(e.srv.URL+",", 2)+e.srv.URL {
		t.Errorf("API URLs: %s", origins)
	}
	var rel string
	b.eval(t, `String(LushUI.api('audit/stats?since=1h'))`, &rel)
	if rel != e.srv.URL+"/audit/stats?since=1h" {
		t.Errorf("API URL %s", rel)
	}
	b.clean(t)
}

// TestOverviewInBrowser: the chart's bars add up, per outcome, to the log's counts in the
// window the page shows, and so do the totals; the top denied rule, principal and tool are the
// seeded denial's; logged strings chosen by an attacker (a principal, a tool name) are text.
func TestOverviewInBrowser(t *testing.T) {
	b := newBrowser(t)
	e := newEnv(t, true)
	for range 3 {
		e.seed()
	}
	evil := authz.Principal{ID: "user:" + xss}
	e.call("evil-principal", evil, "search_notes", map[string]any{"query": xss}, false)
	e.call("evil-tool", authz.Principal{ID: "user:dave"}, xss, map[string]any{"q": 1}, false)
	e.sync()

	b.signIn(t, e.srv.URL+"/ui/overview.html", `document.querySelectorAll('#chart rect.bar').length > 0`)
	var since, until string
	b.eval(t, `document.getElementById('overview').dataset.since`, &since)
	b.eval(t, `document.getElementById('overview').dataset.until`, &until)
	from, err1 := time.Parse(time.RFC3339Nano, since)
	to, err2 := time.Parse(time.RFC3339Nano, until)
	if err1 != nil || err2 != nil || to.Sub(from) != 24*time.Hour {
		t.Fatalf("window %q to %q", since, until)
	}
	var bars, totals []string
	b.eval(t, `Array.from(document.querySelectorAll('#chart rect.bar')).map(r => r.dataset.outcome + '=' + r.dataset.count)`, &bars)
	b.eval(t, `Array.from(document.querySelectorAll('#total-rows tr')).map(tr => tr.dataset.outcome + '=' + tr.children[1].textContent)`, &totals)
	chart := map[string]int{}
	for _, bar := range bars {
		k, v, _ := strings.Cut(bar, "=")
		n, _ := strconv.Atoi(v)
		chart[k] += n
	}
	shown := map[string]int{}
	for _, row := range totals {
		k, v, _ := strings.Cut(row, "=")
		shown[k], _ = strconv.Atoi(v)
	}
	for _, outcome := range authz.Outcomes {
		recs, err := e.log.Query(context.Background(), decisionlog.Filter{Since: from, Until: to, Outcome: outcome, Limit: decisionlog.MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		if chart[outcome] != len(recs) || shown[outcome] != len(recs) {
			t.Errorf("%s: the chart shows %d, the totals %d, the log holds %d", outcome, chart[outcome], shown[outcome], len(recs))
		}
	}
	if chart["deny"] < 5 || chart["stub"] != 3 {
		t.Errorf("chart %v", chart)
	}
	var rules, principals, tools []string
	b.eval(t, `Array.from(document.querySelectorAll('#top-rules li')).map(li => li.dataset.key + '=' + li.dataset.count)`, &rules)
	b.eval(t, `Array.from(document.querySelectorAll('#top-principals li')).map(li => li.dataset.key + '=' + li.dataset.count)`, &principals)
	b.eval(t, `Array.from(document.querySelectorAll('#top-tools li')).map(li => li.dataset.key + '=' + li.dataset.count)`, &tools)
	// dave was denied four times (three seeded, one with the odd tool name): no grant, no execute.
	if len(rules) < 2 || !slices.Contains(rules[:2], "lush.privilege.no_grant=5") || !slices.Contains(rules[:2], "lush.acl.no_agent_execute=5") {
		t.Errorf("top denied rules %v", rules)
	}
	if len(principals) != 2 || principals[0] != "user:dave=4" || principals[1] != "user:"+xss+"=1" {
		t.Errorf("top denied principals %v", principals)
	}
	if len(tools) != 2 || tools[0] != notes+" (search_notes)=4" || tools[1] != notes+" ("+xss+")=1" {
		t.Errorf("top denied tools %v", tools)
	}
	if lw := b.text(t, "#live-writes"); !strings.HasPrefix(lw, "3 writes ran") {
		t.Errorf("live writes: %q", lw)
	}
	if rev := b.text(t, "#revision-rows"); !strings.Contains(rev, e.hash[:12]) {
		t.Errorf("revisions: %q", rev)
	}
	if h := b.text(t, "#health-rows"); !strings.Contains(h, decisionlog.DefaultPartition) {
		t.Errorf("health: %q", h)
	}
	if w := b.text(t, "#writes"); !strings.Contains(w, "Write failures0") {
		t.Errorf("writes: %q", w)
	}
	b.screenshot(t, "overview")

	// A top principal's link opens the search filtered to it.
	b.do(t, "follow a top principal", chromedp.Click(chromedp.CSS(`#top-principals li a`)))
	b.afterNavigation(t, `location.pathname.endsWith('/ui/') && document.querySelectorAll('#rows tr').length > 0`)
	var shownPrincipals []string
	b.eval(t, `Array.from(document.querySelectorAll('#rows tr td:nth-child(3)')).map(td => td.textContent)`, &shownPrincipals)
	if len(shownPrincipals) != 4 || slices.ContainsFunc(shownPrincipals, func(p string) bool { return p != "user:dave" }) {
		t.Errorf("the search from the overview shows %v", shownPrincipals)
	}
	b.clean(t)
}

// TestDecisionPageInBrowser: a denied decision shows its rule with its description and the
// policy file:line it comes from, its place in the chain; its neighbour links filter the search
// by its principal, agent and tool.
func TestDecisionPageInBrowser(t *testing.T) {
	b := newBrowser(t)
	e := newEnv(t, true)
	e.seed()
	e.seed()
	denied := e.ids["denied"]
	b.signIn(t, e.srv.URL+"/ui/decision.html#"+denied, `document.querySelectorAll('#rule-rows tr[data-rule]').length > 0`)
	if got := b.text(t, "#d-id"); got != denied {
		t.Errorf("page of %q", got)
	}
	row := `#rule-rows tr[data-rule="lush.privilege.no_grant"][data-roles="decided reason"]`
	var cells []string
	b.eval(t, `Array.from(document.querySelectorAll('`+row+` td')).map(td => td.textContent)`, &cells)
	ctx := e.contextOf(denied)
	var want *audithttp.DecidingRule
	for i := range ctx.Rules {
		if ctx.Rules[i].ID == "lush.privilege.no_grant" {
			want = &ctx.Rules[i]
		}
	}
	if want == nil || len(cells) != 5 || cells[0] != "lush.privilege.no_grant" || !strings.HasPrefix(cells[2], "No tool grant") ||
		!strings.Contains(cells[2], "tool_grant") || cells[3] != fmt.Sprintf("/lush/authz/tools.rego:%d", want.Line) ||
		!strings.Contains(cells[4], "user:dave") {
		t.Errorf("the denial's rule row: %q (API: %+v)", cells, want)
	}
	if s := b.text(t, "#summary"); !strings.Contains(s, "Outcomedeny") || !strings.Contains(s, "Principaluser:dave") {
		t.Errorf("summary: %q", s)
	}
	if c := b.text(t, "#chain"); !strings.Contains(c, fmt.Sprintf("Position%d", ctx.Chain.Entry.Pos)) || !strings.Contains(c, ctx.Chain.Entry.Hash) {
		t.Errorf("chain: %q", c)
	}
	if in := b.text(t, "#input"); !strings.Contains(in, `"salaries"`) {
		t.Errorf("input: %q", in)
	}
	b.screenshot(t, "decision")

	// The neighbour links filter the search.
	for _, tc := range []struct {
		text, column, value string
		filter              decisionlog.Filter
	}{
		{"Decisions of user:dave", "3", "user:dave", decisionlog.Filter{Principal: "user:dave"}},
		{"Decisions about agent researcher", "4", "researcher", decisionlog.Filter{Agent: "researcher"}},
		{"Decisions about tool " + notes, "5", notes, decisionlog.Filter{Tool: notes}},
	} {
		b.do(t, "open "+tc.text, chromedp.Navigate(e.srv.URL+"/ui/decision.html#"+denied), poll(`document.querySelectorAll('#neighbours a').length === 4`))
		var href string
		b.eval(t, `Array.from(document.querySelectorAll('#neighbours a')).find(a => a.textContent === '`+tc.text+`').href`, &href)
		b.do(t, "follow "+tc.text, chromedp.Navigate(href), poll(`document.querySelectorAll('#rows tr').length > 0 && document.getElementById('status').textContent.includes('shown')`))
		var col []string
		b.eval(t, `Array.from(document.querySelectorAll('#rows tr td:nth-child(`+tc.column+`)')).map(td => td.textContent)`, &col)
		e.sync()
		tc.filter.Limit = 100
		tc.filter.Until = time.Now().Add(time.Hour)
		recs, err := e.log.Query(context.Background(), tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		// The log now also holds this page's own reads (audit/read by zoe, no agent or tool); the
		// search shows the log as it was before its own read.
		if len(col) == 0 || len(col) > len(recs) || slices.ContainsFunc(col, func(v string) bool { return !strings.HasPrefix(v, tc.value) }) {
			t.Errorf("%s: column %v (the log holds %d)", tc.text, col, len(recs))
		}
	}
	// A decision with the XSS-looking argument stays text.
	b.do(t, "open the live write", chromedp.Navigate(e.srv.URL+"/ui/decision.html#"+e.ids["live"]),
		poll(`document.getElementById('input').textContent.includes('onerror')`))
	b.clean(t)
}

// TestTracePageInBrowser: a seeded trace with a child invocation renders as a waterfall: the
// child invocation nests under the tool call and gateway call that made it, bars are
// proportional to start and duration, and a tool call's row links to its decision.
func TestTracePageInBrowser(t *testing.T) {
	b := newBrowser(t)
	e := newEnv(t, true)
	e.seed()
	traceID, parentCall, childCall := e.seedTrace()
	b.signIn(t, e.srv.URL+"/ui/trace.html#"+traceID, `document.querySelectorAll('#steps tr').length === 8`)
	var rows []string
	b.eval(t, `Array.from(document.querySelectorAll('#steps tr')).map(tr => tr.dataset.depth + ' ' + tr.dataset.kind + ' ' +
		tr.querySelector('.name').textContent.trim() + ' @' + tr.querySelector('rect').dataset.offset + '+' + tr.querySelector('rect').dataset.width)`, &rows)
	want := []string{
		"0 invocation invoke_agent orchestrator @0.000+100.000",
		"1 model turn chat gemini-2.5-flash @0.000+25.000",
		"1 tool call tool researcher @25.000+52.500",
		"2 gateway call tools/call researcher @27.500+48.750",
		"3 invocation invoke_agent researcher @30.000+45.000",
		"4 model turn chat gemini-2.5-flash @30.000+25.000",
		"4 tool call tool " + xss + " @55.000+10.000",
		"1 model turn chat gemini-2.5-flash @77.500+22.500",
	}
	if !slices.Equal(rows, want) {
		t.Errorf("waterfall:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	var links []string
	b.eval(t, `Array.from(document.querySelectorAll('#steps a.decision-link')).map(a => a.getAttribute('href') + '=' + a.textContent)`, &links)
	if !slices.Contains(links, "decision.html#"+parentCall+"=allow") || !slices.Contains(links, "decision.html#"+childCall+"=deny") {
		t.Errorf("decision links %v", links)
	}
	if s := b.text(t, "#t-summary"); !strings.Contains(s, "Agentorchestrator") || !strings.Contains(s, "Tokens in / out300 / 40") {
		t.Errorf("summary %q", s)
	}
	b.screenshot(t, "trace")
	// Keyboard: the tool call's decision link is focusable and opens the decision.
	b.do(t, "open the tool call's decision", chromedp.Focus(chromedp.CSS(`#steps a.decision-link[href="decision.html#`+parentCall+`"]`)),
		chromedp.KeyEvent(kb.Enter))
	b.afterNavigation(t, `document.getElementById('d-id') !== null && document.getElementById('d-id').textContent === '`+parentCall+`'`)
	b.clean(t)
}

// contextOf reads GET /audit/decisions/{id}/context as carol.
func (e *env) contextOf(id string) audithttp.DecisionContext {
	e.t.Helper()
	resp, body := e.get("/audit/decisions/"+id+"/context", carolKey)
	var c audithttp.DecisionContext
	if resp.StatusCode != 200 || json.Unmarshal(body, &c) != nil {
		e.t.Fatalf("context of %s: %d %s", id, resp.StatusCode, body)
	}
	return c
}
