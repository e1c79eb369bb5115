// Package identity authenticates the callers of the gateway and agentd: it turns an HTTP
// request into a Caller (a principal, its groups, and for delegated calls the agent acting and
// the chain of agents), or into an Error that is safe to show the client.
//
// Callers present a JWT bearer token (verified against the issuer's JWKS or a key file), an
// OAuth access token of a configured authorization server (discovered through its RFC 8414 or
// OpenID Connect metadata; a JWT verified with its JWKS, or an opaque token introspected, and
// issued for the protected resource the request is for), an API key (configured by its SHA-256
// digest), an identity header set by a trusted proxy, or a delegation token signed by agentd.
// With OAuth, the Authenticator also says what the resources are (RFC 9728 metadata) and how a
// refusal challenges the client (WWW-Authenticate). In dev mode a request with no credentials at all acts as a
// fixed principal. Credentials that are presented but invalid never fall back to another method,
// and no error, Caller field or panic ever contains a token, key or secret.
package identity

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lush-agents/lush/internal/principal"
)

// Method is how a caller authenticated.
type Method string

// The authentication methods.
const (
	MethodJWT        Method = "jwt"
	MethodAPIKey     Method = "apikey"
	MethodProxy      Method = "proxy"
	MethodDev        Method = "dev"
	MethodDelegation Method = "delegation"
	// MethodSchedule is a loop firing: the scheduler acts as the loop's run_as service account.
	MethodSchedule Method = "schedule"
)

// Caller is an authenticated caller.
type Caller struct {
	ID      string   // principal id, e.g. user:alice
	Groups  []string // group:<name>, sorted, unique
	Method  Method
	Subject string // who, for logs: JWT sub, API key name, proxy header value, "dev"
	// Set only for Method == "delegation":
	Agent   string   // the agent the token lets act
	Chain   []string // agents from the outermost caller to Agent, inclusive
	TokenID string   // jti
	// Hops are agent calls before the chain's first agent that this Lush did not make but was
	// told of (another Lush's A2A message, its dev.lush/delegation metadata; or a delegation
	// token that carries them on). They count in the call depth (len(Chain) + Hops) and in
	// nothing else: never in authorization. Set by agentd's A2A server (any caller) and by
	// delegation tokens.
	Hops int
	// Token is the access token of a caller authenticated with a JWT from a configured issuer
	// (Method == "jwt"), for token exchange at an upstream's request (vault/oauth); it prints as
	// [redacted]. Empty for every other method.
	Token SubjectToken
}

// Depth is the call depth of a call by c through chain: the agents in the chain and the hops
// before it.
func (c Caller) Depth(chain []string) int { return len(chain) + c.Hops }

// CheckAgent checks that the caller may act as agent: a delegation token lets exactly its
// Agent act; callers authenticated otherwise are principals calling agent directly. The error
// (an *Error with code forbidden_agent) says which agent the token is for.
func (c Caller) CheckAgent(agent string) error {
	if c.Method == MethodDelegation && c.Agent != agent {
		return &Error{Code: CodeForbiddenAgent, Method: MethodDelegation, Message: fmt.Sprintf(
			"the delegation token lets agent %q act, not %q: ask agentd for a token for %q", c.Agent, agent, agent)}
	}
	return nil
}

// Error codes.
const (
	CodeMissingCredentials = "missing_credentials"
	CodeInvalidRequest     = "invalid_request" // malformed or ambiguous credentials
	CodeInvalidToken       = "invalid_token"
	CodeExpiredToken       = "expired_token"
	CodeUnknownAPIKey      = "unknown_api_key"
	CodeUntrustedProxy     = "untrusted_proxy"
	CodeForbiddenAgent     = "forbidden_agent"
)

// Error is an authentication failure, safe to show to the client: it never contains the token,
// key or secret.
type Error struct {
	Code    string // one of the Code* constants
	Message string // actionable: what is wrong and how to fix it
	// Method is the authentication method the request tried (a JWT, an API key, a delegation
	// token, ...), for metrics and logs: "" when it presented no credential, or one that is
	// malformed or ambiguous (two headers, an Authorization header that is not a bearer token).
	// It is not part of the text.
	Method Method
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// tried records that the request tried method m, unless a more precise method is recorded
// already; it returns e (nil stays nil).
func (e *Error) tried(m Method) *Error {
	if e != nil && e.Method == "" {
		e.Method = m
	}
	return e
}

// Status is the HTTP status: 403 for a valid token without the scopes required
// (CodeInsufficientScope), 503 for a token whose authorization server cannot be reached to
// check it (CodeAuthServerUnavailable: a new token would not help), 401 for all other
// authentication failures.
func (e *Error) Status() int {
	switch e.Code {
	case CodeInsufficientScope:
		return http.StatusForbidden
	case CodeAuthServerUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusUnauthorized
}

func fail(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Limits on what a request may present.
const (
	maxTokenLen  = 32 << 10
	maxGroups    = 1024
	maxShownText = 100 // untrusted claim values shown in messages are cut to this many bytes
)

// Authenticator verifies requests. It owns the JWKS refresh goroutines; Close stops them.
// It is safe for concurrent use.
type Authenticator struct {
	issuers    map[string]*issuer
	apiKeys    []apiKey
	proxy      *proxyAuth
	dev        *Caller
	delegation *delegationVerifier

	jwks *jwksFetcher // nil without jwks_url issuers and OAuth servers

	oauth         []*oauthServer
	oauthByIssuer map[string]*oauthServer
	oauthClient   *http.Client // metadata and introspection requests
	resourceURL   string       // auth.resource_url
	bg            context.Context
	stopBG        context.CancelFunc
	goroutines    sync.WaitGroup // metadata refreshers, ended by Close

	now      func() time.Time
	subjects *SubjectTokens // KeepSubjectTokens

	closeOnce sync.Once
	closeErr  error
}

type apiKey struct {
	name      string
	digest    [sha256.Size]byte
	principal string
	groups    []string
}

type proxyAuth struct {
	trusted      []netip.Prefix
	header       string
	groupsHeader string
}

// New checks cfg, loads its key files and fetches every JWKS once (bounded by ctx). The JWKS
// refresh goroutines it starts outlive ctx: Close stops them.
func New(ctx context.Context, cfg Config) (*Authenticator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Authenticator{issuers: map[string]*issuer{}, oauthByIssuer: map[string]*oauthServer{}, now: time.Now, resourceURL: cfg.ResourceURL}
	a.bg, a.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	if len(cfg.OAuth) > 0 && cfg.ResourceURL == "" {
		return nil, errors.New("auth.resource_url: required with auth.oauth: set the server's public base URL (lushctl derives it from the listen address)")
	}

	for _, k := range cfg.APIKeys {
		var d [sha256.Size]byte
		if _, err := hex.Decode(d[:], []byte(strings.ToLower(k.SHA256))); err != nil {
			return nil, fmt.Errorf("auth.api_keys: %s: %w", k.Name, err) // unreachable after Validate
		}
		a.apiKeys = append(a.apiKeys, apiKey{name: k.Name, digest: d, principal: k.Principal, groups: normGroups(k.Groups)})
	}
	if p := cfg.Proxy; p != nil {
		pa := &proxyAuth{header: headerOr(p.Header, DefaultProxyHeader), groupsHeader: headerOr(p.GroupsHeader, DefaultProxyGroupsHeader)}
		for _, t := range p.Trusted {
			pf, _ := parseTrusted(t) // checked by Validate
			pa.trusted = append(pa.trusted, pf)
		}
		a.proxy = pa
	}
	if d := cfg.Dev; d != nil {
		a.dev = &Caller{ID: d.Principal, Groups: normGroups(d.Groups), Method: MethodDev, Subject: "dev"}
	}
	if d := cfg.Delegation; d != nil {
		v, err := newDelegationVerifier(*d)
		if err != nil {
			return nil, err
		}
		a.delegation = v
	}

	ok := false
	defer func() {
		if !ok {
			a.Close()
		}
	}()
	for i, j := range cfg.JWT {
		is, err := a.newIssuer(ctx, i, j)
		if err != nil {
			return nil, err
		}
		a.issuers[j.Issuer] = is
	}
	if err := a.newOAuthServers(ctx, cfg.OAuth); err != nil {
		return nil, err
	}
	ok = true
	return a, nil
}

// Close stops the JWKS refresh goroutines and waits for them. It is safe to call more than once;
// requests authenticated after Close use the keys last fetched.
func (a *Authenticator) Close() error {
	a.closeOnce.Do(func() {
		a.stopBG()
		a.goroutines.Wait()
		if a.jwks != nil {
			a.closeErr = a.jwks.close()
		}
	})
	return a.closeErr
}

// Authenticate identifies the caller of r. The error is an *Error (status 401).
//
// Resolution order: an Authorization bearer token (a delegation token by its typ header, any
// other JWT by its issuer: an auth.oauth access token or an auth.jwt token; anything else as an
// API key, or, when no API key matches and an authorization server introspects, as an opaque
// access token); an X-API-Key header; the trusted
// proxy's identity header; dev mode, only when the request presents no credentials at all. A
// proxy identity header from an address that is not a trusted proxy is always refused.
func (a *Authenticator) Authenticate(r *http.Request) (Caller, error) {
	c, err := a.authenticate(r)
	if err != nil {
		return Caller{}, err
	}
	return c, nil
}

func (a *Authenticator) authenticate(r *http.Request) (Caller, *Error) {
	h := r.Header
	authz := h.Values("Authorization")
	keys := h.Values("X-Api-Key")
	pHeader, gHeader := DefaultProxyHeader, DefaultProxyGroupsHeader
	if a.proxy != nil {
		pHeader, gHeader = a.proxy.header, a.proxy.groupsHeader
	}
	pVals, gVals := h.Values(pHeader), h.Values(gHeader)
	proxied := len(pVals) > 0 || len(gVals) > 0

	if proxied {
		switch {
		case a.proxy == nil:
			return Caller{}, fail(CodeUntrustedProxy, "the %s and %s headers are accepted only from trusted proxies, and auth.trusted_proxy is not configured: remove the headers or configure the proxy", pHeader, gHeader).tried(MethodProxy)
		case !a.proxy.trusts(r.RemoteAddr):
			return Caller{}, fail(CodeUntrustedProxy, "the %s and %s headers are accepted only from the proxies in auth.trusted_proxy.trusted, and this request comes from %s: remove the headers or send the request through a trusted proxy", pHeader, gHeader, remoteIP(r.RemoteAddr)).tried(MethodProxy)
		}
	}
	switch {
	case len(authz) > 1:
		return Caller{}, fail(CodeInvalidRequest, "the request has %d Authorization headers: send exactly one", len(authz))
	case len(keys) > 1:
		return Caller{}, fail(CodeInvalidRequest, "the request has %d X-API-Key headers: send exactly one", len(keys))
	case len(authz) == 1 && len(keys) == 1:
		return Caller{}, fail(CodeInvalidRequest, "the request has both an Authorization and an X-API-Key header: send only one credential")
	case len(authz) == 1:
		tok, err := bearer(authz[0])
		if err != nil {
			return Caller{}, err
		}
		c, err := a.bearerToken(r.Context(), tok, a.ResourceURL(ResourcePath(r.URL.Path)))
		return a.withSubjectToken(c, err, tok)
	case len(keys) == 1:
		key := strings.TrimSpace(keys[0])
		if key == "" {
			return Caller{}, fail(CodeInvalidRequest, "the X-API-Key header is empty: send the API key").tried(MethodAPIKey)
		}
		return a.apiKey(key, "X-API-Key header")
	case proxied:
		c, err := a.proxyCaller(pVals, gVals)
		return c, err.tried(MethodProxy)
	case a.dev != nil:
		c := *a.dev
		c.Groups = slices.Clone(c.Groups)
		return c, nil
	}
	return Caller{}, fail(CodeMissingCredentials, "the request carries no credentials: %s", a.howToAuthenticate())
}

func (a *Authenticator) issuerList() string {
	var out []string
	for _, o := range a.oauth {
		out = append(out, o.cfg.Issuer)
	}
	return strings.Join(out, " or ")
}

// introspects reports whether some authorization server introspects opaque tokens.
func (a *Authenticator) introspects() bool {
	return slices.ContainsFunc(a.oauth, func(o *oauthServer) bool { return o.cfg.Introspection != nil })
}

// oauthIssuerOf is the authorization server of auth.oauth a JWT's iss names, with its decoded
// claims and payload; nil when it names none (or cannot be read: the JWT path says why).
func (a *Authenticator) oauthIssuerOf(parts []string) (*oauthServer, claims, []byte) {
	if len(a.oauth) == 0 {
		return nil, nil, nil
	}
	payload, err := b64(parts[1])
	if err != nil {
		return nil, nil, nil
	}
	cl, err := decodeObject(payload)
	if err != nil {
		return nil, nil, nil
	}
	iss, _, err := cl.str("iss")
	if err != nil {
		return nil, nil, nil
	}
	o := a.oauthByIssuer[iss]
	if o == nil {
		return nil, nil, nil
	}
	return o, cl, payload
}

func (a *Authenticator) howToAuthenticate() string {
	var ways []string
	if len(a.oauth) > 0 {
		ways = append(ways, "send \"Authorization: Bearer <token>\" with an OAuth access token for this resource from "+a.issuerList())
	}
	if len(a.issuers) > 0 {
		ways = append(ways, "send \"Authorization: Bearer <token>\" with a JWT from a configured issuer")
	}
	if len(a.apiKeys) > 0 {
		ways = append(ways, "send \"X-API-Key: <key>\"")
	}
	if a.delegation != nil {
		ways = append(ways, "send \"Authorization: Bearer <token>\" with a delegation token from agentd")
	}
	if a.proxy != nil {
		ways = append(ways, "go through a trusted proxy that sets "+a.proxy.header)
	}
	if len(ways) == 0 {
		return "this server accepts no credentials" // unreachable: Validate requires a method
	}
	return strings.Join(ways, ", or ")
}

// bearer extracts the token of "Bearer <token>". Nothing of the header's value appears in the
// error: a client that forgot the scheme sends the bare token.
func bearer(v string) (string, *Error) {
	if len(v) > maxTokenLen {
		return "", fail(CodeInvalidRequest, "the Authorization header is longer than %d bytes", maxTokenLen)
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", fail(CodeInvalidRequest, "the Authorization header must be \"Bearer <token>\" (other schemes are not supported)")
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", fail(CodeInvalidRequest, "the Authorization header has no token after Bearer")
	}
	if strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", fail(CodeInvalidRequest, "the bearer token contains whitespace or control characters")
	}
	return tok, nil
}

// bearerToken routes a bearer token: delegation token, JWT (of a configured issuer, or an OAuth
// access token of a configured authorization server, by its iss), API key, or opaque OAuth
// access token (introspected when no API key matches). resource is the URL of the protected
// resource the request is for.
func (a *Authenticator) bearerToken(ctx context.Context, tok, resource string) (Caller, *Error) {
	parts, hdr, kind := sniff(tok)
	switch kind {
	case notJWT:
		if a.introspects() {
			if len(a.apiKeys) > 0 {
				if c, err := a.lookUpKey(tok, "bearer token"); err == nil {
					return c, nil
				}
			}
			c, err := a.introspect(ctx, tok, resource)
			return c, err.tried(MethodOAuth)
		}
		return a.apiKey(tok, "bearer token")
	case encryptedJWT:
		return Caller{}, fail(CodeInvalidToken, "encrypted tokens (JWE) are not supported: send a signed JWT").tried(MethodJWT)
	}
	if hdr.isDelegation() {
		if a.delegation == nil {
			return Caller{}, fail(CodeInvalidToken, "delegation tokens are not accepted here: configure auth.delegation.public_keys").tried(MethodDelegation)
		}
		c, err := a.delegation.verify(tok, parts, hdr, a.now())
		return c, err.tried(MethodDelegation)
	}
	if o, cl, payload := a.oauthIssuerOf(parts); o != nil {
		c, err := a.verifyOAuthJWT(ctx, o, tok, parts, hdr, cl, payload, resource)
		return c, err.tried(MethodOAuth)
	}
	if len(a.issuers) == 0 {
		return Caller{}, fail(CodeInvalidToken, "JWT bearer tokens are not accepted here: configure the issuer under auth.jwt or auth.oauth").tried(MethodJWT)
	}
	c, err := a.verifyJWT(ctx, tok, parts, hdr)
	return c, err.tried(MethodJWT)
}

// apiKey looks the key up by its SHA-256 digest, comparing every configured digest in constant
// time. A bearer token that is not a JWT is taken for an API key.
func (a *Authenticator) apiKey(key, where string) (Caller, *Error) {
	c, err := a.lookUpKey(key, where)
	return c, err.tried(MethodAPIKey)
}

func (a *Authenticator) lookUpKey(key, where string) (Caller, *Error) {
	if len(a.apiKeys) == 0 {
		if where == "bearer token" {
			return Caller{}, fail(CodeInvalidToken, "the bearer token is not a JWT, and no API keys are configured: send a JWT from a configured issuer")
		}
		return Caller{}, fail(CodeUnknownAPIKey, "API keys are not accepted here: configure them under auth.api_keys")
	}
	d := sha256.Sum256([]byte(key))
	found := -1
	for i := range a.apiKeys {
		if subtle.ConstantTimeCompare(d[:], a.apiKeys[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Caller{}, fail(CodeUnknownAPIKey, "the API key in the %s is not configured: check the key, or add its SHA-256 under auth.api_keys", where)
	}
	k := a.apiKeys[found]
	return Caller{ID: k.principal, Groups: slices.Clone(k.groups), Method: MethodAPIKey, Subject: k.name}, nil
}

func (p *proxyAuth) trusts(remoteAddr string) bool {
	ip, ok := parseRemote(remoteAddr)
	if !ok {
		return false
	}
	for _, pf := range p.trusted {
		if pf.Contains(ip) {
			return true
		}
	}
	return false
}

// parseRemote parses http.Request.RemoteAddr ("ip:port", "[ip]:port" or a bare IP).
func parseRemote(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.WithZone("").Unmap(), true
	}
	return netip.Addr{}, false
}

func remoteIP(s string) string {
	if ip, ok := parseRemote(s); ok {
		return ip.String()
	}
	return "an unknown address"
}

func (a *Authenticator) proxyCaller(pVals, gVals []string) (Caller, *Error) {
	ph, gh := a.proxy.header, a.proxy.groupsHeader
	switch {
	case len(pVals) == 0:
		return Caller{}, fail(CodeInvalidRequest, "the trusted proxy sent %s without %s: it must name the principal", gh, ph)
	case len(pVals) > 1:
		return Caller{}, fail(CodeInvalidRequest, "the trusted proxy sent %d %s headers: it must send exactly one", len(pVals), ph)
	}
	id := strings.TrimSpace(pVals[0])
	if _, err := principal.Parse(id); err != nil {
		return Caller{}, fail(CodeInvalidRequest, "the trusted proxy's %s header is not a principal: %v", ph, err)
	}
	var groups []string
	for _, v := range gVals {
		for g := range strings.SplitSeq(v, ",") {
			g = strings.TrimSpace(g)
			if g == "" {
				continue
			}
			if kind, _, _ := strings.Cut(g, ":"); kind == string(principal.User) || kind == string(principal.ServiceAccount) {
				return Caller{}, fail(CodeInvalidRequest, "the trusted proxy's %s header: %s is not a group", gh, shown(g))
			}
			if !strings.HasPrefix(g, "group:") {
				g = "group:" + g
			}
			if err := checkGroup(g); err != nil {
				return Caller{}, fail(CodeInvalidRequest, "the trusted proxy's %s header: %v", gh, err)
			}
			groups = append(groups, g)
			if len(groups) > maxGroups {
				return Caller{}, fail(CodeInvalidRequest, "the trusted proxy's %s header names more than %d groups", gh, maxGroups)
			}
		}
	}
	return Caller{ID: id, Groups: normGroups(groups), Method: MethodProxy, Subject: id}, nil
}

// normGroups returns groups sorted and unique, never nil.
func normGroups(groups []string) []string {
	out := slices.Clone(groups)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func canonicalHeader(h string) string { return http.CanonicalHeaderKey(h) }

// shown quotes an untrusted value for a message, cut to maxShownText bytes.
func shown(s string) string {
	if len(s) > maxShownText {
		s = s[:maxShownText] + "…"
	}
	return fmt.Sprintf("%q", s)
}

type callerKey struct{}

// WithCaller returns ctx carrying the authenticated caller.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller WithCaller put in ctx (the zero Caller when there is none).
func CallerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// ProxyHeaders are the header names a trusted proxy names callers with (the defaults when no
// proxy is configured): an enforcement point in front of an upstream removes them.
func (a *Authenticator) ProxyHeaders() (principal, groups string) {
	if a.proxy != nil {
		return a.proxy.header, a.proxy.groupsHeader
	}
	return DefaultProxyHeader, DefaultProxyGroupsHeader
}
