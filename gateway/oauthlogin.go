package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/vault"
	"github.com/lush-agents/lush/vault/oauth"
)

// The authorization code flow served by the gateway (docs/credentials.md): a person who was
// denied for want of a grant opens GET /oauth/login?server=<ref>, authenticated as the principal
// the grant is for; the gateway redirects to the upstream's authorization server (PKCE), and
// GET /oauth/callback stores the grant. The state is bound to the principal and the server,
// single-use and expires after loginTTL; pending logins live in this process (a replica that did
// not start a login refuses its callback, saying to start again).

const (
	loginTTL        = 10 * time.Minute
	maxPendingLogin = 1000
)

// pendingLogin is a login waiting for its callback.
type pendingLogin struct {
	server, principal string
	groups            []string
	login             *oauth.Login
	expires           time.Time
}

// logins are the pending logins of the process, by state.
type logins struct {
	mu      sync.Mutex
	pending map[string]pendingLogin
}

func (l *logins) put(state string, p pendingLogin) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[string]pendingLogin{}
	}
	now := time.Now()
	for k, v := range l.pending {
		if now.After(v.expires) {
			delete(l.pending, k)
		}
	}
	if len(l.pending) >= maxPendingLogin {
		return false
	}
	l.pending[state] = p
	return true
}

// take removes and returns the login of state: a state is used once.
func (l *logins) take(state string) (pendingLogin, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.pending[state]
	delete(l.pending, state)
	if ok && time.Now().After(p.expires) {
		return pendingLogin{}, false
	}
	return p, ok
}

// oauthLogin starts the authorization code flow for the authenticated caller on ?server=.
func (g *Gateway) oauthLogin(w http.ResponseWriter, r *http.Request) {
	oc := g.broker.OAuth()
	if oc.RedirectURL() == "" {
		writeError(w, http.StatusNotFound, "this gateway does not serve OAuth logins: set credentials.oauth.redirect_url in its config (docs/credentials.md)")
		return
	}
	caller := identity.CallerFrom(r.Context())
	server := r.URL.Query().Get("server")
	s := g.state.Load()
	if s == nil {
		writeError(w, http.StatusServiceUnavailable, "no build is deployed yet")
		return
	}
	d, ok := vault.Declaration(s.manifest.Credentials, server, caller.ID, caller.Groups)
	if !ok || d.Type != vault.TypeOAuth || d.Flow != oauth.FlowAuthorizationCode {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("server=%q: the deployed build declares no oauth credential with flow authorization_code for %s on it", server, caller.ID))
		return
	}
	req := vault.OAuthRequest(*d, vault.Request{Tool: server, Principal: caller.ID})
	if t, ok := s.manifest.Tool(server); ok && t.Remote != nil {
		req.URL = t.Remote.URL
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	login, err := oc.StartLogin(ctx, req, oc.RedirectURL())
	if err != nil {
		writeError(w, http.StatusBadGateway, "start the login: "+reasonOf(err))
		return
	}
	if !g.logins.put(login.State, pendingLogin{server: server, principal: caller.ID, groups: caller.Groups, login: login, expires: time.Now().Add(loginTTL)}) {
		writeError(w, http.StatusServiceUnavailable, "too many logins are pending; try again in a few minutes")
		return
	}
	http.Redirect(w, r, login.URL, http.StatusFound)
}

// oauthCallback finishes a login: the state names it (once), the code becomes the grant.
func (g *Gateway) oauthCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, ok := g.logins.take(q.Get("state"))
	if !ok {
		http.Error(w, "this login is unknown, used or expired: open the login URL again", http.StatusBadRequest)
		return
	}
	if e := q.Get("error"); e != "" {
		http.Error(w, fmt.Sprintf("the authorization server did not grant access (%s): open the login URL again", bounded(e+" "+q.Get("error_description"), 200)), http.StatusForbidden)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	grant, err := p.login.Finish(ctx, q.Get("code"))
	if err != nil {
		http.Error(w, "the code could not be exchanged: "+reasonOf(err), http.StatusBadGateway)
		return
	}
	s := g.state.Load()
	if s == nil {
		http.Error(w, "no build is deployed", http.StatusServiceUnavailable)
		return
	}
	if err := g.broker.StoreGrant(ctx, vault.Request{Project: s.manifest.Project, Tool: p.server, Principal: p.principal, Groups: p.groups,
		Declared: s.manifest.Credentials}, grant); err != nil {
		g.opts.Logger.Error("store an OAuth grant", "server", p.server, "principal", p.principal, "err", err)
		http.Error(w, "the grant could not be stored (the operator can find why in the gateway's log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "Access granted: Lush now calls %s as %s. You can close this window.\n", p.server, p.principal)
}

// reasonOf is what a caller may be told of an error: its Reason when it has one.
func reasonOf(err error) string {
	if r, ok := err.(interface{ Reason() string }); ok {
		return r.Reason()
	}
	return err.Error()
}
