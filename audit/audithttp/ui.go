package audithttp

import (
	"embed"
	"net/http"
	"path"
)

// The web UI (the console): the decision log's search page, the approvals page, the overview, a
// decision's page, a trace's page, the graph, the access review, replay and the policy
// playground, their scripts (and the shell they share, lush.js) and the
// style sheet, served as they are (no build step).
//
//go:embed ui/index.html ui/app.js ui/app.css ui/lush.js ui/approvals.html ui/approvals.js
//go:embed ui/overview.html ui/overview.js ui/decision.html ui/decision.js ui/trace.html ui/trace.js
//go:embed ui/graph.html ui/graph.js ui/review.html ui/review.js ui/replay.html ui/replay.js ui/playground.html ui/playground.js ui/console-b.css
var uiFiles embed.FS

// ContentSecurityPolicy is the policy of every UI response: the page loads only its own script
// and style sheet (nothing inline, nothing from elsewhere) and talks only to its own origin.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var uiTypes = map[string]string{
	"index.html":     "text/html; charset=utf-8",
	"app.js":         "text/javascript; charset=utf-8",
	"app.css":        "text/css; charset=utf-8",
	"lush.js":        "text/javascript; charset=utf-8",
	"approvals.html": "text/html; charset=utf-8",
	"approvals.js":   "text/javascript; charset=utf-8",
	// console-a pages
	"overview.html": "text/html; charset=utf-8",
	"overview.js":   "text/javascript; charset=utf-8",
	"decision.html": "text/html; charset=utf-8",
	"decision.js":   "text/javascript; charset=utf-8",
	"trace.html":    "text/html; charset=utf-8",
	"trace.js":      "text/javascript; charset=utf-8",
	// console-b pages
	"graph.html": "text/html; charset=utf-8", "graph.js": "text/javascript; charset=utf-8",
	"review.html": "text/html; charset=utf-8", "review.js": "text/javascript; charset=utf-8",
	"replay.html": "text/html; charset=utf-8", "replay.js": "text/javascript; charset=utf-8",
	"playground.html": "text/html; charset=utf-8", "playground.js": "text/javascript; charset=utf-8",
	"console-b.css": "text/css; charset=utf-8",
}

// UI serves the web UI's static files: /ui/ (the decision log), /ui/approvals.html (approvals:
// the approvals API, approvalhttp, must be served beside it at /approvals), their scripts and
// style sheet; /ui redirects to /ui/. They hold no data, so they need no credentials: the page asks for a token
// and sends it with its requests to the API.
func UI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the UI is read-only: use GET", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == "/ui" {
			// Relative (http.Redirect would make it absolute), so that the UI also works behind a
			// proxy that serves it under a prefix.
			h.Set("Location", "ui/")
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		name := path.Base(r.URL.Path)
		if r.URL.Path == "/ui/" {
			name = "index.html"
		}
		ctype, ok := uiTypes[name]
		if !ok || r.URL.Path != "/ui/" && r.URL.Path != "/ui/"+name {
			http.Error(w, "not found: the UI is at /ui/", http.StatusNotFound)
			return
		}
		body, err := uiFiles.ReadFile("ui/" + name)
		if err != nil {
			http.Error(w, "the UI's files are missing from this build", http.StatusInternalServerError)
			return
		}
		h.Set("Content-Type", ctype)
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			w.Write(body)
		}
	})
}
