package approvalhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// PagePath is the path of the page of one approval: the URL an in-band approval request points
// the caller's client at (the gateway prefixes it with its public base URL).
func PagePath(id string) string { return "/approvals/" + url.PathEscape(id) + "/page" }

// pageData is what the approval page shows.
type pageData struct {
	ID, Status, Tool, ToolName, Principal, Agent string
	Created, Expires, DecidedAt                  string
	DecidedBy, Note, UsedBy                      string
	Reasons                                      []authz.Reason
	Arguments                                    string
	Pending                                      bool
}

// page shows one approval as HTML: the call (tool, arguments as the decision log holds them,
// masked by the policy, the principal and agent), why the policy asks, its state, and for a
// pending one a form to approve or deny it. It is read behind an approval/read decision, as
// GET /approvals/{id} is.
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if len(id) > maxIDLen {
		writePage(w, http.StatusBadRequest, "The approval id is too long: use the id lushctl approvals list shows.", nil)
		return
	}
	v, _ := s.pageGate.Authorize(w, r, authz.Input{Action: authz.ActionApprovalRead,
		Arguments: map[string]any{"route": "GET /approvals/{id}/page", "approval": id}}, "reading approvals")
	if v == nil {
		return
	}
	start := time.Now()
	ap, err := s.cfg.Store.Get(r.Context(), id)
	switch {
	case errors.Is(err, decisionlog.ErrNoApproval):
		v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
		writePage(w, http.StatusNotFound, fmt.Sprintf("There is no approval %q.", id), nil)
		return
	case err != nil:
		s.cfg.Logger.Error("approvals page: the store failed", "decision_id", v.ID, "error", err)
		v.Complete(decisionlog.StatusError, time.Since(start), nil, err.Error())
		writePage(w, http.StatusServiceUnavailable, fmt.Sprintf("The approvals store cannot be used (decision %s); try again.", v.ID), nil)
		return
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	writePage(w, http.StatusOK, "", s.pageData(r, ap))
}

// decidePage takes the page's form (decision=approve|deny, reason) and decides the approval as
// POST /approvals/{id} does, behind the same approval/decide decision; then it shows the page
// again (303 See Other). Only a form sent from the page's own origin is taken: a browser's
// credentials (a proxy's session, dev mode) must not let another site decide approvals.
func (s *Server) decidePage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if len(id) > maxIDLen {
		writePage(w, http.StatusBadRequest, "The approval id is too long: use the id lushctl approvals list shows.", nil)
		return
	}
	if !sameOrigin(r) {
		writePage(w, http.StatusForbidden, "The form was not sent from this server's approval page (Origin, Referer or Sec-Fetch-Site say otherwise): open the page and decide there.", nil)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		writePage(w, http.StatusBadRequest, "The form could not be read: send decision=approve or deny and a reason, at most 16 KiB.", nil)
		return
	}
	body := Decision{Decision: r.PostForm.Get("decision"), Reason: r.PostForm.Get("reason")}
	if msg := body.problem(); msg != "" {
		writePage(w, http.StatusBadRequest, "The form is not right: "+msg+".", nil)
		return
	}
	res, ok := s.decideOne(w, r, s.pageGate, id, body, "POST /approvals/{id}/page")
	if !ok {
		return
	}
	switch res.status {
	case http.StatusOK, http.StatusConflict: // the page says what the approval is now
		// Relative, so that it holds under a proxy's path prefix too.
		w.Header().Set("Location", "page")
		w.WriteHeader(http.StatusSeeOther)
	default:
		writePage(w, res.status, res.message, nil)
	}
}

// writePageRefusal answers a request the gate does not let in to the page as a page: what is
// wrong (its code), the decision and the policy's reasons, and, without credentials, how else
// the approval can be decided.
func writePageRefusal(w http.ResponseWriter, r policyhttp.Refusal) {
	msg := fmt.Sprintf("Refused (%s): %s", r.Code, r.Message)
	if r.Verdict != nil {
		msg += fmt.Sprintf(" Decision %s.", r.Verdict.ID)
		for _, reason := range r.Reasons {
			msg += fmt.Sprintf(" %s: %s.", reason.Rule, reason.Message)
		}
	}
	if r.Status == http.StatusUnauthorized {
		msg += " Open the page through the proxy that signs you in, or decide with lushctl approvals (--token), or at /ui/approvals.html with a bearer token."
	}
	writePage(w, r.Status, msg, nil)
}

// sameOrigin reports whether a form POST comes from a page of this server: Sec-Fetch-Site
// (sent by every current browser) says so, or else its Origin or Referer names this host.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	from := r.Header.Get("Origin")
	if from == "" || from == "null" {
		from = r.Header.Get("Referer")
	}
	u, err := url.Parse(from)
	return from != "" && err == nil && u.Host != "" && u.Host == r.Host
}

func (s *Server) pageData(r *http.Request, ap decisionlog.Approval) *pageData {
	d := &pageData{ID: ap.ID, Status: ap.Status, Tool: approval.ToolLabel(ap), ToolName: ap.ToolName, Principal: ap.Principal,
		Agent: ap.Agent, Created: ap.Created.UTC().Format(time.RFC3339), Expires: ap.Expires.UTC().Format(time.RFC3339),
		DecidedBy: ap.DecidedBy, Note: ap.Note, UsedBy: ap.UsedBy, Pending: ap.Status == decisionlog.ApprovalPending}
	if ap.DecidedAt != nil {
		d.DecidedAt = ap.DecidedAt.UTC().Format(time.RFC3339)
	}
	json.Unmarshal(ap.Reasons, &d.Reasons)
	if args := s.arguments(r.Context(), ap.ID); len(args) > 0 {
		var out bytes.Buffer
		if json.Indent(&out, args, "", "  ") == nil {
			d.Arguments = out.String()
		}
	}
	return d
}

// writePage answers with the page: an approval (d), or a message alone.
func writePage(w http.ResponseWriter, status int, message string, d *pageData) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "same-origin")
	var out bytes.Buffer
	if err := pageTemplate.Execute(&out, struct {
		Message string
		A       *pageData
	}{message, d}); err != nil {
		policyhttp.WriteError(w, http.StatusInternalServerError, "internal", "the approval page could not be rendered")
		return
	}
	w.WriteHeader(status)
	w.Write(out.Bytes())
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{if .A}}Approval {{.A.ID}}{{else}}Approval{{end}} · Lush</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;max-width:48rem;margin:2rem auto;padding:0 1rem;color:#222}
dt{font-weight:600;margin-top:.5rem}dd{margin:0 0 0 1rem}
pre{background:#f4f4f4;padding:.75rem;overflow:auto}.status{padding:.1rem .4rem;border-radius:.3rem;background:#eee}
.pending{background:#fff3c4}.approved,.consumed{background:#d7f5d7}.denied,.expired{background:#f8d4d4}
form{margin-top:1.5rem}input[type=text]{width:100%;box-sizing:border-box;padding:.4rem}button{margin:.75rem .5rem 0 0;padding:.4rem 1.2rem}
</style></head><body>
{{with .Message}}<p class="message" role="alert">{{.}}</p>{{end}}
{{with .A}}
<h1>Approval <code>{{.ID}}</code> <span class="status {{.Status}}" id="status">{{.Status}}</span></h1>
<p><strong>{{.Principal}}</strong> wants agent <strong>{{.Agent}}</strong> to call <code>{{.Tool}}</code>.</p>
<dl>
<dt>Tool</dt><dd><code>{{.Tool}}</code>{{with .ToolName}} (MCP tool <code>{{.}}</code>){{end}}</dd>
<dt>Principal</dt><dd>{{.Principal}}</dd>
<dt>Agent</dt><dd>{{.Agent}}</dd>
<dt>Asked (UTC)</dt><dd>{{.Created}}</dd>
<dt>Can be decided until (UTC)</dt><dd>{{.Expires}}</dd>
{{with .DecidedBy}}<dt>Decided by</dt><dd id="decided-by">{{.}}</dd>{{end}}
{{with .DecidedAt}}<dt>Decided (UTC)</dt><dd>{{.}}</dd>{{end}}
{{with .Note}}<dt>Reason given</dt><dd>{{.}}</dd>{{end}}
{{with .UsedBy}}<dt>Ran as decision</dt><dd>{{.}}</dd>{{end}}
</dl>
<h2>Why it needs approval</h2>
<ul>{{range .Reasons}}<li><code>{{.Rule}}</code>: {{.Message}}</li>{{end}}</ul>
<h2>Arguments</h2>
<p>As the decision log holds them: what the policy masks is not shown.</p>
<pre id="arguments">{{if .Arguments}}{{.Arguments}}{{else}}(not available){{end}}</pre>
{{if .Pending}}
<form method="post" autocomplete="off">
<label>Reason (kept in the decision log; a denial's reason is shown to the model)<br>
<input type="text" name="reason" maxlength="2000"></label>
<button type="submit" name="decision" value="approve">Approve</button>
<button type="submit" name="decision" value="deny">Deny</button>
</form>
<p>Only a holder of the approve role who did not make the call can decide it; the call runs once, exactly as shown.</p>
{{end}}
{{end}}
</body></html>
`))
