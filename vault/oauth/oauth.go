// Package oauth obtains the OAuth access tokens upstream MCP servers need on behalf of a caller:
// RFC 8693 token exchange of the caller's own token at the company's authorization server, with
// an actor token Lush signs naming the acting agents (so the issued token's act claim shows the
// chain), and client credentials for service accounts. Tokens are cached per principal, agent
// chain and upstream until shortly before they expire.
//
// A token never leaves this package except in the Token returned to the broker: errors and
// their messages carry the authorization server's error code and description with every token
// of the request scrubbed out, never a response body.
package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
	"golang.org/x/sync/singleflight"

	"github.com/zitadel/oidc/v3/pkg/client"
	"github.com/zitadel/oidc/v3/pkg/client/tokenexchange"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// Flows, as lush.yaml's mcp_credentials names them.
const (
	FlowTokenExchange     = "token_exchange"
	FlowAuthorizationCode = "authorization_code"
	FlowClientCredentials = "client_credentials"
)

// Provenance says how an upstream credential was obtained, as decisions record it.
const (
	ObtainedExchange          = "exchange"
	ObtainedStoredGrant       = "stored_grant"
	ObtainedClientCredentials = "client_credentials"
	ObtainedStatic            = "static"
)

// maxCache bounds the number of cached tokens; expired ones are dropped first.
const maxCache = 10000

// Request is what one upstream call needs a token for.
type Request struct {
	Server    string // the MCP server reference (mcp://…)
	URL       string // where the gateway reaches it: the default audience and resource
	Principal string
	Chain     []string // the acting agents, from the outermost caller to the agent that calls
	// SubjectToken is the caller's own access token (token exchange); "" when it authenticated
	// otherwise (API key, delegation token, …).
	SubjectToken string
	Method       string // how the caller authenticated, for the message when it has no token
	Flow         string
	Scopes       []string
	Audience     string // default URL
	Resource     string // default URL
}

func (r Request) audience() string {
	if r.Audience != "" {
		return r.Audience
	}
	return r.URL
}

func (r Request) resource() string {
	if r.Resource != "" {
		return r.Resource
	}
	return r.URL
}

// Token is an access token for one upstream call, with how it was obtained. Only AccessToken is
// secret; the rest may be logged and recorded.
type Token struct {
	AccessToken string
	Expiry      time.Time // zero when the server did not say
	Obtained    string    // one of the Obtained* constants
	// Act is the acting chain the token carries (its act claim, outermost actor first: the
	// agent that calls, then the agents it acts for), when the token says so.
	Act    []string
	Issuer string // the authorization server that issued it
}

// Client gets tokens. It is safe for concurrent use.
type Client struct {
	cfg   Config
	hc    *http.Client
	now   func() time.Time
	actor *actorSigner // nil without token exchange

	teSecret string
	secrets  []string // per cfg.Clients

	regPath string                  // WithRegistrations
	regs    map[string]registration // by server; loaded on first use

	mu        sync.Mutex
	exchanger tokenexchange.TokenExchanger // discovered on first use
	endpoints map[string]endpoints         // issuer -> its endpoints, discovered
	cache     map[string]cached
	flight    singleflight.Group
}

type cached struct {
	tok       Token
	refreshAt time.Time
}

// Option configures a Client.
type Option func(*Client)

// WithClock replaces time.Now, for tests of expiry.
func WithClock(now func() time.Time) Option { return func(c *Client) { c.now = now } }

// WithHTTPClient replaces the HTTP client that talks to authorization servers.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New checks cfg, reads its secret files and the actor key, and returns a client. It does not
// contact any authorization server: the first token does.
func New(cfg Config, opts ...Option) (*Client, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	c := &Client{cfg: cfg, now: time.Now, endpoints: map[string]endpoints{}, cache: map[string]cached{},
		hc: &http.Client{Timeout: cfg.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	for _, o := range opts {
		o(c)
	}
	if te := cfg.TokenExchange; te != nil {
		s, err := readSecret("credentials.oauth.token_exchange.client_secret_file", te.ClientSecretFile)
		if err != nil {
			return nil, err
		}
		c.teSecret = s
		iss := te.Actor.Issuer
		if iss == "" {
			iss = DefaultActorIssuer
		}
		a, err := newActorSigner(te.Actor.KeyFile, iss, te.Issuer)
		if err != nil {
			return nil, fmt.Errorf("credentials.oauth.token_exchange.actor.key_file: %w", err)
		}
		c.actor = a
	}
	for i, cl := range cfg.Clients {
		s, err := readSecret(fmt.Sprintf("credentials.oauth.clients[%d].client_secret_file", i), cl.ClientSecretFile)
		if err != nil {
			return nil, err
		}
		c.secrets = append(c.secrets, s)
	}
	return c, nil
}

// ActorKeyID is the kid of actor tokens (the RFC 7638 thumbprint of the actor key), for the
// authorization server's trust configuration; "" without token exchange.
func (c *Client) ActorKeyID() string {
	if c == nil || c.actor == nil {
		return ""
	}
	return c.actor.kid
}

// Token returns a token for r: from the cache while it is fresh, else from the authorization
// server. Errors are *Error: they say what to do and never hold a token.
func (c *Client) Token(ctx context.Context, r Request) (Token, error) {
	switch r.Flow {
	case FlowTokenExchange:
		if c == nil || c.cfg.TokenExchange == nil {
			return Token{}, notConfigured(r, "the gateway has no token exchange configured: set credentials.oauth.token_exchange in its config (docs/credentials.md)")
		}
		if r.SubjectToken == "" {
			how := "an API key or another credential"
			switch r.Method {
			case "":
			case "delegation":
				how = "a delegation token of an agent acting for them, which brings no OAuth token (the person did not log in with OAuth, or agentd runs in another process than the gateway)"
			default:
				how = "method " + r.Method
			}
			return Token{}, &Error{rule: RuleLoginRequired, reason: fmt.Sprintf(
				"%s gets a token on behalf of %s by token exchange, which needs the caller's own OAuth access token; this call authenticated with %s. Log in with OAuth (an access token from %s) and call again",
				r.Server, r.Principal, how, c.cfg.TokenExchange.Issuer)}
		}
	case FlowClientCredentials:
		if c == nil {
			return Token{}, notConfigured(r, "the gateway has no OAuth clients configured: add one under credentials.oauth.clients with servers: ["+r.Server+"] (docs/credentials.md)")
		}
	default:
		return Token{}, notConfigured(r, fmt.Sprintf("flow %q is not supported by this gateway", r.Flow))
	}
	if r.URL == "" && (r.Audience == "" || r.Resource == "") {
		return Token{}, notConfigured(r, "the server has no URL to ask a token for: set audience: and resource: in lush.yaml mcp_credentials")
	}
	key := cacheKey(r)
	now := c.now()
	c.mu.Lock()
	e, ok := c.cache[key]
	c.mu.Unlock()
	if ok && now.Before(e.refreshAt) {
		return e.tok, nil
	}
	v, err, _ := c.flight.Do(key, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
		defer cancel()
		var tok Token
		var err error
		if r.Flow == FlowTokenExchange {
			tok, err = c.exchange(ctx, r)
		} else {
			tok, err = c.clientCredentials(ctx, r)
		}
		if err != nil {
			return Token{}, err
		}
		c.store(key, tok)
		return tok, nil
	})
	if err != nil {
		return Token{}, err
	}
	return v.(Token), nil
}

// cacheKey identifies a token: per principal, chain, upstream and what was asked for, and per
// subject token (a digest), so a new login never gets a token exchanged from an old one.
func cacheKey(r Request) string {
	h := sha256.New()
	for _, f := range []string{r.Flow, r.Server, r.Principal, strings.Join(r.Chain, "\x01"), strings.Join(r.Scopes, " "), r.audience(), r.resource(), r.SubjectToken} {
		fmt.Fprintf(h, "%d:%s;", len(f), f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// store caches tok until shortly before it expires: a tenth of its life early, at least 5s and
// at most a minute. A token without an expiry, or one about to expire, is not cached.
func (c *Client) store(key string, tok Token) {
	if tok.Expiry.IsZero() {
		return
	}
	now := c.now()
	life := tok.Expiry.Sub(now)
	margin := min(max(life/10, 5*time.Second), time.Minute)
	if life <= margin {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cache) >= maxCache {
		for k, e := range c.cache {
			if !now.Before(e.refreshAt) {
				delete(c.cache, k)
			}
		}
		if len(c.cache) >= maxCache {
			clear(c.cache)
		}
	}
	c.cache[key] = cached{tok: tok, refreshAt: tok.Expiry.Add(-margin)}
}

// exchange performs RFC 8693 token exchange: the caller's token as subject, an actor token
// naming the chain, for the upstream's audience and resource.
func (c *Client) exchange(ctx context.Context, r Request) (Token, error) {
	te, err := c.tokenExchanger(ctx)
	if err != nil {
		return Token{}, c.unavailable(r, "discover the token endpoint of "+c.cfg.TokenExchange.Issuer, err)
	}
	var actor string
	var actorType oidc.TokenType
	if len(r.Chain) > 0 {
		actor, err = c.actor.sign(r.Chain, c.now())
		if err != nil {
			return Token{}, &Error{rule: RuleUnavailable, reason: unavailableReason(r), err: fmt.Errorf("sign the actor token: %w", err)}
		}
		actorType = oidc.JWTTokenType
	}
	resp, err := tokenexchange.ExchangeToken(ctx, te, r.SubjectToken, oidc.AccessTokenType, actor, actorType,
		[]string{r.resource()}, []string{r.audience()}, r.Scopes, oidc.AccessTokenType)
	if err != nil {
		return Token{}, c.failed(r, c.cfg.TokenExchange.Issuer, err, r.SubjectToken, actor)
	}
	if resp.AccessToken == "" || (resp.TokenType != "" && !strings.EqualFold(resp.TokenType, "bearer") && !strings.EqualFold(resp.TokenType, "N_A")) {
		return Token{}, &Error{rule: RuleUnavailable, reason: unavailableReason(r),
			err: fmt.Errorf("token exchange at %s: the answer holds no bearer access token (token_type %q)", c.cfg.TokenExchange.Issuer, resp.TokenType)}
	}
	tok := Token{AccessToken: resp.AccessToken, Obtained: ObtainedExchange, Issuer: c.cfg.TokenExchange.Issuer}
	if resp.ExpiresIn > 0 {
		tok.Expiry = c.now().Add(time.Duration(min(resp.ExpiresIn, uint64(24*time.Hour/time.Second))) * time.Second)
	}
	tok.Act = actClaim(resp.AccessToken)
	if tok.Act == nil {
		tok.Act = actChain(r.Chain)
	}
	return tok, nil
}

func (c *Client) tokenExchanger(ctx context.Context) (tokenexchange.TokenExchanger, error) {
	c.mu.Lock()
	te := c.exchanger
	c.mu.Unlock()
	if te != nil {
		return te, nil
	}
	cfg := c.cfg.TokenExchange
	opts := []func(*tokenexchange.OAuthTokenExchange){tokenexchange.WithHTTPClient(c.hc)}
	if cfg.TokenEndpoint != "" {
		opts = append(opts, tokenexchange.WithStaticTokenEndpoint(cfg.Issuer, cfg.TokenEndpoint))
	}
	te, err := tokenexchange.NewTokenExchangerClientCredentials(ctx, cfg.Issuer, cfg.ClientID, c.teSecret, opts...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.exchanger = te
	c.mu.Unlock()
	return te, nil
}

// clientCredentials gets the gateway's own token from the upstream's authorization server,
// asking for the resource (RFC 8707) and the audience (the parameter servers such as Hydra use).
func (c *Client) clientCredentials(ctx context.Context, r Request) (Token, error) {
	cl, err := c.client(ctx, r)
	if err != nil {
		return Token{}, err
	}
	endpoint, err := c.tokenEndpoint(ctx, cl.issuer, cl.tokenEndpoint)
	if err != nil {
		return Token{}, c.unavailable(r, "discover the token endpoint of "+cl.issuer, err)
	}
	cc := clientcredentials.Config{ClientID: cl.id, ClientSecret: cl.secret, TokenURL: endpoint, Scopes: r.Scopes,
		EndpointParams: url.Values{"audience": {r.audience()}, "resource": {r.resource()}}}
	ot, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, c.hc))
	if err != nil {
		return Token{}, c.failed(r, cl.issuer, err, cl.secret)
	}
	if ot.AccessToken == "" || !strings.EqualFold(ot.Type(), "bearer") {
		return Token{}, &Error{rule: RuleUnavailable, reason: unavailableReason(r),
			err: fmt.Errorf("client credentials at %s: the answer holds no bearer access token", cl.issuer)}
	}
	return Token{AccessToken: ot.AccessToken, Expiry: ot.Expiry, Obtained: ObtainedClientCredentials, Issuer: cl.issuer}, nil
}

// tokenEndpoint returns the configured endpoint, or the one the issuer's metadata names.
func (c *Client) tokenEndpoint(ctx context.Context, issuer, configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	md, err := c.metadata(ctx, issuer)
	if err != nil {
		return "", err
	}
	if md.token == "" {
		return "", fmt.Errorf("the metadata of %s names no token_endpoint: set token_endpoint in the config", issuer)
	}
	return md.token, nil
}

// endpoints are what an authorization server's metadata names.
type endpoints struct {
	auth, token, revocation string
}

// metadata returns the issuer's endpoints from its OpenID Connect / RFC 8414 metadata, cached.
func (c *Client) metadata(ctx context.Context, issuer string) (endpoints, error) {
	c.mu.Lock()
	e, ok := c.endpoints[issuer]
	c.mu.Unlock()
	if ok {
		return e, nil
	}
	md, err := client.Discover(ctx, issuer, c.hc)
	if err != nil {
		return endpoints{}, err
	}
	e = endpoints{auth: md.AuthorizationEndpoint, token: md.TokenEndpoint, revocation: md.RevocationEndpoint}
	c.mu.Lock()
	c.endpoints[issuer] = e
	c.mu.Unlock()
	return e, nil
}

// Rule ids of the denials this package causes, as decision-log events show them.
const (
	RuleLoginRequired = "lush.credentials.oauth_login_required" // the caller has no token to exchange
	RuleRefused       = "lush.credentials.oauth_refused"        // the authorization server said no
	RuleUnavailable   = "lush.credentials.unavailable"          // it could not be asked, or answered nonsense
	RuleNotConfigured = "lush.credentials.missing"              // the gateway lacks the configuration
)

// Error is why no token could be had. Reason is what the caller is told; Error adds the
// operator's detail (endpoints, the server's error code). Neither ever holds a token or secret.
type Error struct {
	rule   string
	reason string
	err    error
	// LoginURL, when set, is where the caller grants access (the gateway's login route).
	LoginURL string
}

func (e *Error) Error() string {
	if e.err == nil {
		return e.reason
	}
	return e.reason + ": " + e.err.Error()
}

// Unwrap returns the underlying, scrubbed error.
func (e *Error) Unwrap() error { return e.err }

// Rule is the rule id of the denial.
func (e *Error) Rule() string { return e.rule }

// Reason is what the caller is told.
func (e *Error) Reason() string { return e.reason }

func notConfigured(r Request, why string) *Error {
	return &Error{rule: RuleNotConfigured, reason: fmt.Sprintf("%s needs an OAuth token for %s (flow %s), and %s", r.Server, r.Principal, r.Flow, why)}
}

func unavailableReason(r Request) string {
	return fmt.Sprintf("the OAuth token that %s needs for %s cannot be obtained right now (the operator can find why in the gateway's log and the decision log); the call was not made", r.Server, r.Principal)
}

func (c *Client) unavailable(r Request, doing string, err error) *Error {
	return &Error{rule: RuleUnavailable, reason: unavailableReason(r), err: fmt.Errorf("%s: %s", doing, describe(err))}
}

// failed turns the authorization server's answer into an Error: a refusal (an OAuth error
// code) is told to the caller with its code and description; anything else is unavailable.
// Every secret of the request is scrubbed from the text.
func (c *Client) failed(r Request, issuer string, err error, secrets ...string) *Error {
	code, desc, ok := oauthError(err, secrets...)
	if !ok {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil {
			return &Error{rule: RuleUnavailable, reason: unavailableReason(r), err: fmt.Errorf("%s answered %s without an OAuth error", issuer, re.Response.Status)}
		}
		return &Error{rule: RuleUnavailable, reason: unavailableReason(r), err: fmt.Errorf("%s: %s", issuer, scrubbed(describe(err), secrets))}
	}
	what := "exchange the caller's token"
	switch r.Flow {
	case FlowClientCredentials:
		what = "issue a client credentials token"
	case FlowAuthorizationCode:
		what = "issue tokens for the authorization code"
	}
	msg := fmt.Sprintf("the authorization server %s refused to %s for %s (%s", issuer, what, r.Server, code)
	if desc != "" {
		msg += ": " + desc
	}
	msg += ")"
	if r.Flow == FlowTokenExchange && code == "invalid_grant" {
		msg += "; log in again to get a fresh token, or ask the operator whether the server allows exchanges for this audience"
	}
	return &Error{rule: RuleRefused, reason: msg + "; the call was not made"}
}

// oauthError is the OAuth error code and description of a token endpoint's refusal, bounded and
// with secrets scrubbed; ok is false for any other failure.
func oauthError(err error, secrets ...string) (code, desc string, ok bool) {
	var oe *oidc.Error
	var re *oauth2.RetrieveError
	switch {
	case errors.As(err, &oe):
		code, desc = string(oe.ErrorType), oe.Description
	case errors.As(err, &re) && re.ErrorCode != "":
		code, desc = re.ErrorCode, re.ErrorDescription
	default:
		return "", "", false
	}
	return scrubbed(bounded(code), secrets), scrubbed(bounded(desc), secrets), true
}

// scrubbed replaces every secret (of at least 4 characters) in s.
func scrubbed(s string, secrets []string) string {
	for _, v := range secrets {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// describe is an error's text without what libraries append (response bodies): transport
// failures keep their text, anything else only its first clause.
func describe(err error) string {
	var ue *url.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case errors.As(err, &ue):
		return bounded(ue.Op + " " + redactQuery(ue.URL) + ": " + ue.Err.Error())
	}
	s := err.Error()
	// zitadel's client appends the response body after the status or the decode error.
	if i := strings.Index(s, "http status not ok: "); i >= 0 {
		rest := s[i+len("http status not ok: "):]
		return "the server answered HTTP " + rest[:min(3, len(rest))] + " without an OAuth error"
	}
	if strings.Contains(s, "failed to unmarshal response: ") {
		return "the answer is not an OAuth token response"
	}
	return bounded(s)
}

func redactQuery(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// bounded cuts text from a server to a length fit for a message.
func bounded(s string) string {
	const n = 300
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
