package oauth

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

// Authorization code with PKCE (flow authorization_code): a person grants Lush access to an
// upstream at the upstream's own authorization server once; the grant (access and refresh
// token) is stored (vault.File) and refreshed before the access token expires.

// Grant is what an authorization code or a refresh gives: the tokens of one principal at one
// upstream. AccessToken and RefreshToken are secret.
type Grant struct {
	AccessToken  string
	RefreshToken string // "" when the server issued none (ask for offline_access where needed)
	Expiry       time.Time
	Issuer       string
}

// Login is an authorization request in progress: send the person to URL, then Finish with the
// code the redirect brings, after checking its state.
type Login struct {
	URL   string // where the person grants access
	State string // what the redirect must carry back

	c        *Client
	conf     *oauth2.Config
	verifier string
	params   []oauth2.AuthCodeOption
	issuer   string
	req      Request
}

// StartLogin prepares an authorization code request with PKCE (S256) for r's server, redirecting
// to redirectURL, asking for r's scopes and its resource (RFC 8707) and audience.
func (c *Client) StartLogin(ctx context.Context, r Request, redirectURL string) (*Login, error) {
	conf, issuer, err := c.codeConfig(ctx, r)
	if err != nil {
		return nil, err
	}
	if conf.Endpoint.AuthURL == "" {
		return nil, notConfigured(r, "the metadata of "+issuer+" names no authorization_endpoint")
	}
	conf.RedirectURL = redirectURL
	var state [16]byte
	if _, err := rand.Read(state[:]); err != nil {
		return nil, err
	}
	l := &Login{State: hex.EncodeToString(state[:]), c: c, conf: conf, verifier: oauth2.GenerateVerifier(), issuer: issuer, req: r,
		params: []oauth2.AuthCodeOption{oauth2.SetAuthURLParam("resource", r.resource()), oauth2.SetAuthURLParam("audience", r.audience())}}
	l.URL = conf.AuthCodeURL(l.State, append([]oauth2.AuthCodeOption{oauth2.S256ChallengeOption(l.verifier)}, l.params...)...)
	return l, nil
}

// Finish exchanges the code for the grant.
func (l *Login) Finish(ctx context.Context, code string) (Grant, error) {
	ctx, cancel := context.WithTimeout(ctx, l.c.cfg.Timeout)
	defer cancel()
	tok, err := l.conf.Exchange(context.WithValue(ctx, oauth2.HTTPClient, l.c.hc), code,
		append([]oauth2.AuthCodeOption{oauth2.VerifierOption(l.verifier)}, l.params...)...)
	if err != nil {
		return Grant{}, l.c.failed(l.req, l.issuer, err, code, l.verifier, l.conf.ClientSecret)
	}
	if tok.AccessToken == "" || !strings.EqualFold(tok.Type(), "bearer") {
		return Grant{}, fmt.Errorf("authorization code at %s: the answer holds no bearer access token", l.issuer)
	}
	return Grant{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, Expiry: tok.Expiry, Issuer: l.issuer}, nil
}

// Refresh gets a new access token for a stored grant. A refusal (the grant was revoked or has
// expired) is an *Error with RuleLoginRequired whose reason says to log in again. The returned
// grant keeps refreshToken when the server did not rotate it.
func (c *Client) Refresh(ctx context.Context, r Request, refreshToken string) (Grant, error) {
	conf, issuer, err := c.codeConfig(ctx, r)
	if err != nil {
		return Grant{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
	defer cancel()
	tok, err := conf.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, c.hc), &oauth2.Token{RefreshToken: refreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		if code, desc, ok := oauthError(err, refreshToken, conf.ClientSecret); ok {
			if desc != "" {
				code += ": " + desc
			}
			return Grant{}, c.NoGrant(r, "the stored grant was refused when it was refreshed ("+code+"): it was revoked or has expired; log in again")
		}
		return Grant{}, c.failed(r, issuer, err, refreshToken, conf.ClientSecret)
	}
	g := Grant{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, Expiry: tok.Expiry, Issuer: issuer}
	if g.RefreshToken == "" {
		g.RefreshToken = refreshToken
	}
	return g, nil
}

// LoginCommand is the command that stores a grant for principal on server.
func LoginCommand(server, principal string) string {
	return "lushctl auth login " + server + " --principal " + principal
}

// NoGrant is the denial of a call whose principal has stored no grant (or one that cannot be
// refreshed): it says what to run and, when the gateway serves the login, the URL to open.
func (c *Client) NoGrant(r Request, why string) *Error {
	msg := fmt.Sprintf("%s needs %s to grant Lush access at its authorization server (flow authorization_code), and %s: run %s",
		r.Server, r.Principal, why, LoginCommand(r.Server, r.Principal))
	if u := c.LoginURL(r.Server); u != "" {
		msg += ", or open " + u + " (authenticated as " + r.Principal + ")"
	}
	return &Error{rule: RuleLoginRequired, reason: msg, LoginURL: c.LoginURL(r.Server)}
}

// LoginURL is the gateway's URL that starts the authorization code flow for server, or "" when
// the gateway has no redirect_url.
func (c *Client) LoginURL(server string) string {
	if c == nil || c.cfg.RedirectURL == "" {
		return ""
	}
	return strings.TrimSuffix(c.cfg.RedirectURL, CallbackPath) + LoginPath + "?" + url.Values{"server": {server}}.Encode()
}

// RedirectURL is the gateway's callback ("" without one).
func (c *Client) RedirectURL() string {
	if c == nil {
		return ""
	}
	return c.cfg.RedirectURL
}

// Revoke revokes a refresh token at the server's RFC 7009 revocation endpoint. It reports false
// (and no error) when the server has none.
func (c *Client) Revoke(ctx context.Context, r Request, refreshToken string) (bool, error) {
	cl, err := c.client(ctx, r)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	md, err := c.metadata(ctx, cl.issuer)
	if err != nil {
		return false, c.unavailable(r, "discover the revocation endpoint of "+cl.issuer, err)
	}
	if md.revocation == "" {
		return false, nil
	}
	form := url.Values{"token": {refreshToken}, "token_type_hint": {"refresh_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, md.revocation, strings.NewReader(form.Encode()))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(cl.id), url.QueryEscape(cl.secret))
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, c.unavailable(r, "revoke at "+md.revocation, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return false, &Error{rule: RuleRefused, reason: fmt.Sprintf("the authorization server %s answered the revocation with %s", cl.issuer, resp.Status)}
	}
	return true, nil
}

// codeConfig is the oauth2 configuration of the client listed for r's server.
func (c *Client) codeConfig(ctx context.Context, r Request) (*oauth2.Config, string, error) {
	cl, err := c.client(ctx, r)
	if err != nil {
		return nil, "", err
	}
	dctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	md, err := c.metadata(dctx, cl.issuer)
	if err != nil {
		if cl.tokenEndpoint == "" {
			return nil, "", c.unavailable(r, "discover the endpoints of "+cl.issuer, err)
		}
		md = endpoints{}
	}
	if cl.tokenEndpoint != "" {
		md.token = cl.tokenEndpoint
	}
	if md.token == "" {
		return nil, "", notConfigured(r, "the metadata of "+cl.issuer+" names no token_endpoint: set token_endpoint in the config")
	}
	return &oauth2.Config{ClientID: cl.id, ClientSecret: cl.secret, Scopes: r.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: md.auth, TokenURL: md.token}}, cl.issuer, nil
}

// ErrStateMismatch is a redirect whose state is not the login's.
var ErrStateMismatch = errors.New("the redirect's state does not match the login: start the login again")
