package authserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// Client is an OAuth client of Hydra (the JSON names are those of examples/authserver's
// --clients file).
type Client struct {
	ID     string `json:"id"`
	Secret string `json:"secret,omitempty"` // "" with TokenEndpointAuthMethod "none" (a public client)
	// GrantTypes default to authorization_code and refresh_token; ResponseTypes to code.
	GrantTypes    []string `json:"grant_types,omitempty"`
	ResponseTypes []string `json:"response_types,omitempty"`
	RedirectURIs  []string `json:"redirect_uris,omitempty"`
	// Scopes the client may ask for.
	Scopes []string `json:"scopes,omitempty"`
	// Audience is the audiences (resources) the client may ask tokens for.
	Audience []string `json:"audience,omitempty"`
	// TokenEndpointAuthMethod is client_secret_basic (the default), client_secret_post or none.
	TokenEndpointAuthMethod string `json:"token_endpoint_auth_method,omitempty"`
	// AccessTokenStrategy is jwt (the default) or opaque (for introspection).
	AccessTokenStrategy string `json:"access_token_strategy,omitempty"`
}

// CreateClient creates client in Hydra through its admin API.
func (s *Server) CreateClient(ctx context.Context, c Client) error {
	if c.ID == "" {
		return errors.New("create client: ID is empty")
	}
	if c.TokenEndpointAuthMethod == "" {
		c.TokenEndpointAuthMethod = "client_secret_basic"
	}
	if c.TokenEndpointAuthMethod != "none" && c.Secret == "" {
		return fmt.Errorf("create client %q: Secret is empty (set TokenEndpointAuthMethod none for a public client)", c.ID)
	}
	if c.GrantTypes == nil {
		c.GrantTypes = []string{"authorization_code", "refresh_token"}
	}
	if c.ResponseTypes == nil {
		c.ResponseTypes = []string{"code"}
	}
	body := map[string]any{
		"client_id":                  c.ID,
		"grant_types":                c.GrantTypes,
		"response_types":             c.ResponseTypes,
		"redirect_uris":              nonNil(c.RedirectURIs),
		"scope":                      strings.Join(c.Scopes, " "),
		"audience":                   nonNil(c.Audience),
		"token_endpoint_auth_method": c.TokenEndpointAuthMethod,
	}
	if c.Secret != "" {
		body["client_secret"] = c.Secret
	}
	if c.AccessTokenStrategy != "" {
		body["access_token_strategy"] = c.AccessTokenStrategy
	}
	if err := s.adminJSON(ctx, http.MethodPost, "/admin/clients", body, nil); err != nil {
		return fmt.Errorf("create client %q: %w", c.ID, err)
	}
	return nil
}

// DeleteClient deletes a client from Hydra.
func (s *Server) DeleteClient(ctx context.Context, id string) error {
	if err := s.adminJSON(ctx, http.MethodDelete, "/admin/clients/"+url.PathEscape(id), nil, nil); err != nil {
		return fmt.Errorf("delete client %q: %w", id, err)
	}
	return nil
}

// RevokeConsent revokes every consent subject gave, and with them the access and refresh tokens
// issued under those consents: a later refresh fails.
func (s *Server) RevokeConsent(ctx context.Context, subject string) error {
	q := url.Values{"subject": {subject}, "all": {"true"}}
	if err := s.adminJSON(ctx, http.MethodDelete, "/admin/oauth2/auth/sessions/consent?"+q.Encode(), nil, nil); err != nil {
		return fmt.Errorf("revoke the consent of %q: %w", subject, err)
	}
	return nil
}

// OAuth2Config is the golang.org/x/oauth2 configuration of client c at Hydra (through the front).
func (s *Server) OAuth2Config(c Client, scopes ...string) *oauth2.Config {
	style := oauth2.AuthStyleInHeader
	switch c.TokenEndpointAuthMethod {
	case "client_secret_post", "none":
		style = oauth2.AuthStyleInParams
	}
	redirect := ""
	if len(c.RedirectURIs) > 0 {
		redirect = c.RedirectURIs[0]
	}
	return &oauth2.Config{
		ClientID:     c.ID,
		ClientSecret: c.Secret,
		Endpoint: oauth2.Endpoint{
			AuthURL:   s.frontURL + "/oauth2/auth",
			TokenURL:  s.frontURL + "/oauth2/token",
			AuthStyle: style,
		},
		RedirectURL: redirect,
		Scopes:      scopes,
	}
}

// ClientCredentialsToken gets a client-credentials token for client id, asking for each audience
// as an RFC 8707 resource.
func (s *Server) ClientCredentialsToken(ctx context.Context, id, secret string, audience []string, scopes ...string) (*oauth2.Token, error) {
	cc := clientcredentials.Config{
		ClientID:       id,
		ClientSecret:   secret,
		TokenURL:       s.frontURL + "/oauth2/token",
		Scopes:         scopes,
		EndpointParams: url.Values{"resource": audience},
		AuthStyle:      oauth2.AuthStyleInHeader,
	}
	tok, err := cc.Token(s.clientContext(ctx, nil))
	if err != nil {
		return nil, fmt.Errorf("client credentials token for %q: %w", id, oauthError(err))
	}
	return tok, nil
}

// AuthorizationCodeToken runs the authorization code flow with PKCE for client c without a
// browser: user (a login_hint; "" for the next user) logs in and consents through the login app,
// and the code is exchanged for tokens. resource ("" for none) is sent as the RFC 8707 resource
// of the authorization and token requests. Ask for offline_access to get a refresh token.
func (s *Server) AuthorizationCodeToken(ctx context.Context, c Client, user, resource string, scopes []string) (*oauth2.Token, error) {
	if len(c.RedirectURIs) == 0 {
		return nil, fmt.Errorf("authorization code for %q: the client has no redirect URI", c.ID)
	}
	conf := s.OAuth2Config(c, scopes...)
	verifier := oauth2.GenerateVerifier()
	state, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	nonce, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce)}
	if user != "" {
		opts = append(opts, oauth2.SetAuthURLParam("login_hint", user))
	}
	if resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", resource))
	}
	loc, err := s.browse(ctx, conf.AuthCodeURL(state, opts...), conf.RedirectURL)
	if err != nil {
		return nil, fmt.Errorf("authorization code for %q: %w", c.ID, err)
	}
	q := loc.Query()
	if e := q.Get("error"); e != "" {
		return nil, fmt.Errorf("authorization code for %q: %s: %s", c.ID, e, q.Get("error_description"))
	}
	if q.Get("state") != state {
		return nil, fmt.Errorf("authorization code for %q: the redirect's state does not match", c.ID)
	}
	code := q.Get("code")
	if code == "" {
		return nil, fmt.Errorf("authorization code for %q: the redirect has no code", c.ID)
	}
	exOpts := []oauth2.AuthCodeOption{oauth2.VerifierOption(verifier)}
	if resource != "" {
		exOpts = append(exOpts, oauth2.SetAuthURLParam("resource", resource))
	}
	tok, err := conf.Exchange(s.clientContext(ctx, nil), code, exOpts...)
	if err != nil {
		return nil, fmt.Errorf("authorization code for %q: exchange the code: %w", c.ID, oauthError(err))
	}
	return tok, nil
}

// Browse plays the browser of a person who opens authURL (an authorization request a client
// built): it follows every redirect with a cookie jar of its own, through Hydra, the login and
// consent app, and on to the client's redirect URI, which it requests too (so a client's loopback
// callback receives the code or the error). It returns the URL of the last page and its status.
// Who logs in is the request's login_hint, else the next user.
func (s *Server) Browse(ctx context.Context, authURL string) (*url.URL, int, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, 0, err
	}
	browser := &http.Client{Jar: jar, Timeout: s.admin.Timeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("browse: %w", err)
	}
	resp, err := browser.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("browse: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.Request.URL, resp.StatusCode, nil
}

// browse follows redirects from authURL until one to redirectURI, and returns that redirect's
// location (not requested).
func (s *Server) browse(ctx context.Context, authURL, redirectURI string) (*url.URL, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	browser := &http.Client{
		Jar:     jar,
		Timeout: s.admin.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > 20 {
				return errors.New("more than 20 redirects")
			}
			if strings.HasPrefix(req.URL.String(), redirectURI) {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := browser.Do(req)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	loc, err := resp.Location()
	if err != nil || !strings.HasPrefix(loc.String(), redirectURI) {
		return nil, fmt.Errorf("the flow did not come back to the redirect URI: %s at %s: %s", resp.Status, resp.Request.URL.Path, strings.TrimSpace(string(body)))
	}
	return loc, nil
}

// RefreshToken refreshes a token of client c (resource "" for none).
func (s *Server) RefreshToken(ctx context.Context, c Client, refreshToken, resource string) (*oauth2.Token, error) {
	conf := s.OAuth2Config(c)
	if resource != "" {
		// x/oauth2 sends no extra parameters on refresh: a transport adds the resource.
		ctx = s.clientContext(ctx, url.Values{"resource": {resource}})
	} else {
		ctx = s.clientContext(ctx, nil)
	}
	tok, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: refreshToken}).Token()
	if err != nil {
		return nil, fmt.Errorf("refresh a token of %q: %w", c.ID, oauthError(err))
	}
	return tok, nil
}

// clientContext gives x/oauth2 an HTTP client with a timeout that adds extra form parameters to
// token requests.
func (s *Server) clientContext(ctx context.Context, extra url.Values) context.Context {
	var rt http.RoundTripper = http.DefaultTransport
	if len(extra) > 0 {
		rt = formParams{next: rt, extra: extra}
	}
	return context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Timeout: s.admin.Timeout, Transport: rt})
}

// formParams adds parameters to form-encoded POST requests.
type formParams struct {
	next  http.RoundTripper
	extra url.Values
}

func (f formParams) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || r.Body == nil {
		return f.next.RoundTrip(r)
	}
	body, err := readBounded(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range f.extra {
		for _, v := range vs {
			form.Add(k, v)
		}
	}
	r = r.Clone(r.Context())
	setBody(r, []byte(form.Encode()))
	return f.next.RoundTrip(r)
}

// oauthError is err with the OAuth error code and description of a token endpoint's answer,
// without the body (which could hold a token).
func oauthError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.ErrorCode != "" {
			return fmt.Errorf("%s: %s: %s", re.Response.Status, re.ErrorCode, re.ErrorDescription)
		}
		return fmt.Errorf("%s", re.Response.Status)
	}
	return err
}
