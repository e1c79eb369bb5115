package audithttp_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/lush-agents/lush/policies/authz"
)

// consoleBEnv is a browser and a served audit API with the kept builds (base deployed and
// serving, candidate), the seeded calls, and a call by xssPrincipal of a tool named xss (denied
// under the base build, stubbed under the candidate).
func consoleBEnv(t *testing.T) (*browser, *env, keptBuilds) {
	t.Helper()
	b := newBrowser(t)
	e, k := newBuildsEnv(t)
	e.seed()
	e.call("xss", authz.Principal{ID: xssPrincipal, Groups: []string{}}, xss, map[string]any{"text": xss}, false)
	e.sync()
	b.do(t, "viewport", chromedp.EmulateViewport(1280, 800))
	return b, e, k
}

// signIn opens page and keeps zoe's (an auditor's) token for the tab; ready is a predicate that
// holds once the page has loaded its data.
func signIn(t *testing.T, b *browser, e *env, page, ready string) {
	t.Helper()
	b.do(t, "open "+page, chromedp.Navigate(e.srv.URL+"/ui/"+page), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), zoeKey), chromedp.Click(chromedp.CSS("#token-save")), poll(ready))
}

// pick chooses value in the select sel as a person does: the change event fires.
func pick(sel, value string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector(` + jsString(sel) + `); s.value = ` + jsString(value) +
		`; s.dispatchEvent(new Event('change', {bubbles: true})); })()`)
}

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}

// checkPage asserts what every console page owes: the logged markup stayed text (no element
// made of it, no dialog), nothing but this origin was asked for (so the bearer token went
// nowhere else), and nothing above debug level was logged but failed loads.
func checkPage(t *testing.T, b *browser, e *env) {
	t.Helper()
	var imgs int
	b.eval(t, `document.querySelectorAll('img, [onerror]').length`, &imgs)
	if imgs != 0 {
		t.Errorf("logged markup became %d elements", imgs)
	}
	if n := b.dialogCount(); n != 0 {
		t.Errorf("%d dialogs opened: %v", n, b.dialogs)
	}
	var urls []string
	b.eval(t, `performance.getEntriesByType('resource').map(e => e.name).concat([location.href])`, &urls)
	for _, u := range urls {
		if !strings.HasPrefix(u, e.srv.URL+"/") {
			t.Errorf("the page asked for %s, not of its own origin %s", u, e.srv.URL)
		}
	}
	for _, m := range b.messages() {
		if !strings.HasPrefix(m, "debug: ") && !strings.Contains(m, "Failed to load resource") {
			t.Errorf("console: %s", m)
		}
	}
}

// screenshot writes docs/console/<name>.png from the page at the fixed viewport when the test
// runs with LUSH_UPDATE_SCREENSHOTS=1 (or -update, where a test of the package defines it);
// otherwise it only checks that the file exists.
func screenshot(t *testing.T, b *browser, name string) {
	t.Helper()
	path := filepath.Join("..", "..", "docs", "console", name+".png")
	update := os.Getenv("LUSH_UPDATE_SCREENSHOTS") == "1"
	if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" {
		update = true
	}
	if !update {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("no screenshot %s (LUSH_UPDATE_SCREENSHOTS=1 go test -run %s ./audit/audithttp writes it): %v", path, t.Name(), err)
		}
		return
	}
	data, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGraphUIInBrowser: the graph of the candidate build shows dave's path (dave → researcher →
// the notes server, search_notes, read, with dave's ACL entry and grant), selected by keyboard;
// carol, who holds only the audit role, reaches nothing; the principal that is markup stays text.
func TestGraphUIInBrowser(t *testing.T) {
	b, e, k := consoleBEnv(t)
	signIn(t, b, e, "graph.html", `document.querySelectorAll('#graph-svg g.node').length > 0`)
	if got := b.text(t, "#status"); !strings.Contains(got, "Build "+k.base[:12]) {
		t.Errorf("the serving build is not the one shown first: %q", got)
	}
	b.do(t, "the candidate build", pick("#build", k.candidate),
		poll(`document.querySelector('#graph-svg g.node[data-id="user:dave"]') !== null`))
	b.do(t, "select dave by keyboard", chromedp.Focus(chromedp.CSS(`#graph-svg g.node[data-id="user:dave"]`)), chromedp.KeyEvent(kb.Enter),
		poll(`document.querySelectorAll('#reach-rows tr').length > 0`))
	var cells []string
	b.eval(t, `Array.from(document.querySelectorAll('#reach-rows tr td')).map(td => td.textContent)`, &cells)
	if len(cells) != 5 || cells[0] != "researcher" || cells[1] != notes+" (search_notes)" || cells[2] != "read" || cells[3] != "allow" ||
		!strings.Contains(cells[4], "user:dave") {
		t.Errorf("dave reaches %q", cells)
	}
	var lit []string
	b.eval(t, `Array.from(document.querySelectorAll('#graph-svg .on')).map(e => e.dataset.kind + ':' + (e.dataset.id || e.dataset.from + '>' + e.dataset.to))`, &lit)
	want := []string{"invokes:user:dave>researcher", "uses:researcher>" + notes, "principal:user:dave", "agent:researcher", "tool:" + notes}
	for _, w := range want {
		if !strings.Contains(strings.Join(lit, "|"), w) {
			t.Errorf("the path is not lit: no %s in %v", w, lit)
		}
	}
	if got := b.text(t, "#principal option:checked"); got != "user:dave" {
		t.Errorf("the principal chosen: %q", got)
	}
	screenshot(t, b, "graph")

	b.do(t, "select carol", pick("#principal", "user:carol"), poll(`document.getElementById('reach-title').textContent === 'user:carol'`))
	if got := b.text(t, "#reach-summary"); !strings.Contains(got, "user:carol reaches nothing") || !strings.Contains(got, "audit/read") {
		t.Errorf("carol: %q", got)
	}
	var on int
	b.eval(t, `document.querySelectorAll('#graph-svg .node.kind-agent.on, #graph-svg path.on, #reach-rows tr').length`, &on)
	if on != 0 {
		t.Errorf("carol reaches %d things", on)
	}
	var label string
	b.eval(t, `document.querySelector('#graph-svg g.node[data-id="`+strings.ReplaceAll(xssPrincipal, `"`, `\"`)+`"] title').textContent`, &label)
	if label != "principal "+xssPrincipal {
		t.Errorf("the markup principal's node: %q", label)
	}
	checkPage(t, b, e)
}

// TestReviewUIInBrowser: the review of the candidate against the base highlights what it grants
// dave; the filter narrows the rows; the exported CSV is the API's.
func TestReviewUIInBrowser(t *testing.T) {
	b, e, k := consoleBEnv(t)
	signIn(t, b, e, "review.html", `document.querySelectorAll('#rows tr').length > 0`)
	b.do(t, "compare", pick("#build", k.candidate), pick("#diff", k.base), poll(`document.querySelectorAll('#rows tr.change-added').length > 0`))
	var all, added []string
	b.eval(t, `Array.from(document.querySelectorAll('#rows tr')).map(tr => Array.from(tr.cells).map(td => td.textContent).join('|'))`, &all)
	b.eval(t, `Array.from(document.querySelectorAll('#rows tr.change-added')).map(tr => Array.from(tr.cells).map(td => td.textContent).join('|'))`, &added)
	if !strings.Contains(strings.Join(added, "\n"), "+ added|user:dave|researcher|"+notes+" (search_notes)|read|allow|") {
		t.Errorf("dave's new read is not highlighted as added:\n%s", strings.Join(added, "\n"))
	}
	if !strings.Contains(strings.Join(all, "\n"), "|"+xssPrincipal+"|researcher|") {
		t.Errorf("no row of the markup principal:\n%s", strings.Join(all, "\n"))
	}
	screenshot(t, b, "review")

	b.do(t, "filter", chromedp.SendKeys(chromedp.CSS("#filter"), "user:dave"),
		poll(`Array.from(document.querySelectorAll('#rows tr')).every(tr => tr.cells[1].textContent === 'user:dave')`))
	var n int
	b.eval(t, `document.querySelectorAll('#rows tr').length`, &n)
	if n == 0 || n >= len(all) {
		t.Errorf("the filter shows %d of %d rows", n, len(all))
	}

	// The export: the Blob the page saves is the API's CSV of the same review.
	b.do(t, "export", chromedp.Evaluate[chromedp.Void](`(() => { window.csvSaved = null; const make = URL.createObjectURL;
		URL.createObjectURL = (blob) => { blob.text().then(t => { window.csvSaved = t; }); return make(blob); }; })()`),
		chromedp.Click(chromedp.CSS("#csv")), poll(`window.csvSaved !== null`))
	var saved string
	b.eval(t, `window.csvSaved`, &saved)
	_, api := e.do("GET", "/audit/builds/"+k.candidate+"/review?diff="+k.base, zoeKey, nil, map[string]string{"Accept": "text/csv"})
	if saved != string(api) || !bytes.HasPrefix(api, []byte("change,subject,")) {
		t.Errorf("the exported CSV differs from the API's:\n%s\n---\n%s", saved, api)
	}
	checkPage(t, b, e)
}

// TestReplayUIInBrowser: replaying the log under the candidate shows dave's denied search_notes
// flipping to allow (counted under dave), opened side by side by keyboard; the markup principal's
// and tool's flip is text.
func TestReplayUIInBrowser(t *testing.T) {
	b, e, k := consoleBEnv(t)
	denied := e.ids["denied"]
	signIn(t, b, e, "replay.html", `document.querySelectorAll('#build option').length === 2`)
	b.do(t, "replay", pick("#build", k.candidate), chromedp.Click(chromedp.CSS("#run")),
		poll(`document.querySelectorAll('#flips tr').length > 0`))
	var cells []string
	b.eval(t, `Array.from(document.querySelectorAll('#flips tr[data-id="`+denied+`"] td')).map(td => td.textContent)`, &cells)
	if len(cells) != 8 || cells[1] != "user:dave" || cells[2] != "researcher" || cells[4] != notes+" (search_notes)" || cells[5] != "deny" || cells[6] != "allow" {
		t.Errorf("dave's flip: %q", cells)
	}
	b.eval(t, `Array.from(document.querySelectorAll('#flips tr[data-id="`+e.ids["xss"]+`"] td')).map(td => td.textContent)`, &cells)
	if len(cells) != 8 || cells[1] != xssPrincipal || cells[4] != notes+" ("+xss+")" || cells[6] != "stub" {
		t.Errorf("the markup flip: %q", cells)
	}
	if got := b.text(t, "#by-principal"); !strings.Contains(got, "user:dave \u2014 1") {
		t.Errorf("by principal: %q", got)
	}
	if got := b.text(t, "#summary"); !strings.Contains(got, "2 would change") {
		t.Errorf("summary: %q", got)
	}
	b.do(t, "open by keyboard", chromedp.Focus(chromedp.CSS(`#flips tr[data-id="`+denied+`"]`)), chromedp.KeyEvent(kb.Enter),
		poll(`!document.getElementById('side-box').hidden`))
	logged := e.record(denied).Event
	if got := b.text(t, "#logged-outcome"); got != "deny" {
		t.Errorf("logged side: %q", got)
	}
	if got := b.text(t, "#logged-rules"); got != strings.Join(logged.Rules, ", ") {
		t.Errorf("logged rules %q, the log's %v", got, logged.Rules)
	}
	if got := b.text(t, "#cand-outcome"); got != "allow" {
		t.Errorf("candidate side: %q", got)
	}
	screenshot(t, b, "replay")

	// A principal without the audit role sees the refusal and the id of the decision that made it.
	b.do(t, "as alice", chromedp.Click(chromedp.CSS("#token-clear")), chromedp.SendKeys(chromedp.CSS("#token"), aliceKey),
		chromedp.Click(chromedp.CSS("#token-save")), poll(`document.querySelector('#error .error-decision') !== null`))
	if msg := b.text(t, "#error"); !strings.Contains(msg, "403 forbidden") || !strings.Contains(msg, "may not read the decision log") {
		t.Errorf("403 shown as %q", msg)
	}
	if ev := e.record(b.text(t, "#error .error-decision")).Event; ev.Outcome != "deny" || ev.Principal != "user:alice" || ev.Action != authz.ActionAuditRead {
		t.Errorf("the refusal is logged as %+v", ev)
	}
	checkPage(t, b, e)
}

// TestPlaygroundUIInBrowser: the playground started from the denied decision (#<id>) shows deny
// with the same rules as the log; the same call by a principal with a grant shows allow.
func TestPlaygroundUIInBrowser(t *testing.T) {
	b, e, _ := consoleBEnv(t)
	denied := e.ids["denied"]
	signIn(t, b, e, "playground.html", `document.querySelectorAll('#build option').length === 3`)
	b.do(t, "from the log", chromedp.Evaluate[chromedp.Void](`location.hash = '`+denied+`'`),
		poll(`!document.getElementById('result').hidden`))
	logged := e.record(denied).Event
	if got := b.text(t, "#r-outcome"); got != "deny" {
		t.Errorf("outcome %q", got)
	}
	if got := b.text(t, "#r-rules"); got != strings.Join(logged.Rules, ", ") {
		t.Errorf("rules %q, the log's %v", got, logged.Rules)
	}
	var principal, tool string
	b.eval(t, `document.getElementById('p-principal').value`, &principal)
	b.eval(t, `document.getElementById('p-tool-name').value`, &tool)
	if principal != "user:dave" || tool != "search_notes" {
		t.Errorf("the form holds %q %q", principal, tool)
	}
	if got := b.text(t, "#r-explanation"); !strings.Contains(got, "decision: DENY") || !strings.Contains(got, "✗ lush.privilege.no_grant") {
		t.Errorf("explanation:\n%s", got)
	}
	screenshot(t, b, "playground")

	b.do(t, "as alice", chromedp.Clear(chromedp.CSS("#p-principal")), chromedp.SendKeys(chromedp.CSS("#p-principal"), "user:alice"),
		chromedp.SendKeys(chromedp.CSS("#p-groups"), "group:eng"), chromedp.Click(chromedp.CSS("#evaluate")),
		poll(`document.getElementById('r-outcome').textContent === 'allow'`))
	if got := b.text(t, "#r-explanation"); !strings.Contains(got, "decision: ALLOW") || !strings.Contains(got, "user:alice (groups: group:eng)") {
		t.Errorf("explanation:\n%s", got)
	}
	// The markup call from the log: its tool name and arguments fill the form as text.
	b.do(t, "the markup call", chromedp.Evaluate[chromedp.Void](`location.hash = '`+e.ids["xss"]+`'`),
		poll(`document.getElementById('p-tool-name').value === `+jsString(xss)))
	checkPage(t, b, e)
}
