package audithttp_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/lush-agents/lush/audit/audithttp"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// chromium finds the browser for the UI test. Without one the test fails on CI (CI=true) and is
// skipped elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LUSH_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	msg := "chromium is missing (looked at $LUSH_CHROMIUM, /usr/bin/chromium and $PATH): `make chromium` installs Debian's chromium"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium with a fresh profile and no network of its own, and returns
// a context of one tab. Console messages (exceptions, CSP violations) and dialogs are collected.
type browser struct {
	ctx     context.Context
	mu      sync.Mutex
	console []string
	dialogs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // start the browser without a deadline
		t.Fatalf("start chromium: %v", err)
	}
	b := &browser{ctx: ctx}
	messages := chromedp.Console(ctx)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, string(m.Type)+": "+m.Text)
			b.mu.Unlock()
		}
	}()
	go func() {
		for d, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, string(d.Type)+": "+d.Message)
			b.mu.Unlock()
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return b
}

// do runs actions with a deadline, failing the test with what the page logged.
func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v\nconsole: %v", what, err, b.messages())
	}
}

func (b *browser) messages() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.console)
}

func (b *browser) dialogCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.dialogs)
}

func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func (b *browser) eval(t *testing.T, js string, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	switch o := out.(type) {
	case *[]string:
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](js))
		if err != nil {
			t.Fatalf("eval %s: %v", js, err)
		}
		*o = v
	case *int:
		v, err := chromedp.Run(ctx, chromedp.Evaluate[int](js))
		if err != nil {
			t.Fatalf("eval %s: %v", js, err)
		}
		*o = v
	case *string:
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("eval %s: %v", js, err)
		}
		*o = v
	}
}

// updateScreenshots rewrites the console's screenshots (docs/console/<page>.png): go test -update,
// or LUSH_UPDATE_SCREENSHOTS=1.
var updateScreenshots = flag.Bool("update", false, "rewrite the console's screenshots in docs/console")

// screenshot captures the page at the console's fixed viewport (1280×800) into
// docs/console/<page>.png when screenshots are being updated; otherwise it only checks that the
// file exists (a page added without its screenshot fails).
func (b *browser) screenshot(t *testing.T, page string) {
	t.Helper()
	path := filepath.Join("..", "..", "docs", "console", page+".png")
	if !*updateScreenshots && os.Getenv("LUSH_UPDATE_SCREENSHOTS") != "1" {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("the screenshot of %s is missing (%v): run go test ./audit/audithttp -run UI -update", page, err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot of %s: %v", page, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// poll waits until the JavaScript predicate holds.
func poll(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(8*time.Second))
}

// TestUIInBrowser drives the UI in headless Chromium against the real API: an auditor signs in
// with a token, filters, pages, opens a decision (input, rules, result, completion, trace), and
// the XSS-looking argument stays text; a non-auditor sees the 403 with its decision id.
func TestUIInBrowser(t *testing.T) {
	b := newBrowser(t)
	e := newEnv(t, true)
	for range 4 {
		e.seed() // 12 decisions about alice's calls, each third one a live write with the XSS argument
	}
	live := e.ids["live"]

	b.do(t, "open the UI", chromedp.Navigate(e.srv.URL+"/ui"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if loc, _ := chromedp.Run(b.ctx, chromedp.Location()); loc != e.srv.URL+"/ui/" {
		t.Errorf("location %s, want the /ui/ page", loc)
	}

	// An auditor signs in: the token goes to sessionStorage, not into the page or the URL.
	b.do(t, "sign in", chromedp.SendKeys(chromedp.CSS("#token"), zoeKey), chromedp.Click(chromedp.CSS("#token-save")),
		poll(`document.querySelectorAll('#rows tr').length > 0`))
	var stored string
	b.eval(t, `sessionStorage.getItem('lush.audit.token') + '|' + document.getElementById('token').value + '|' + location.href + '|' + localStorage.length`, &stored)
	if stored != zoeKey+"||"+e.srv.URL+"/ui/|0" {
		t.Errorf("token storage: %q", stored)
	}

	// Filter by principal, ten to a page, then page back with Older.
	b.do(t, "filter by principal",
		chromedp.SendKeys(chromedp.CSS("#f-principal"), "user:alice"),
		chromedp.SetValue(chromedp.CSS("#f-limit"), "10"),
		chromedp.Click(chromedp.CSS("#search")),
		poll(`document.querySelectorAll('#rows tr').length === 10 && !document.getElementById('older').hidden`))
	var principals []string
	b.eval(t, `Array.from(document.querySelectorAll('#rows tr td:nth-child(3)')).map(td => td.textContent)`, &principals)
	if len(principals) != 10 || slices.ContainsFunc(principals, func(p string) bool { return p != "user:alice" }) {
		t.Errorf("principals shown: %v", principals)
	}
	b.do(t, "older", chromedp.Click(chromedp.CSS("#older")),
		poll(`document.querySelectorAll('#rows tr').length === 12 && document.getElementById('older').hidden`))
	var shown []string
	b.eval(t, `Array.from(document.querySelectorAll('#rows tr')).map(tr => tr.dataset.id)`, &shown)
	want := e.page("/audit/decisions?principal=user:alice", carolKey)
	if !slices.Equal(shown, ids(want)) {
		t.Errorf("rows %v, want %v", shown, ids(want))
	}
	var cells []string
	b.eval(t, `Array.from(document.querySelectorAll('#rows tr[data-id="`+live+`"] td')).map(td => td.textContent)`, &cells)
	if len(cells) != 8 || cells[1] != "allow" || cells[2] != "user:alice" || cells[3] != "researcher" ||
		cells[4] != notes+" (post_note)" || cells[5] != "write" || cells[6] != "mcp-gateway" || cells[7] != live {
		t.Errorf("row of the live write: %q", cells)
	}

	// Open the live write: input, result, rules, completion, revision, and its trace's spans.
	b.do(t, "open a decision", chromedp.Click(chromedp.CSS(`#rows tr[data-id="`+live+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#detail")), poll(`!document.getElementById('d-spans').hidden`))
	if got := b.text(t, "#d-id"); got != live {
		t.Errorf("detail of %q, want %s", got, live)
	}
	input := b.text(t, "#d-input")
	if !strings.Contains(input, `"text": "`+xss+`"`) || !strings.Contains(input, `"action": "tools/call"`) {
		t.Errorf("input pane:\n%s", input)
	}
	if rules := b.text(t, "#d-rules"); !strings.Contains(rules, "lush.acl.agent_execute") || !strings.Contains(rules, "lush.writes.live") {
		t.Errorf("rules pane: %q", rules)
	}
	if result := b.text(t, "#d-result"); !strings.Contains(result, `"outcome": "allow"`) {
		t.Errorf("result pane:\n%s", result)
	}
	if c := b.text(t, "#d-completion"); !strings.Contains(c, "Status") || !strings.Contains(c, "ok") || !strings.Contains(c, "12.000 ms") {
		t.Errorf("completion pane: %q", c)
	}
	if r := b.text(t, "#d-response"); !strings.Contains(r, "posted") {
		t.Errorf("response: %q", r)
	}
	rec := e.record(live)
	if s := b.text(t, "#d-summary"); !strings.Contains(s, "Bundle revision"+e.hash) || !strings.Contains(s, "Enforcement pointmcp-gateway") {
		t.Errorf("summary: %q", s)
	}
	if tr := b.text(t, "#d-trace"); !strings.Contains(tr, rec.Event.TraceID) || !strings.Contains(tr, "1 span") {
		t.Errorf("trace: %q", tr)
	}
	if spans := b.text(t, "#d-span-rows"); !strings.Contains(spans, "invoke_agent researcher") {
		t.Errorf("spans: %q", spans)
	}

	// The XSS-looking argument is text: no element was made of it, no dialog opened.
	var imgs int
	b.eval(t, `document.querySelectorAll('img, [onerror]').length`, &imgs)
	var markup string
	b.eval(t, `document.getElementById('d-input').innerHTML`, &markup)
	if imgs != 0 || !strings.Contains(markup, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Errorf("the argument became markup: %d elements, pane %q", imgs, markup)
	}
	// A deep link (#<id>) opens the decision on load.
	b.do(t, "deep link", chromedp.Navigate("about:blank"), chromedp.Navigate(e.srv.URL+"/ui/#"+e.ids["denied"]), chromedp.WaitVisible(chromedp.CSS("#detail")),
		poll(`document.getElementById('d-id').textContent === '`+e.ids["denied"]+`'`))
	if r := b.text(t, "#d-reasons"); !strings.Contains(r, "lush.privilege.no_grant") {
		t.Errorf("reasons of the denial: %q", r)
	}
	if c := b.text(t, "#d-completion"); !strings.Contains(c, "No completion") {
		t.Errorf("completion of a denial: %q", c)
	}

	// A bad parameter shows the API's message.
	b.do(t, "bad since", chromedp.SetValue(chromedp.CSS("#f-since"), "yesterday"), chromedp.Click(chromedp.CSS("#search")),
		poll(`!document.getElementById('error').hidden`))
	if msg := b.text(t, "#error"); !strings.Contains(msg, "400 bad_request") || !strings.Contains(msg, "param since:") {
		t.Errorf("error for since=yesterday: %q", msg)
	}

	// A non-auditor's token: 403, with the id of the decision that refused it.
	b.do(t, "sign in as alice",
		chromedp.Clear(chromedp.CSS("#f-since")),
		chromedp.Click(chromedp.CSS("#token-clear")),
		chromedp.SendKeys(chromedp.CSS("#token"), aliceKey), chromedp.Click(chromedp.CSS("#token-save")),
		poll(`!document.getElementById('error').hidden && document.querySelector('#error .error-decision') !== null`))
	msg := b.text(t, "#error")
	id := b.text(t, "#error .error-decision")
	if !strings.Contains(msg, "403 forbidden") || !strings.Contains(msg, "principal user:alice may not read the decision log") {
		t.Errorf("403 shown as %q", msg)
	}
	if ev := e.record(id).Event; ev.Action != audithttp.ActionRead || ev.Outcome != "deny" || ev.Principal != "user:alice" {
		t.Errorf("the refusal shown (%s) is logged as %+v", id, ev)
	}

	// Without a token: 401 with what to do.
	b.do(t, "no token", chromedp.Click(chromedp.CSS("#token-clear")), chromedp.Click(chromedp.CSS("#search")),
		poll(`document.getElementById('error').textContent.includes('401')`))
	if msg := b.text(t, "#error"); !strings.Contains(msg, "unauthenticated") || !strings.Contains(msg, "audit role") {
		t.Errorf("401 shown as %q", msg)
	}

	if n := b.dialogCount(); n != 0 {
		t.Errorf("%d dialogs opened: %v", n, b.dialogs)
	}
	for _, m := range b.messages() {
		// The 4xx answers (and /favicon.ico) are logged by the browser as failed loads; anything
		// else above debug level (an exception, a CSP violation) is a bug.
		if !strings.HasPrefix(m, "debug: ") && !strings.Contains(m, "Failed to load resource") {
			t.Errorf("console: %s", m)
		}
	}
}

// TestApprovalsUIInBrowser drives the approvals page in headless Chromium against the real
// approvals API: an approver sees the waiting call with its logged arguments (as text) and why
// it waits, and approves it with a reason; an auditor may look but not decide; others are
// refused with the decision's id.
func TestApprovalsUIInBrowser(t *testing.T) {
	b := newBrowser(t)
	e := newEnv(t, true)
	e.seed()
	live := e.ids["live"] // alice's post_note with the XSS-looking argument: the call that waits
	now := time.Now().UTC()
	if err := e.approvals.Create(context.Background(), decisionlog.Approval{ID: live, Created: now, Expires: now.Add(time.Hour), Digest: "d",
		Principal: "user:alice", Agent: "researcher", Tool: notes, ToolName: "post_note",
		Reasons: json.RawMessage(`[{"rule":"lush.approval.risk","message":"post_note is classed destructive risk"}]`)}); err != nil {
		t.Fatal(err)
	}

	b.do(t, "open the approvals page", chromedp.Navigate(e.srv.URL+"/ui/approvals.html"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), samKey), chromedp.Click(chromedp.CSS("#token-save")),
		poll(`document.querySelectorAll('article.approval').length === 1`))
	card := b.text(t, "article.approval")
	for _, want := range []string{"pending", live, notes + " (post_note)", "user:alice", "researcher", "lush.approval.risk: post_note is classed destructive risk", xss} {
		if !strings.Contains(card, want) {
			t.Errorf("the approval's card lacks %q:\n%s", want, card)
		}
	}
	var imgs int
	b.eval(t, `document.querySelectorAll('img, [onerror]').length`, &imgs)
	if imgs != 0 {
		t.Errorf("the argument became markup: %d elements", imgs)
	}

	b.do(t, "approve", chromedp.SendKeys(chromedp.CSS("input.reason"), "ticket OPS-7"), chromedp.Click(chromedp.CSS("button.approve")),
		poll(`document.getElementById('status').textContent.includes('approved')`))
	ap, err := e.approvals.Get(context.Background(), live)
	if err != nil || ap.Status != decisionlog.ApprovalApproved || ap.DecidedBy != "user:sam" || ap.Note != "ticket OPS-7" {
		t.Errorf("after Approve: %+v %v", ap, err)
	}
	var cards int
	b.eval(t, `document.querySelectorAll('article.approval').length`, &cards)
	if cards != 0 {
		t.Errorf("%d pending approvals still shown", cards)
	}

	// An auditor sees approved ones but may not decide; alice may not look.
	b.do(t, "as an auditor", chromedp.Click(chromedp.CSS("#token-clear")), chromedp.SendKeys(chromedp.CSS("#token"), zoeKey),
		chromedp.SetValue(chromedp.CSS("#f-status"), "approved"), chromedp.Click(chromedp.CSS("#token-save")),
		poll(`document.querySelectorAll('article.approval').length === 1`))
	if card := b.text(t, "article.approval"); !strings.Contains(card, "user:sam") || !strings.Contains(card, "ticket OPS-7") {
		t.Errorf("the approved card: %s", card)
	}
	b.do(t, "as alice", chromedp.Click(chromedp.CSS("#token-clear")), chromedp.SendKeys(chromedp.CSS("#token"), aliceKey),
		chromedp.Click(chromedp.CSS("#token-save")), poll(`document.querySelector('#error .error-decision') !== null`))
	if msg := b.text(t, "#error"); !strings.Contains(msg, "403 forbidden") || !strings.Contains(msg, "may not read approvals") {
		t.Errorf("403 shown as %q", msg)
	}
	if n := b.dialogCount(); n != 0 {
		t.Errorf("%d dialogs opened: %v", n, b.dialogs)
	}
	for _, m := range b.messages() {
		if !strings.HasPrefix(m, "debug: ") && !strings.Contains(m, "Failed to load resource") {
			t.Errorf("console: %s", m)
		}
	}
}
