package identity

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/lush-agents/lush/internal/principal"
)

// Config maps onto the `auth:` section of the gateway's YAML config (yaml tags, snake_case).
// At least one method must be configured: a gateway without authentication is a config error.
type Config struct {
	JWT        []JWTConfig       `yaml:"jwt"`
	APIKeys    []APIKeyConfig    `yaml:"api_keys"`
	Proxy      *ProxyConfig      `yaml:"trusted_proxy"`
	Dev        *DevConfig        `yaml:"dev"`
	Delegation *DelegationConfig `yaml:"delegation"`
	// OAuth makes this server an OAuth 2.0 protected resource (RFC 9728, the MCP authorization
	// specification): access tokens of these authorization servers are accepted when issued for
	// the endpoint called.
	OAuth []OAuthConfig `yaml:"oauth"`
	// ResourceURL is this server's public base URL (scheme, host, optional path prefix), the
	// prefix of every protected resource's identifier: an agent's MCP endpoint is the resource
	// <resource_url>/agents/<name>/mcp. Default: derived from the listen address
	// (http://127.0.0.1:8080 for :8080). Set it whenever clients reach the server through
	// another name (a load balancer, an ingress, https).
	ResourceURL string `yaml:"resource_url"`
}

// OAuthConfig accepts the access tokens of one OAuth 2.0 authorization server, discovered from
// its issuer identifier (RFC 8414 metadata, else OpenID Connect discovery): JWT access tokens
// (RFC 9068) verified with its JWKS, and, with introspection, opaque tokens (RFC 7662).
type OAuthConfig struct {
	Issuer string `yaml:"issuer"` // required: the authorization server's issuer identifier, exactly as in its metadata and the tokens' iss
	// Audiences are accepted in aud besides the URL of the resource called (identity providers
	// that put their own application id in aud). Optional.
	Audiences []string `yaml:"audiences"`
	// Scopes a token must all carry (scope or scp); advertised as scopes_supported and in the
	// WWW-Authenticate challenge. A valid token without them is refused with 403
	// insufficient_scope.
	Scopes        []string             `yaml:"scopes"`
	Algorithms    []string             `yaml:"algorithms"` // default [RS256, ES256]; never none or HS*
	Introspection *IntrospectionConfig `yaml:"introspection"`
	Claims        OAuthClaims          `yaml:"claims"`
	// PrincipalClaim is which claim names the user: sub (default, principal user:<sub>) or email
	// (user:<email>).
	PrincipalClaim string `yaml:"principal_claim"`
	// ServiceAccount says which tokens are a client's own (machine to machine, client
	// credentials): they act as serviceaccount:<client id>.
	ServiceAccount  ServiceAccountConfig `yaml:"service_account"`
	Leeway          time.Duration        `yaml:"leeway"`           // clock skew, default 30s, max 5m
	MetadataRefresh time.Duration        `yaml:"metadata_refresh"` // default 1h, at least 1m
	JWKSRefresh     time.Duration        `yaml:"jwks_refresh"`     // default 15m, at least 1m
}

// OAuthClaims names the claims an access token's caller is read from.
type OAuthClaims struct {
	Subject  string `yaml:"subject"`   // default sub
	Email    string `yaml:"email"`     // default email (used with principal_claim: email)
	Groups   string `yaml:"groups"`    // default groups: an array of strings, or a space or comma separated string
	ClientID string `yaml:"client_id"` // default client_id (RFC 9068); azp for some identity providers
}

// IntrospectionConfig is how Lush authenticates to the authorization server's RFC 7662
// introspection endpoint to ask about opaque access tokens.
type IntrospectionConfig struct {
	// Endpoint is the introspection endpoint when the server's metadata names none (Hydra's is
	// on its admin port); default: the metadata's introspection_endpoint.
	Endpoint         string        `yaml:"endpoint"`
	ClientID         string        `yaml:"client_id"`          // required
	ClientSecretFile string        `yaml:"client_secret_file"` // required: a file holding the client secret (never the secret itself)
	CacheTTL         time.Duration `yaml:"cache_ttl"`          // how long an active answer is believed, at most until the token's exp; default 1m, max 10m
}

// ServiceAccountConfig says which access tokens are a client acting for itself. By default
// those whose subject is their client id (the client credentials grant of most servers,
// Hydra's included); with claim and value, those whose claim has that value (Auth0: gty
// client-credentials). Disabled: every token acts as a user.
type ServiceAccountConfig struct {
	Claim    string `yaml:"claim"`
	Value    string `yaml:"value"`
	Disabled bool   `yaml:"disabled"`
}

// JWTConfig accepts bearer JWTs from one issuer.
type JWTConfig struct {
	Issuer        string        `yaml:"issuer"`         // required, exact match of iss
	Audiences     []string      `yaml:"audiences"`      // required, at least one must be in aud
	JWKSURL       string        `yaml:"jwks_url"`       // one of jwks_url / key_file
	KeyFile       string        `yaml:"key_file"`       // PEM public key(s), a JWKS JSON file, or (HS*) a file holding the secret
	Algorithms    []string      `yaml:"algorithms"`     // allowed; default [RS256, ES256]; HS* only with key_file
	SubjectClaim  string        `yaml:"subject_claim"`  // default "sub"
	PrincipalKind string        `yaml:"principal_kind"` // "user" (default) or "serviceaccount": principal = <kind>:<subject>
	GroupsClaim   string        `yaml:"groups_claim"`   // default "groups"; array of strings or space/comma separated string; "a" -> "group:a"
	Leeway        time.Duration `yaml:"leeway"`         // clock skew, default 30s, max 5m
	JWKSRefresh   time.Duration `yaml:"jwks_refresh"`   // default 15m, at least 1m
}

// APIKeyConfig maps one API key, known only by its digest, to a principal.
type APIKeyConfig struct {
	Name      string   `yaml:"name"`      // for logs
	SHA256    string   `yaml:"sha256"`    // hex SHA-256 of the key: config never holds the key itself
	Principal string   `yaml:"principal"` // e.g. serviceaccount:ci
	Groups    []string `yaml:"groups"`    // group:<name>
}

// ProxyConfig names the proxies (an ingress, Envoy in mesh mode) whose identity headers are
// believed. The header from any other address is refused.
type ProxyConfig struct {
	Trusted      []string `yaml:"trusted"`       // CIDRs or IPs of proxies whose headers are believed
	Header       string   `yaml:"header"`        // default "X-Lush-Principal"
	GroupsHeader string   `yaml:"groups_header"` // default "X-Lush-Groups" (comma separated)
}

// DevConfig authenticates requests that present no credentials at all as one fixed principal.
// For local development only.
type DevConfig struct {
	Principal string   `yaml:"principal"` // e.g. user:dev
	Groups    []string `yaml:"groups"`
}

// DelegationConfig accepts delegation tokens signed by agentd.
type DelegationConfig struct {
	PublicKeys []string      `yaml:"public_keys"` // files with Ed25519 public keys (PEM) that may sign delegation tokens; key id = the key's JWK thumbprint
	MaxTTL     time.Duration `yaml:"max_ttl"`     // default 5m, at most 10m; tokens living longer are refused
	Audience   string        `yaml:"audience"`    // default "lush-gateway"
	// Keys are public keys given in code rather than files: a process that runs agentd and the
	// gateway together verifies the tokens of its own signer this way.
	Keys []ed25519.PublicKey `yaml:"-"`
}

// Defaults and limits.
const (
	DefaultLeeway             = 30 * time.Second
	MaxLeeway                 = 5 * time.Minute
	DefaultJWKSRefresh        = 15 * time.Minute
	MinJWKSRefresh            = time.Minute
	DefaultProxyHeader        = "X-Lush-Principal"
	DefaultProxyGroupsHeader  = "X-Lush-Groups"
	DefaultDelegationAudience = "lush-gateway"
	DefaultDelegationMaxTTL   = 5 * time.Minute
	// MaxDelegationTTL bounds both Signer.Sign and DelegationConfig.MaxTTL.
	MaxDelegationTTL = 10 * time.Minute
	// DelegationIssuer is the iss of every delegation token; no JWT issuer may use it.
	DelegationIssuer = "lush-agentd"
	// DelegationType is the typ header of delegation tokens.
	DelegationType = "lush-delegation+jwt"

	DefaultMetadataRefresh  = time.Hour
	MinMetadataRefresh      = time.Minute
	DefaultIntrospectionTTL = time.Minute
	MaxIntrospectionTTL     = 10 * time.Minute
)

var defaultAlgorithms = []string{"RS256", "ES256"}

// algorithms Lush verifies, by family.
var knownAlgorithms = map[string]string{
	"RS256": "RSA", "RS384": "RSA", "RS512": "RSA",
	"PS256": "RSA", "PS384": "RSA", "PS512": "RSA",
	"ES256": "EC", "ES384": "EC", "ES512": "EC",
	"EdDSA": "OKP",
	"HS256": "HMAC", "HS384": "HMAC", "HS512": "HMAC",
}

// reserved headers a proxy header must not reuse.
var reservedHeaders = map[string]bool{"Authorization": true, "X-Api-Key": true, "Cookie": true, "Host": true}

// Validate checks a config and returns an error naming each bad field (e.g.
// `auth.jwt[0].issuer: required`); several problems are joined into one error.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	c.validateConfigured(add)
	validateJWTs(c.JWT, add)
	validateAPIKeys(c.APIKeys, add)
	if p := c.Proxy; p != nil {
		p.validate(add)
	}
	if d := c.Dev; d != nil {
		d.validate(add)
	}
	if d := c.Delegation; d != nil {
		d.validate(add)
	}
	validateOAuth(c.OAuth, c.JWT, add)
	if c.ResourceURL != "" {
		if err := checkResourceURL(c.ResourceURL); err != nil {
			add("auth.resource_url", "%v", err)
		}
	}
	return errors.Join(errs...)
}

// addFunc records that a field is bad, with a message made of format and args. The checks of
// Validate (and of EnvoyConfig.Validate) call it in the order their problems are reported.
type addFunc = func(field, format string, args ...any)

// validateConfigured checks the config as a whole: at least one authentication method is
// configured.
func (c Config) validateConfigured(add addFunc) {
	if !c.Configured() {
		add("auth", "no authentication method configured: add jwt, oauth, api_keys, trusted_proxy, delegation or (for local development) dev")
	}
}

// validateJWTs checks each issuer of auth.jwt, and that no two of them name the same issuer.
func validateJWTs(jwts []JWTConfig, add addFunc) {
	issuers := map[string]int{}
	for i, j := range jwts {
		f := fmt.Sprintf("auth.jwt[%d]", i)
		switch {
		case j.Issuer == "":
			add(f+".issuer", "required (the exact iss of the tokens)")
		case j.Issuer == DelegationIssuer:
			add(f+".issuer", "%q is reserved for delegation tokens: configure auth.delegation instead", DelegationIssuer)
		default:
			if prev, dup := issuers[j.Issuer]; dup {
				add(f+".issuer", "%q is already configured at auth.jwt[%d]: list every audience there", j.Issuer, prev)
			} else {
				issuers[j.Issuer] = i
			}
		}
		j.validate(f, add)
	}
}

// validate checks one issuer's fields other than issuer itself, named under f (auth.jwt[i]).
func (j JWTConfig) validate(f string, add addFunc) {
	if len(j.Audiences) == 0 {
		add(f+".audiences", "required: list at least one audience the tokens must carry in aud")
	}
	for k, a := range j.Audiences {
		if strings.TrimSpace(a) == "" {
			add(fmt.Sprintf("%s.audiences[%d]", f, k), "empty audience")
		}
	}
	hmac, asym := validateAlgorithms(f, j.Algorithms, add)
	switch {
	case j.JWKSURL == "" && j.KeyFile == "":
		add(f, "set one of jwks_url or key_file")
	case j.JWKSURL != "" && j.KeyFile != "":
		add(f, "set only one of jwks_url and key_file")
	case j.JWKSURL != "":
		if err := checkJWKSURL(j.JWKSURL); err != nil {
			add(f+".jwks_url", "%v", err)
		}
	}
	if hmac && asym {
		add(f+".algorithms", "HMAC (HS*) and public-key algorithms cannot be mixed for one issuer: the key file holds either an HMAC secret or public keys")
	}
	if hmac && j.JWKSURL != "" {
		add(f+".algorithms", "HS* needs key_file with the shared secret; keys from jwks_url are never used as HMAC secrets")
	}
	switch j.PrincipalKind {
	case "", string(principal.User), string(principal.ServiceAccount):
	default:
		add(f+".principal_kind", "%q: use user or serviceaccount", j.PrincipalKind)
	}
	switch {
	case j.Leeway < 0:
		add(f+".leeway", "must not be negative")
	case j.Leeway > MaxLeeway:
		add(f+".leeway", "%s is more than the maximum %s", j.Leeway, MaxLeeway)
	}
	switch {
	case j.JWKSRefresh < 0:
		add(f+".jwks_refresh", "must not be negative")
	case j.JWKSRefresh != 0 && j.JWKSURL == "":
		add(f+".jwks_refresh", "applies only with jwks_url")
	case j.JWKSRefresh != 0 && j.JWKSRefresh < MinJWKSRefresh:
		add(f+".jwks_refresh", "%s is less than the minimum %s", j.JWKSRefresh, MinJWKSRefresh)
	}
}

// validateAlgorithms checks an issuer's algorithms, named under f (auth.jwt[i]), and reports
// whether they include HMAC (HS*) and public-key ones.
func validateAlgorithms(f string, algorithms []string, add addFunc) (hmac, asym bool) {
	for k, a := range algorithms {
		af := fmt.Sprintf("%s.algorithms[%d]", f, k)
		fam, ok := knownAlgorithms[a]
		switch {
		case strings.EqualFold(a, "none"):
			add(af, "unsigned tokens (none) are never accepted: remove it")
		case !ok:
			add(af, "unknown algorithm %q: use one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA, HS256, HS384, HS512", a)
		case fam == "HMAC":
			hmac = true
		default:
			asym = true
		}
	}
	return hmac, asym
}

// validateAPIKeys checks each key of auth.api_keys, and that no two of them share a name or a
// digest.
func validateAPIKeys(keys []APIKeyConfig, add addFunc) {
	names, digests := map[string]int{}, map[string]int{}
	for i, k := range keys {
		f := fmt.Sprintf("auth.api_keys[%d]", i)
		if k.Name == "" {
			add(f+".name", "required (it names the key in logs)")
		} else if prev, dup := names[k.Name]; dup {
			add(f+".name", "%q is already used by auth.api_keys[%d]", k.Name, prev)
		} else {
			names[k.Name] = i
		}
		d := strings.ToLower(k.SHA256)
		switch {
		case d == "":
			add(f+".sha256", "required: the hex SHA-256 of the key (printf %%s \"$KEY\" | sha256sum), never the key itself")
		case len(d) != 64 || !isHex(d):
			add(f+".sha256", "must be 64 hex digits, the SHA-256 of the key (printf %%s \"$KEY\" | sha256sum); the config must never hold the key itself")
		default:
			if prev, dup := digests[d]; dup {
				add(f+".sha256", "the same key is already configured at auth.api_keys[%d]", prev)
			} else {
				digests[d] = i
			}
		}
		checkPrincipal(add, f+".principal", k.Principal)
		checkGroups(add, f+".groups", k.Groups)
	}
}

// validate checks auth.trusted_proxy.
func (p ProxyConfig) validate(add addFunc) {
	f := "auth.trusted_proxy"
	if len(p.Trusted) == 0 {
		add(f+".trusted", "required: list the addresses (IPs or CIDRs) of the proxies whose headers are believed")
	}
	for i, t := range p.Trusted {
		pf, err := parseTrusted(t)
		if err != nil {
			add(fmt.Sprintf("%s.trusted[%d]", f, i), "%v", err)
		} else if pf.Bits() == 0 {
			add(fmt.Sprintf("%s.trusted[%d]", f, i), "%s trusts every address: list the proxies' addresses", t)
		}
	}
	h, g := headerOr(p.Header, DefaultProxyHeader), headerOr(p.GroupsHeader, DefaultProxyGroupsHeader)
	for _, x := range []struct{ field, name string }{{f + ".header", h}, {f + ".groups_header", g}} {
		switch {
		case !validHeaderName(x.name):
			add(x.field, "%q is not a valid HTTP header name", x.name)
		case reservedHeaders[x.name]:
			add(x.field, "%s is reserved: choose another header", x.name)
		}
	}
	if h == g {
		add(f+".groups_header", "must differ from header (%s)", h)
	}
}

// validate checks auth.dev.
func (d DevConfig) validate(add addFunc) {
	checkPrincipal(add, "auth.dev.principal", d.Principal)
	checkGroups(add, "auth.dev.groups", d.Groups)
}

// validate checks auth.delegation.
func (d DelegationConfig) validate(add addFunc) {
	f := "auth.delegation"
	if len(d.PublicKeys) == 0 && len(d.Keys) == 0 {
		add(f+".public_keys", "required: list the files with agentd's Ed25519 public keys (lushctl writes them next to the private key)")
	}
	for i, k := range d.PublicKeys {
		if strings.TrimSpace(k) == "" {
			add(fmt.Sprintf("%s.public_keys[%d]", f, i), "empty file name")
		}
	}
	switch {
	case d.MaxTTL < 0:
		add(f+".max_ttl", "must not be negative")
	case d.MaxTTL > MaxDelegationTTL:
		add(f+".max_ttl", "%s is more than the maximum %s: delegation tokens are short-lived", d.MaxTTL, MaxDelegationTTL)
	}
	if d.Audience != "" && strings.TrimSpace(d.Audience) != d.Audience {
		add(f+".audience", "has surrounding whitespace")
	}
}

func checkPrincipal(add addFunc, field, s string) {
	if s == "" {
		add(field, "required (user:<id>, group:<name> or serviceaccount:<name>)")
		return
	}
	if _, err := principal.Parse(s); err != nil {
		add(field, "%v", err)
	}
}

func checkGroups(add addFunc, field string, groups []string) {
	for i, g := range groups {
		if err := checkGroup(g); err != nil {
			add(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
	}
}

// checkGroup accepts only "group:<name>".
func checkGroup(g string) error {
	p, err := principal.Parse(g)
	if err != nil {
		return err
	}
	if p.Kind != principal.Group {
		return fmt.Errorf("%q is not a group: write group:<name>", g)
	}
	return nil
}

func checkJWKSURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not an absolute URL", s)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopbackHost(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("%q: keys fetched over plain http could be replaced in transit: use https (http is allowed only for loopback addresses)", s)
	default:
		return fmt.Errorf("%q: use an https URL", s)
	}
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func parseTrusted(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (e.g. 10.0.0.0/8, fd00::/8)", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR (e.g. 10.0.0.7, 10.0.0.0/8)", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func headerOr(h, def string) string {
	if h == "" {
		return def
	}
	return canonicalHeader(h)
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// validHeaderName reports whether s is an RFC 7230 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// DelegationAudience is the audience delegation tokens must carry to be accepted with this
// config: auth.delegation.audience, or DefaultDelegationAudience.
func (c Config) DelegationAudience() string {
	if c.Delegation != nil && c.Delegation.Audience != "" {
		return c.Delegation.Audience
	}
	return DefaultDelegationAudience
}

// Configured reports whether any authentication method is configured.
func (c Config) Configured() bool {
	return c.AuthenticatesPeople() || c.Dev != nil || c.Delegation != nil
}

// AuthenticatesPeople reports whether callers can prove who they are (JWT, API keys, a trusted
// proxy), as opposed to dev mode's fixed principal and agentd's delegation tokens.
func (c Config) AuthenticatesPeople() bool {
	return len(c.JWT) > 0 || len(c.OAuth) > 0 || len(c.APIKeys) > 0 || c.Proxy != nil
}

// validateOAuth checks each authorization server of auth.oauth, and that no issuer is
// configured twice (here or under auth.jwt: a token's iss names the one method that verifies it).
func validateOAuth(list []OAuthConfig, jwts []JWTConfig, add addFunc) {
	issuers := map[string]int{}
	for i, o := range list {
		f := fmt.Sprintf("auth.oauth[%d]", i)
		switch {
		case o.Issuer == "":
			add(f+".issuer", "required: the authorization server's issuer identifier (the iss of its tokens, e.g. https://login.example.com)")
		case o.Issuer == DelegationIssuer:
			add(f+".issuer", "%q is reserved for delegation tokens: configure auth.delegation instead", DelegationIssuer)
		default:
			if err := checkIssuerURL(o.Issuer); err != nil {
				add(f+".issuer", "%v", err)
			}
			if prev, dup := issuers[o.Issuer]; dup {
				add(f+".issuer", "%q is already configured at auth.oauth[%d]: list every audience and scope there", o.Issuer, prev)
			} else {
				issuers[o.Issuer] = i
			}
			for k, j := range jwts {
				if j.Issuer == o.Issuer {
					add(f+".issuer", "%q is also configured at auth.jwt[%d]: a token's issuer must name one method; keep it under auth.oauth (which discovers its keys) and remove it from auth.jwt", o.Issuer, k)
				}
			}
		}
		o.validate(f, add)
	}
}

// validate checks one authorization server's fields other than issuer, named under f.
func (o OAuthConfig) validate(f string, add addFunc) {
	for k, a := range o.Audiences {
		if strings.TrimSpace(a) == "" || strings.TrimSpace(a) != a {
			add(fmt.Sprintf("%s.audiences[%d]", f, k), "empty or surrounded by whitespace: give the exact aud value")
		}
	}
	seen := map[string]bool{}
	for k, sc := range o.Scopes {
		switch {
		case !validScope(sc):
			add(fmt.Sprintf("%s.scopes[%d]", f, k), "%q is not a scope (RFC 6749: printable ASCII without spaces, quotes or backslashes)", sc)
		case seen[sc]:
			add(fmt.Sprintf("%s.scopes[%d]", f, k), "%q is listed twice", sc)
		}
		seen[sc] = true
	}
	for k, a := range o.Algorithms {
		af := fmt.Sprintf("%s.algorithms[%d]", f, k)
		fam, ok := knownAlgorithms[a]
		switch {
		case strings.EqualFold(a, "none"):
			add(af, "unsigned tokens (none) are never accepted: remove it")
		case !ok:
			add(af, "unknown algorithm %q: use one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA", a)
		case fam == "HMAC":
			add(af, "%s needs a secret shared with the authorization server, and keys from its JWKS are never used as HMAC secrets: use a public-key algorithm (RS256, ES256, …)", a)
		}
	}
	if in := o.Introspection; in != nil {
		if in.ClientID == "" {
			add(f+".introspection.client_id", "required: the client id Lush authenticates to the introspection endpoint with (register a client for the resource server)")
		}
		if in.Endpoint != "" {
			if err := checkJWKSURL(in.Endpoint); err != nil {
				add(f+".introspection.endpoint", "%v", err)
			}
		}
		if strings.TrimSpace(in.ClientSecretFile) == "" {
			add(f+".introspection.client_secret_file", "required: a file holding the client's secret (the config never holds the secret itself)")
		}
		switch {
		case in.CacheTTL < 0:
			add(f+".introspection.cache_ttl", "must not be negative")
		case in.CacheTTL > MaxIntrospectionTTL:
			add(f+".introspection.cache_ttl", "%s is more than the maximum %s: a revoked token would be believed that long", in.CacheTTL, MaxIntrospectionTTL)
		}
	}
	for _, c := range []struct{ field, name string }{
		{".claims.subject", o.Claims.Subject}, {".claims.email", o.Claims.Email},
		{".claims.groups", o.Claims.Groups}, {".claims.client_id", o.Claims.ClientID},
		{".service_account.claim", o.ServiceAccount.Claim},
	} {
		if c.name != "" && strings.TrimSpace(c.name) != c.name {
			add(f+c.field, "%q has surrounding whitespace", c.name)
		}
	}
	switch o.PrincipalClaim {
	case "", "sub", "email":
	default:
		add(f+".principal_claim", "%q: use sub (user:<subject>) or email (user:<email>); rename claims under claims.subject or claims.email", o.PrincipalClaim)
	}
	sa := o.ServiceAccount
	switch {
	case sa.Disabled && (sa.Claim != "" || sa.Value != ""):
		add(f+".service_account", "disabled with claim or value: remove one")
	case (sa.Claim == "") != (sa.Value == ""):
		add(f+".service_account", "set claim and value together (e.g. claim: gty, value: client-credentials), or neither: by default a token whose subject is its client id is a service account")
	}
	switch {
	case o.Leeway < 0:
		add(f+".leeway", "must not be negative")
	case o.Leeway > MaxLeeway:
		add(f+".leeway", "%s is more than the maximum %s", o.Leeway, MaxLeeway)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{".metadata_refresh", o.MetadataRefresh}, {".jwks_refresh", o.JWKSRefresh}} {
		switch {
		case d.v < 0:
			add(f+d.field, "must not be negative")
		case d.v != 0 && d.v < time.Minute:
			add(f+d.field, "%s is less than the minimum 1m0s", d.v)
		}
	}
}

// validScope reports whether s is an RFC 6749 scope token.
func validScope(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// checkIssuerURL checks an authorization server's issuer identifier (RFC 8414: https, no query
// or fragment; plain http only on loopback).
func checkIssuerURL(s string) error {
	if err := checkJWKSURL(s); err != nil {
		return err
	}
	u, _ := url.Parse(s)
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("%q: an issuer identifier has no query, fragment or user info", s)
	}
	return nil
}

// checkResourceURL checks auth.resource_url: an absolute http(s) URL without query, fragment or
// trailing slash.
func checkResourceURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return fmt.Errorf("%q is not an absolute http(s) URL: give the server's public base URL, e.g. https://lush.example.com", s)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return fmt.Errorf("%q: the base URL has no query, fragment or user info", s)
	case strings.ContainsAny(s, "\"\\ <>"):
		return fmt.Errorf("%q contains a quote, backslash, space or angle bracket: percent-encode it", s)
	case strings.HasSuffix(s, "/"):
		return fmt.Errorf("%q ends with /: write it without (%s)", s, strings.TrimRight(s, "/"))
	}
	return nil
}
