package identity

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zitadel/oidc/v3/pkg/client/rs"

	"github.com/lush-agents/lush/internal/principal"
)

// MethodOAuth is an OAuth 2.0 access token of a configured authorization server (auth.oauth).
const MethodOAuth Method = "oauth"

// Error codes of OAuth access tokens.
const (
	// CodeInsufficientScope is a valid access token without the scopes the resource requires
	// (403: the client may ask for them, RFC 6750 section 3.1).
	CodeInsufficientScope = "insufficient_scope"
	// CodeAuthServerUnavailable is an access token that cannot be checked because its
	// authorization server's metadata, keys or introspection endpoint cannot be reached (fail
	// closed).
	CodeAuthServerUnavailable = "auth_server_unavailable"
)

const (
	// discoveryTimeout bounds one metadata fetch.
	discoveryTimeout = 10 * time.Second
	// rediscoverEvery is how often a token of an authorization server whose metadata could not
	// be fetched may make Lush try again (besides the background retries).
	rediscoverEvery = time.Minute
	// retryBackoff is the first and longest wait of the background discovery retries.
	retryBackoffMin, retryBackoffMax = 5 * time.Second, 5 * time.Minute
	// maxMetadataBytes bounds a metadata document and an introspection answer.
	maxMetadataBytes = 256 << 10
	// maxIntrospected bounds the introspection cache.
	maxIntrospected = 10000
)

// oauthServer is one authorization server of auth.oauth: its configuration, and what discovery
// found (swapped whole when metadata is fetched again).
type oauthServer struct {
	cfg       OAuthConfig
	field     string // auth.oauth[i]
	leeway    time.Duration
	allowed   []string
	refresh   time.Duration // metadata
	jwksEvery time.Duration
	secret    string // introspection client secret, read from its file; never shown

	state atomic.Pointer[oauthState]

	mu          sync.Mutex // serialises discovery
	lastAttempt time.Time

	cacheMu sync.Mutex
	cache   map[[sha256.Size]byte]introspected
}

// oauthState is what discovery found: the keys of jwks_uri, the introspection client; or why
// discovery failed.
type oauthState struct {
	jwks          *issuer // verifies JWT access tokens; nil without jwks_uri
	introspection rs.ResourceServer
	err           error // discovery failed (no usable state yet)
}

// introspected is an active introspection answer, believed until until.
type introspected struct {
	claims claims
	until  time.Time
}

// oauthMetadata is the part of RFC 8414 / OpenID Connect discovery metadata Lush reads.
type oauthMetadata struct {
	Issuer                string `json:"issuer"`
	JWKSURI               string `json:"jwks_uri"`
	IntrospectionEndpoint string `json:"introspection_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
}

// newOAuthServers prepares auth.oauth and discovers each server once. A server that cannot be
// discovered does not fail New (API keys and other methods keep working): its tokens are
// refused with CodeAuthServerUnavailable while the Authenticator retries in the background.
func (a *Authenticator) newOAuthServers(ctx context.Context, list []OAuthConfig) error {
	if len(list) == 0 {
		return nil
	}
	if a.jwks == nil {
		f, err := newJWKSFetcher(ctx)
		if err != nil {
			return fmt.Errorf("auth.oauth: %w", err)
		}
		a.jwks = f
	}
	a.oauthClient = boundedClient(a.jwks.client)
	for i, c := range list {
		o := &oauthServer{cfg: c, field: fmt.Sprintf("auth.oauth[%d]", i), leeway: c.Leeway, allowed: c.Algorithms,
			refresh: c.MetadataRefresh, jwksEvery: c.JWKSRefresh, cache: map[[sha256.Size]byte]introspected{}}
		if o.leeway == 0 {
			o.leeway = DefaultLeeway
		}
		if len(o.allowed) == 0 {
			o.allowed = defaultAlgorithms
		}
		if o.refresh == 0 {
			o.refresh = DefaultMetadataRefresh
		}
		if o.jwksEvery == 0 {
			o.jwksEvery = DefaultJWKSRefresh
		}
		if in := c.Introspection; in != nil {
			b, err := os.ReadFile(in.ClientSecretFile)
			if err != nil {
				return fmt.Errorf("%s.introspection.client_secret_file: read the client secret: %w", o.field, err)
			}
			o.secret = strings.TrimRight(string(b), "\r\n")
			if o.secret == "" {
				return fmt.Errorf("%s.introspection.client_secret_file: %s is empty: write the client secret into it", o.field, in.ClientSecretFile)
			}
		}
		a.oauth = append(a.oauth, o)
		a.oauthByIssuer[c.Issuer] = o
		a.discover(ctx, o)
	}
	for _, o := range a.oauth {
		a.goroutines.Add(1)
		go a.maintain(o)
	}
	return nil
}

// maintain (one goroutine per authorization server, owned by the Authenticator, ended by
// Close) fetches the server's metadata again every metadata_refresh, and retries with backoff
// while it has never been fetched.
func (a *Authenticator) maintain(o *oauthServer) {
	defer a.goroutines.Done()
	backoff := retryBackoffMin
	for {
		wait := o.refresh
		if st := o.state.Load(); st == nil || st.err != nil {
			wait = backoff
			backoff = min(2*backoff, retryBackoffMax)
		} else {
			backoff = retryBackoffMin
		}
		t := time.NewTimer(wait)
		select {
		case <-a.bg.Done():
			t.Stop()
			return
		case <-t.C:
		}
		a.discover(a.bg, o)
	}
}

// rediscover tries discovery again for a token of a server that has never been discovered, at
// most once per rediscoverEvery; a token arriving while a discovery runs does not wait for it.
func (a *Authenticator) rediscover(ctx context.Context, o *oauthServer) *oauthState {
	if !o.mu.TryLock() {
		return o.state.Load()
	}
	defer o.mu.Unlock()
	if now := a.now(); o.lastAttempt.IsZero() || now.Sub(o.lastAttempt) >= rediscoverEvery {
		a.discoverLocked(ctx, o)
	}
	return o.state.Load()
}

// discover fetches the server's metadata again (discoverLocked), after a discovery in progress.
func (a *Authenticator) discover(ctx context.Context, o *oauthServer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	a.discoverLocked(ctx, o)
}

// discoverLocked fetches the server's metadata and stores what it found. On failure it keeps
// what an earlier discovery found (whose keys keep verifying), or records why there is nothing
// yet. o.mu is held.
func (a *Authenticator) discoverLocked(ctx context.Context, o *oauthServer) {
	o.lastAttempt = a.now()
	st, err := a.discovered(ctx, o)
	switch prev := o.state.Load(); {
	case err == nil:
		o.state.Store(st)
	case prev == nil || prev.err != nil:
		o.state.Store(&oauthState{err: err})
	}
}

// discovered fetches the server's metadata, checks its issuer, and prepares its keys and
// introspection client.
func (a *Authenticator) discovered(ctx context.Context, o *oauthServer) (*oauthState, error) {
	md, err := fetchMetadata(ctx, a.oauthClient, o.cfg.Issuer)
	if err != nil {
		return nil, err
	}
	st := &oauthState{}
	if md.JWKSURI != "" {
		if err := checkJWKSURL(md.JWKSURI); err != nil {
			return nil, fmt.Errorf("the metadata of %s names jwks_uri %w", o.cfg.Issuer, err)
		}
		prev := o.state.Load()
		if prev != nil && prev.jwks != nil && prev.jwks.remote.url == md.JWKSURI {
			st.jwks = prev.jwks
		} else {
			rs, err := a.jwks.register(ctx, md.JWKSURI, o.jwksEvery)
			if err != nil {
				return nil, fmt.Errorf("fetch the keys of %s: %w", o.cfg.Issuer, err)
			}
			st.jwks = &issuer{name: o.cfg.Issuer, field: o.field, allowed: o.allowed, leeway: o.leeway, remote: rs}
		}
	}
	if o.cfg.Introspection != nil {
		endpoint := o.cfg.Introspection.Endpoint
		if endpoint == "" {
			endpoint = md.IntrospectionEndpoint
			if endpoint == "" {
				return nil, fmt.Errorf("%s.introspection is configured, but the metadata of %s names no introspection_endpoint: set %s.introspection.endpoint", o.field, o.cfg.Issuer, o.field)
			}
			if err := checkJWKSURL(endpoint); err != nil {
				return nil, fmt.Errorf("the metadata of %s names introspection_endpoint %w", o.cfg.Issuer, err)
			}
		}
		token := md.TokenEndpoint
		if token == "" {
			token = endpoint // rs requires one; Lush never asks it for tokens
		}
		c, err := rs.NewResourceServerClientCredentials(ctx, o.cfg.Issuer, o.cfg.Introspection.ClientID, o.secret,
			rs.WithStaticEndpoints(token, endpoint), rs.WithClient(a.oauthClient))
		if err != nil {
			return nil, fmt.Errorf("prepare the introspection client of %s: %w", o.cfg.Issuer, err)
		}
		st.introspection = c
	}
	if st.jwks == nil && st.introspection == nil {
		return nil, fmt.Errorf("the metadata of %s names no jwks_uri, so its JWT access tokens cannot be verified: configure %s.introspection for opaque tokens", o.cfg.Issuer, o.field)
	}
	return st, nil
}

// metadataURLs are where an issuer's metadata may be, in order: RFC 8414's well-known URI
// (inserted between host and path), then OpenID Connect discovery (appended to the path, and,
// for issuers with a path, inserted as RFC 8414 does).
func metadataURLs(issuer string) []string {
	u, err := url.Parse(issuer)
	if err != nil {
		return nil
	}
	path := strings.TrimSuffix(u.Path, "/")
	at := func(p string) string {
		v := *u
		v.Path, v.RawPath = p, ""
		return v.String()
	}
	out := []string{at("/.well-known/oauth-authorization-server" + path), at(path + "/.well-known/openid-configuration")}
	if path != "" {
		out = append(out, at("/.well-known/openid-configuration"+path))
	}
	return out
}

// fetchMetadata fetches an issuer's metadata from the first of its well-known URLs that has it,
// and checks that it names the same issuer (RFC 8414 section 3.3).
func fetchMetadata(ctx context.Context, client *http.Client, issuer string) (*oauthMetadata, error) {
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	var errs []error
	for _, u := range metadataURLs(issuer) {
		md, err := getMetadata(ctx, client, u)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if md.Issuer != issuer {
			return nil, fmt.Errorf("the metadata at %s names issuer %s, not %s: set auth.oauth[].issuer to exactly the issuer the server names", u, shown(md.Issuer), issuer)
		}
		return md, nil
	}
	return nil, fmt.Errorf("discover the authorization server %s: %w", issuer, errors.Join(errs...))
}

func getMetadata(ctx context.Context, client *http.Client, u string) (*oauthMetadata, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var md oauthMetadata
	if err := json.NewDecoder(resp.Body).Decode(&md); err != nil {
		return nil, fmt.Errorf("GET %s: not a metadata document: %w", u, err)
	}
	return &md, nil
}

// boundedClient is c with every response body cut at maxMetadataBytes (a larger one fails to
// decode) and no redirects but to https or loopback.
func boundedClient(c *http.Client) *http.Client {
	bc := *c
	bc.Transport = limitedTransport{c.Transport}
	return &bc
}

type limitedTransport struct{ next http.RoundTripper }

func (t limitedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = limitedBody{io.LimitReader(resp.Body, maxMetadataBytes), resp.Body}
	return resp, nil
}

type limitedBody struct {
	io.Reader
	io.Closer
}

// verifyOAuthJWT verifies a JWT access token of authorization server o for resource, the URL of
// the resource the request is for.
func (a *Authenticator) verifyOAuthJWT(ctx context.Context, o *oauthServer, tok string, parts []string, hdr joseHeader, cl claims, payload []byte, resource string) (Caller, *Error) {
	st := o.state.Load()
	if st.err != nil {
		st = a.rediscover(ctx, o)
	}
	switch {
	case st.err != nil:
		return Caller{}, fail(CodeAuthServerUnavailable, "the authorization server %s has not been reached yet, so its tokens cannot be checked: %s (Lush retries in the background; check that the server is up)", o.cfg.Issuer, safeCause(st.err))
	case st.jwks == nil:
		return Caller{}, fail(CodeInvalidToken, "the authorization server %s publishes no keys (jwks_uri), so its JWT access tokens cannot be verified", o.cfg.Issuer)
	}
	switch t := strings.TrimPrefix(strings.ToLower(hdr.Typ), "application/"); {
	case hdr.bad != "":
		return Caller{}, fail(CodeInvalidToken, "%s", hdr.bad)
	case t != "" && t != "jwt" && t != "at+jwt":
		return Caller{}, fail(CodeInvalidToken, "the token's typ %s is not an access token's (at+jwt or JWT): send an access token, not an ID token or another JWT", shown(hdr.Typ))
	case strings.EqualFold(hdr.Alg, "none"):
		return Caller{}, fail(CodeInvalidToken, "unsigned tokens (alg none) are never accepted: send a signed token")
	case !slices.Contains(o.allowed, hdr.Alg):
		return Caller{}, fail(CodeInvalidToken, "algorithm %s is not allowed for authorization server %s (allowed: %s): add it to %s.algorithms if the server really signs with it", shown(hdr.Alg), o.cfg.Issuer, strings.Join(o.allowed, ", "), o.field)
	}
	verified, e := a.verifySignature(ctx, st.jwks, tok, hdr)
	if e != nil {
		return Caller{}, e
	}
	if string(verified) != string(payload) {
		return Caller{}, fail(CodeInvalidToken, "the token's payload is not canonical base64url")
	}
	if _, _, e := checkTimes(cl, a.now(), o.leeway, "token"); e != nil {
		return Caller{}, e
	}
	return a.oauthCaller(o, cl, resource)
}

// introspect asks the authorization servers with introspection about an opaque token, in the
// order configured, and returns the caller of the first that says it is active. Active answers
// are cached by the token's SHA-256 until min(exp, cache_ttl).
func (a *Authenticator) introspect(ctx context.Context, tok, resource string) (Caller, *Error) {
	digest := sha256.Sum256([]byte(tok))
	var unavailable []string
	for _, o := range a.oauth {
		if o.cfg.Introspection == nil {
			continue
		}
		if cl, ok := o.cached(digest, a.now()); ok {
			return a.oauthCaller(o, cl, resource)
		}
		st := o.state.Load()
		if st.err != nil {
			st = a.rediscover(ctx, o)
		}
		if st.err != nil || st.introspection == nil {
			unavailable = append(unavailable, o.cfg.Issuer)
			continue
		}
		raw, err := rs.Introspect[json.RawMessage](ctx, st.introspection, tok)
		if err != nil {
			unavailable = append(unavailable, o.cfg.Issuer)
			continue
		}
		cl, err := decodeObject(raw)
		if err != nil {
			unavailable = append(unavailable, o.cfg.Issuer)
			continue
		}
		var active bool
		if err := json.Unmarshal(cl["active"], &active); err != nil || !active {
			continue
		}
		if iss, ok, _ := cl.str("iss"); ok && iss != o.cfg.Issuer {
			return Caller{}, fail(CodeInvalidToken, "the introspection endpoint of %s says the token was issued by %s", o.cfg.Issuer, shown(iss))
		}
		// A refresh token is active too: only access tokens are accepted (token_use is Hydra's,
		// token_type RFC 7662's).
		if use, ok, _ := cl.str("token_use"); ok && use != "access_token" {
			return Caller{}, fail(CodeInvalidToken, "the token is a %s, not an access token: send the access token", shown(use))
		}
		if typ, ok, _ := cl.str("token_type"); ok && strings.Contains(strings.ToLower(typ), "refresh") {
			return Caller{}, fail(CodeInvalidToken, "the token is a %s, not an access token: send the access token", shown(typ))
		}
		exp, _, e := checkTimes(cl, a.now(), o.leeway, "token")
		if e != nil {
			return Caller{}, e
		}
		ttl := DefaultIntrospectionTTL
		if o.cfg.Introspection.CacheTTL > 0 {
			ttl = o.cfg.Introspection.CacheTTL
		}
		until := a.now().Add(ttl)
		if exp.Before(until) {
			until = exp
		}
		o.store(digest, cl, until)
		return a.oauthCaller(o, cl, resource)
	}
	if len(unavailable) > 0 {
		return Caller{}, fail(CodeAuthServerUnavailable, "the token could not be introspected: the introspection endpoint of %s did not answer as expected; retry later", strings.Join(unavailable, ", "))
	}
	return Caller{}, fail(CodeInvalidToken, "the token is not active (introspection): it expired, was revoked, or was never issued: obtain a new token")
}

func (o *oauthServer) cached(d [sha256.Size]byte, now time.Time) (claims, bool) {
	o.cacheMu.Lock()
	defer o.cacheMu.Unlock()
	e, ok := o.cache[d]
	if !ok || !now.Before(e.until) {
		return nil, false
	}
	return e.claims, true
}

func (o *oauthServer) store(d [sha256.Size]byte, cl claims, until time.Time) {
	o.cacheMu.Lock()
	defer o.cacheMu.Unlock()
	if len(o.cache) >= maxIntrospected {
		now := time.Now()
		for k, e := range o.cache {
			if !now.Before(e.until) {
				delete(o.cache, k)
			}
		}
		if len(o.cache) >= maxIntrospected {
			clear(o.cache)
		}
	}
	o.cache[d] = introspected{claims: cl, until: until}
}

// oauthCaller checks a verified (or introspected) token's audience and scopes for resource and
// maps its claims to the caller.
func (a *Authenticator) oauthCaller(o *oauthServer, cl claims, resource string) (Caller, *Error) {
	aud, ok, err := cl.audience()
	switch {
	case err != nil:
		return Caller{}, fail(CodeInvalidToken, "the token's %v", err)
	case !ok:
		return Caller{}, fail(CodeInvalidToken, "the token has no aud claim: request a token for the resource %s (RFC 8707 resource parameter)", resource)
	case !slices.Contains(aud, resource) && !intersects(aud, o.cfg.Audiences):
		return Caller{}, fail(CodeInvalidToken, "the token's audience %s does not include this resource, %s: request a token for it (RFC 8707 resource parameter)%s", shownList(aud), resource, audienceHint(o))
	}
	scopes, e := tokenScopes(cl)
	if e != nil {
		return Caller{}, e
	}
	var missing []string
	for _, s := range o.cfg.Scopes {
		if !slices.Contains(scopes, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return Caller{}, fail(CodeInsufficientScope, "the token lacks the scope %s that this resource requires: ask the authorization server for scope %q", strings.Join(missing, ", "), strings.Join(o.cfg.Scopes, " ")).tried(MethodOAuth)
	}
	claimsOf := o.cfg.Claims
	subClaim := orDefault(claimsOf.Subject, "sub")
	clientClaim := orDefault(claimsOf.ClientID, "client_id")
	groupsClaim := orDefault(claimsOf.Groups, "groups")
	client, _, err := cl.str(clientClaim)
	if err != nil {
		return Caller{}, fail(CodeInvalidToken, "the token's %v: set %s.claims.client_id to a string claim", err, o.field)
	}
	if o.isServiceAccount(cl, subClaim, client) {
		if client == "" {
			return Caller{}, fail(CodeInvalidToken, "the token is a client's own token but has no %s claim: set %s.claims.client_id to the claim naming the client", shown(clientClaim), o.field)
		}
		id := string(principal.ServiceAccount) + ":" + client
		if _, err := principal.Parse(id); err != nil {
			return Caller{}, fail(CodeInvalidToken, "the token's client id does not form a principal: %v", err)
		}
		groups, e := tokenGroups(cl, groupsClaim)
		if e != nil {
			return Caller{}, e
		}
		return Caller{ID: id, Groups: groups, Method: MethodOAuth, Subject: client}, nil
	}
	principalClaim := subClaim
	if o.cfg.PrincipalClaim == "email" {
		principalClaim = orDefault(claimsOf.Email, "email")
	}
	c, e := claimsCaller(cl, "token", o.field, principalClaim, string(principal.User), groupsClaim, MethodOAuth)
	if e != nil && principalClaim != subClaim {
		e.Message = strings.Replace(e.Message, ".subject_claim", ".claims.email", 1)
	} else if e != nil {
		e.Message = strings.Replace(e.Message, ".subject_claim", ".claims.subject", 1)
	}
	return c, e
}

// isServiceAccount reports whether a token is a client acting for itself.
func (o *oauthServer) isServiceAccount(cl claims, subClaim, client string) bool {
	sa := o.cfg.ServiceAccount
	switch {
	case sa.Disabled:
		return false
	case sa.Claim != "":
		v, _, err := cl.str(sa.Claim)
		return err == nil && v == sa.Value
	}
	sub, _, _ := cl.str(subClaim)
	return client != "" && sub == client
}

func audienceHint(o *oauthServer) string {
	if len(o.cfg.Audiences) == 0 {
		return ""
	}
	return " or for one of " + strings.Join(o.cfg.Audiences, ", ")
}

// tokenScopes reads scope (space-separated, RFC 8693/9068) or scp (an array, or a string).
func tokenScopes(cl claims) ([]string, *Error) {
	for _, name := range []string{"scope", "scp"} {
		if _, ok := cl[name]; !ok {
			continue
		}
		if s, _, err := cl.str(name); err == nil {
			out := strings.Fields(s)
			if len(out) > maxGroups {
				return nil, fail(CodeInvalidToken, "the token's %s claim has more than %d scopes", name, maxGroups)
			}
			return out, nil
		}
		list, _, err := cl.strs(name)
		if err != nil {
			return nil, fail(CodeInvalidToken, "the token's %s claim must be a space separated string or an array of strings", name)
		}
		if len(list) > maxGroups {
			return nil, fail(CodeInvalidToken, "the token's %s claim has more than %d scopes", name, maxGroups)
		}
		return list, nil
	}
	return nil, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// safeCause is a discovery error's text, cut: it names URLs and statuses, never a credential.
func safeCause(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", "; ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// OAuthProblems are the authorization servers of auth.oauth that have not been discovered yet,
// each with why: their tokens are refused until discovery succeeds (it is retried in the
// background). The composition root logs them at start.
func (a *Authenticator) OAuthProblems() []error {
	var out []error
	for _, o := range a.oauth {
		if st := o.state.Load(); st != nil && st.err != nil {
			out = append(out, fmt.Errorf("%s: %s: its tokens are refused until it is reached (retried in the background)", o.field, safeCause(st.err)))
		}
	}
	return out
}
