// Package vault is Lush's credential broker: it finds the credential an upstream call needs, for
// the tool and the principal the call is made for, so that the gateway can inject it (headers for
// remote servers, environment for stdio servers). Agents and models never see a credential.
//
// Two sources stand behind one lookup: HashiCorp Vault (KV v2 and any logical read, such as a
// dynamic secrets engine; auth by token, AppRole or Kubernetes; tokens and leases renewed) and the
// local file .lush/credentials.local that `lushctl auth add` fills on a laptop. Which source a
// principal's credential comes from follows lush.yaml's mcp_credentials declarations: service
// accounts from Vault, users from the local file (and from Vault where configured). Values from
// Vault are cached for a TTL bounded by their lease; when Vault cannot be reached, a cached value
// serves until it expires and then lookups fail closed.
//
// An oauth credential declared with a flow is obtained per principal instead (vault/oauth): by
// token exchange of the caller's own token, by client credentials, or from the grant a person gave
// with the authorization code flow, which the broker keeps (the local file or Vault) and refreshes.
//
// A Credential never prints its secret: every formatting, logging and encoding path shows only its
// type and source.
package vault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/vault/api"
	"golang.org/x/sync/singleflight"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/vault/oauth"
)

// RegistrationsFile is where, beside the credentials file, the OAuth clients the gateway
// registered dynamically (RFC 7591) are kept.
const RegistrationsFile = "oauth-clients.json"

// DefaultCacheTTL is how long a value without a lease (a KV secret) is reused.
const DefaultCacheTTL = 5 * time.Minute

// Config is the credentials section of the gateway config.
type Config struct {
	// File is the local credentials file; "" for none. `lushctl gateway` defaults it to
	// <project>/.lush/credentials.local.
	File string `yaml:"file"`
	// CacheTTL bounds how long a value from Vault is reused (default 5m); a lease shortens it.
	CacheTTL time.Duration `yaml:"cache_ttl"`
	// Vault, when set, is where service accounts' credentials (and, with users: true, users')
	// come from.
	Vault *VaultConfig `yaml:"vault"`
	// OAuth, when set, is how the gateway gets tokens for lush.yaml's oauth credentials with a
	// flow: token exchange and its clients at upstreams' authorization servers.
	OAuth *oauth.Config `yaml:"oauth"`
}

// Check validates the config and names the field at fault.
func (c Config) Check() error {
	var p []string
	if c.CacheTTL < 0 {
		p = append(p, "credentials.cache_ttl: must not be negative")
	}
	if c.Vault != nil {
		v := c.Vault.withDefaults()
		p = append(p, v.check()...)
	}
	if err := c.OAuth.Check(); err != nil {
		p = append(p, err.Error())
	}
	if len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

// Broker looks up credentials. It is safe for concurrent use.
type Broker struct {
	cfg   Config
	file  *File
	vault *vaultClient
	oauth *oauth.Client // nil without credentials.oauth
	log   *slog.Logger
	now   func() time.Time

	oauthOpts []oauth.Option

	mu     sync.Mutex
	cache  map[string]*cached
	flight singleflight.Group
}

// cached is a value read from Vault.
type cached struct {
	cred      Credential
	leaseID   string
	renewable bool
	lease     time.Duration
	refreshAt time.Time // from then on a lookup reads (or renews) it again
	expiresAt time.Time // after this it is never used
}

// Option configures a Broker.
type Option func(*Broker)

// WithLogger sets the logger (warnings when a stale value is served, token renewal).
func WithLogger(l *slog.Logger) Option { return func(b *Broker) { b.log = l } }

// WithClock replaces time.Now, for tests of expiry.
func WithClock(now func() time.Time) Option {
	return func(b *Broker) { b.now = now; b.oauthOpts = append(b.oauthOpts, oauth.WithClock(now)) }
}

// New returns a broker. It does not contact Vault: the first lookup that needs it logs in.
func New(cfg Config, opts ...Option) (*Broker, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	b := &Broker{cfg: cfg, log: slog.New(slog.DiscardHandler), now: time.Now, cache: map[string]*cached{}}
	for _, o := range opts {
		o(b)
	}
	if cfg.File != "" {
		b.file = OpenFile(cfg.File)
	}
	if cfg.OAuth != nil {
		if cfg.File != "" {
			b.oauthOpts = append(b.oauthOpts, oauth.WithRegistrations(filepath.Join(filepath.Dir(cfg.File), RegistrationsFile)))
		}
		oc, err := oauth.New(*cfg.OAuth, b.oauthOpts...)
		if err != nil {
			return nil, err
		}
		b.oauth = oc
	}
	if cfg.Vault != nil {
		v := cfg.Vault.withDefaults()
		b.cfg.Vault = &v
		vc, err := newVaultClient(v, b.log)
		if err != nil {
			return nil, err
		}
		b.vault = vc
	}
	return b, nil
}

// Close stops renewing the Vault token.
func (b *Broker) Close() {
	if b.vault != nil {
		b.vault.close()
	}
}

// Sources describes the configured sources, for the gateway's start-up message.
func (b *Broker) Sources() string {
	var s []string
	if b.vault != nil {
		s = append(s, "vault "+b.cfg.Vault.Address)
	}
	if b.file != nil {
		s = append(s, "file "+b.file.Path())
	}
	if b.oauth != nil {
		s = append(s, "oauth")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// Request is one lookup: the credential a principal needs for a tool, under the build's
// declarations.
type Request struct {
	Project   string
	Tool      string // the MCP server reference
	Principal string
	Groups    []string
	Declared  []manifest.Credential // the build's mcp_credentials

	// For oauth credentials with a flow:
	URL          string   // where the server is reached: the default audience and resource
	Chain        []string // the acting agents, outermost caller first
	SubjectToken string   // the caller's own access token, for token exchange ("" if none)
	Method       string   // how the caller authenticated, for messages
}

// Needs reports whether the build declares a credential for tool: then no call reaches it
// without one.
func Needs(declared []manifest.Credential, tool string) bool {
	return slices.ContainsFunc(declared, func(d manifest.Credential) bool { return d.Tool == tool })
}

// Lookup returns the credential r needs, or nil when the tool needs none (it has no declaration
// and the local file holds nothing for the principal). Errors are *MissingError (nothing
// configured; the message says how to configure it) or *UnavailableError (a source failed and no
// cached value is left); either way the call must not run.
func (b *Broker) Lookup(ctx context.Context, r Request) (*Credential, error) {
	var decls []manifest.Credential
	for _, d := range r.Declared {
		if d.Tool == r.Tool {
			decls = append(decls, d)
		}
	}
	if len(decls) == 0 {
		c, ok, err := b.fromFile(r)
		if err != nil {
			// The tool needs no credential; a broken file must not stop its calls.
			b.log.Warn("credentials file unreadable", "err", err)
			return nil, nil
		}
		if ok {
			return &c, nil
		}
		return nil, nil
	}
	decl := pick(decls, r.Principal, r.Groups)
	if decl == nil {
		typ := commonType(decls)
		if c, ok, err := b.fromFile(r); err != nil {
			return nil, &UnavailableError{Tool: r.Tool, Principal: r.Principal, Source: "file " + b.file.Path(), Err: err}
		} else if ok {
			return &c, nil
		}
		var who []string
		for _, d := range decls {
			who = append(who, d.Principal)
		}
		return nil, &MissingError{Tool: r.Tool, Principal: r.Principal, Type: typ,
			Detail: fmt.Sprintf("lush.yaml declares credentials for %s only (%s)", r.Tool, strings.Join(who, ", ")),
			Fixes:  []string{b.authAddHint(r.Tool, r.Principal, decls[0])}}
	}

	if decl.Type == TypeOAuth && (decl.Flow == oauth.FlowTokenExchange || decl.Flow == oauth.FlowClientCredentials) {
		return b.fromOAuth(ctx, *decl, r)
	}
	if decl.Type == TypeOAuth && decl.Flow == oauth.FlowAuthorizationCode {
		return b.fromGrant(ctx, *decl, r)
	}
	missing := &MissingError{Tool: r.Tool, Principal: r.Principal, Type: decl.Type}
	for _, src := range b.sources(r.Principal, decl) {
		switch src {
		case "file":
			c, ok, err := b.fromFile(r)
			if err != nil {
				return nil, &UnavailableError{Tool: r.Tool, Principal: r.Principal, Source: "file " + b.file.Path(), Err: err}
			}
			if ok {
				return adapt(c, *decl, r)
			}
			missing.Fixes = append(missing.Fixes, b.authAddHint(r.Tool, r.Principal, *decl))
		case "vault":
			tmpl := decl.Vault
			if tmpl == "" {
				tmpl = b.cfg.Vault.Path
			}
			path, err := Render(tmpl, Target{Project: r.Project, Tool: r.Tool, Principal: r.Principal, Type: decl.Type})
			if err != nil {
				return nil, &UnavailableError{Tool: r.Tool, Principal: r.Principal, Source: "vault", Err: err}
			}
			c, err := b.fromVault(ctx, path, *decl, r)
			if errors.Is(err, errNotFound) {
				missing.Fixes = append(missing.Fixes, kvWriteHint(path, fieldsOf(*decl)))
				continue
			}
			if err != nil {
				return nil, err
			}
			return &c, nil
		}
	}
	if len(missing.Fixes) == 0 {
		missing.Detail = "the gateway has no credential source for it: configure credentials.file or credentials.vault in its config (docs/credentials.md)"
	}
	return nil, missing
}

// fromOAuth gets a token by the declaration's flow. Its errors (*oauth.Error) name their rule
// and tell the caller what to do; none holds a token.
func (b *Broker) fromOAuth(ctx context.Context, d manifest.Credential, r Request) (*Credential, error) {
	tok, err := b.oauth.Token(ctx, OAuthRequest(d, r))
	if err != nil {
		return nil, err
	}
	src := "token exchange at " + tok.Issuer
	if tok.Obtained == oauth.ObtainedClientCredentials {
		src = "client credentials at " + tok.Issuer
	}
	return &Credential{Type: TypeOAuth, Token: tok.AccessToken, Source: src, Obtained: tok.Obtained, Act: tok.Act}, nil
}

// grantMargin is how long before its expiry a stored grant's access token is refreshed.
const grantMargin = time.Minute

// OAuthRequest is the request to vault/oauth for a declaration with a flow.
func OAuthRequest(d manifest.Credential, r Request) oauth.Request {
	return oauth.Request{Server: r.Tool, URL: r.URL, Principal: r.Principal, Chain: r.Chain,
		SubjectToken: r.SubjectToken, Method: r.Method, Flow: d.Flow, Scopes: d.Scopes, Audience: d.Audience, Resource: d.Resource}
}

// fromGrant returns the access token of the principal's stored grant (flow authorization_code),
// refreshing it first when it expires within a minute and writing the refreshed grant back where
// it is kept (the local file, or Vault for principals whose credentials Vault holds). No grant,
// or one the server refuses to refresh, is a denial that says to run lushctl auth login.
// Refreshes of one grant are made one at a time and always with the refresh token last stored
// (servers rotate refresh tokens, and a reused one fails and may revoke the grant).
func (b *Broker) fromGrant(ctx context.Context, d manifest.Credential, r Request) (*Credential, error) {
	or := OAuthRequest(d, r)
	gs, err := b.grantStore(d, r)
	if err != nil {
		return nil, b.oauth.NoGrant(or, err.Error())
	}
	c, ok, err := gs.load(ctx, false)
	switch {
	case err != nil:
		return nil, err
	case !ok || c.Token == "":
		return nil, b.oauth.NoGrant(or, "no grant is stored for them")
	}
	c.Obtained = oauth.ObtainedStoredGrant
	if c.Expiry.IsZero() || b.now().Add(grantMargin).Before(c.Expiry) {
		return &c, nil
	}
	if c.RefreshToken == "" {
		return nil, b.oauth.NoGrant(or, "the stored access token has expired and the grant has no refresh token (ask for the offline_access scope where the server needs it)")
	}
	v, err, _ := b.flight.Do("grant\x00"+gs.where, func() (any, error) {
		// Read the grant again: a refresh that just ended has stored a new token.
		cur, ok, err := gs.load(ctx, true)
		switch {
		case err != nil:
			return nil, err
		case !ok || cur.Token == "" || cur.RefreshToken == "":
			return nil, b.oauth.NoGrant(or, "no grant is stored for them")
		}
		cur.Obtained = oauth.ObtainedStoredGrant
		if cur.Token != c.Token && b.now().Add(grantMargin/2).Before(cur.Expiry) {
			return cur, nil
		}
		g, err := b.oauth.Refresh(ctx, or, cur.RefreshToken)
		if err != nil {
			return nil, err
		}
		n := cur
		n.Token, n.RefreshToken, n.Expiry, n.Issuer = g.AccessToken, g.RefreshToken, g.Expiry, g.Issuer
		if err := gs.save(ctx, n); err != nil {
			b.log.Warn("the refreshed OAuth grant could not be stored; it is used for this call", "tool", r.Tool, "principal", r.Principal, "err", err)
		}
		return n, nil
	})
	if err != nil {
		return nil, err
	}
	got := v.(Credential)
	return &got, nil
}

// grantStore is where one principal's grant for one server is kept.
type grantStore struct {
	where string // "file <path>" or "vault <path>", also the key of its refreshes
	load  func(ctx context.Context, fresh bool) (Credential, bool, error)
	save  func(ctx context.Context, c Credential) error
}

// grantStore returns where the grant of r's principal is kept: Vault for the principals whose
// credentials Vault holds (service accounts with credentials.vault, a declaration with vault:,
// users with credentials.vault.users), else the local file.
func (b *Broker) grantStore(d manifest.Credential, r Request) (grantStore, error) {
	srcs := b.sources(r.Principal, &d)
	if slices.Contains(srcs, "vault") && (d.Vault != "" || b.cfg.Vault.Users || strings.HasPrefix(r.Principal, "serviceaccount:")) {
		tmpl := d.Vault
		if tmpl == "" {
			tmpl = b.cfg.Vault.Path
		}
		path, err := Render(tmpl, Target{Project: r.Project, Tool: r.Tool, Principal: r.Principal, Type: d.Type})
		if err != nil {
			return grantStore{}, err
		}
		return grantStore{where: "vault " + path,
			load: func(ctx context.Context, fresh bool) (Credential, bool, error) {
				if fresh {
					b.mu.Lock()
					delete(b.cache, cacheKey(path, d))
					b.mu.Unlock()
				}
				c, err := b.fromVault(ctx, path, d, r)
				if errors.Is(err, errNotFound) {
					return Credential{}, false, nil
				}
				var m *MissingError
				if errors.As(err, &m) {
					return Credential{}, false, nil
				}
				return c, err == nil, err
			},
			save: func(ctx context.Context, c Credential) error {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.Vault.Timeout)
				defer cancel()
				fields := map[string]any{"access_token": c.Token, "refresh_token": c.RefreshToken, "issuer": c.Issuer}
				if !c.Expiry.IsZero() {
					fields["expiry"] = c.Expiry.UTC().Format(time.RFC3339)
				}
				if err := b.vault.write(ctx, path, fields); err != nil {
					return err
				}
				b.mu.Lock()
				delete(b.cache, cacheKey(path, d))
				b.mu.Unlock()
				return nil
			}}, nil
	}
	if b.file == nil {
		return grantStore{}, errors.New("the gateway has nowhere to keep grants (credentials.file or credentials.vault)")
	}
	return grantStore{where: "file " + b.file.Path() + "\x00" + r.Tool + "\x00" + r.Principal,
		load: func(context.Context, bool) (Credential, bool, error) {
			c, ok, err := b.fromFile(r)
			if err != nil {
				return Credential{}, false, &UnavailableError{Tool: r.Tool, Principal: r.Principal, Source: "file " + b.file.Path(), Err: err}
			}
			return c, ok, nil
		},
		save: func(_ context.Context, c Credential) error {
			_, err := b.file.Add(FileEntry{Tool: r.Tool, Principal: r.Principal, Credential: c})
			return err
		}}, nil
}

// OAuth is the broker's OAuth client (nil without credentials.oauth).
func (b *Broker) OAuth() *oauth.Client { return b.oauth }

// StoreGrant keeps the grant r's principal gave Lush for r's server (flow authorization_code)
// where its credentials are kept: Vault or the local file (see grantStore).
func (b *Broker) StoreGrant(ctx context.Context, r Request, g oauth.Grant) error {
	d, ok := Declaration(r.Declared, r.Tool, r.Principal, r.Groups)
	if !ok {
		return fmt.Errorf("the build declares no credential of %s for %s", r.Principal, r.Tool)
	}
	gs, err := b.grantStore(*d, r)
	if err != nil {
		return err
	}
	return gs.save(ctx, Credential{Type: TypeOAuth, Token: g.AccessToken, RefreshToken: g.RefreshToken, Expiry: g.Expiry, Issuer: g.Issuer})
}

// Declaration is the declaration that applies to principal (with groups) on tool: its own, else
// the first of its groups'.
func Declaration(declared []manifest.Credential, tool, principal string, groups []string) (*manifest.Credential, bool) {
	var decls []manifest.Credential
	for _, d := range declared {
		if d.Tool == tool {
			decls = append(decls, d)
		}
	}
	d := pick(decls, principal, groups)
	return d, d != nil
}

// pick chooses the declaration for a principal: its own, else the first of its groups'.
func pick(decls []manifest.Credential, principal string, groups []string) *manifest.Credential {
	for i := range decls {
		if decls[i].Principal == principal {
			return &decls[i]
		}
	}
	for i := range decls {
		if slices.Contains(groups, decls[i].Principal) {
			return &decls[i]
		}
	}
	return nil
}

func commonType(decls []manifest.Credential) string {
	t := decls[0].Type
	for _, d := range decls[1:] {
		if d.Type != t {
			return ""
		}
	}
	return t
}

// sources lists where a declared credential is looked for, in order: service accounts from Vault
// when it is configured (the local file otherwise); users from the local file, then from Vault
// when the declaration names a Vault path or credentials.vault.users is on.
func (b *Broker) sources(principal string, d *manifest.Credential) []string {
	var out []string
	sa := strings.HasPrefix(principal, "serviceaccount:")
	if b.file != nil && !(sa && b.vault != nil) {
		out = append(out, "file")
	}
	if b.vault != nil && (sa || d.Vault != "" || b.cfg.Vault.Users) {
		out = append(out, "vault")
	}
	return out
}

func (b *Broker) fromFile(r Request) (Credential, bool, error) {
	if b.file == nil {
		return Credential{}, false, nil
	}
	return b.file.Lookup(r.Tool, r.Principal)
}

func (b *Broker) authAddHint(tool, principal string, d manifest.Credential) string {
	h := fmt.Sprintf("lushctl auth add %s --principal %s --type %s", tool, principal, d.Type)
	if d.Type == TypeAPIKey && d.Header != "" {
		h += " --header " + d.Header
	}
	for _, e := range d.Env {
		h += " --env " + e
	}
	return h
}

// adapt checks a stored credential against its declaration: the declared type (oauth and bearer
// are interchangeable), the declared header, the declared variables (and only those).
func adapt(c Credential, d manifest.Credential, r Request) (*Credential, error) {
	bearer := func(t string) bool { return t == TypeBearer || t == TypeOAuth }
	if c.Type != d.Type && !(bearer(c.Type) && bearer(d.Type)) {
		return nil, &MissingError{Tool: r.Tool, Principal: r.Principal, Type: d.Type,
			Detail: fmt.Sprintf("the %s holds %s, and lush.yaml declares %s", c.Source, ACredential(c.Type), d.Type),
			Fixes:  []string{fmt.Sprintf("lushctl auth add %s --principal %s --type %s", r.Tool, r.Principal, d.Type)}}
	}
	if d.Type == TypeAPIKey && d.Header != "" {
		c.Header = d.Header
	}
	if d.Type == TypeEnv {
		env := map[string]string{}
		for _, name := range d.Env {
			v, ok := c.Env[name]
			if !ok {
				return nil, &MissingError{Tool: r.Tool, Principal: r.Principal, Type: d.Type,
					Detail: fmt.Sprintf("the %s has no value for %s", c.Source, name),
					Fixes:  []string{fmt.Sprintf("lushctl auth add %s --principal %s --type env --env %s", r.Tool, r.Principal, strings.Join(d.Env, " --env "))}}
			}
			env[name] = v
		}
		c.Env = env
	}
	return &c, nil
}

// fieldsOf are the fields a Vault secret of a declaration's type holds.
func fieldsOf(d manifest.Credential) []string {
	switch d.Type {
	case TypeBearer, TypeOAuth:
		return []string{"token"}
	case TypeAPIKey:
		return []string{"key"}
	case TypeBasic:
		return []string{"username", "password"}
	}
	return slices.Clone(d.Env)
}

var errNotFound = errors.New("no secret")

// cacheKey identifies a value read from Vault for a declaration.
func cacheKey(path string, d manifest.Credential) string {
	return path + "\x00" + d.Type + "\x00" + d.Header + "\x00" + strings.Join(d.Env, ",")
}

// fromVault returns the credential at path, from the cache while it is fresh. A stale value is
// read (or its lease renewed) again; if Vault cannot be reached it serves until it expires.
// Vault's refusal (403) or a secret that is gone ends it at once.
func (b *Broker) fromVault(ctx context.Context, path string, d manifest.Credential, r Request) (Credential, error) {
	key := cacheKey(path, d)
	b.mu.Lock()
	e := b.cache[key]
	b.mu.Unlock()
	if e != nil && b.now().Before(e.refreshAt) {
		return e.cred, nil
	}
	v, err, _ := b.flight.Do(key, func() (any, error) {
		return b.refresh(context.WithoutCancel(ctx), key, path, e, d, r)
	})
	if err != nil {
		return Credential{}, err
	}
	return v.(Credential), nil
}

func (b *Broker) refresh(ctx context.Context, key, path string, old *cached, d manifest.Credential, r Request) (Credential, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Vault.Timeout)
	defer cancel()
	if old != nil && old.renewable && old.leaseID != "" {
		s, err := b.vault.renewLease(ctx, old.leaseID, old.lease)
		if err == nil && s != nil && s.LeaseDuration > 0 {
			e := *old
			b.store(key, &e, time.Duration(s.LeaseDuration)*time.Second)
			return e.cred, nil
		}
		// Not renewed (max TTL reached, lease gone, Vault down): read it again below.
	}
	s, err := b.vault.read(ctx, path)
	if err == nil {
		var c Credential
		c, err = secretCredential(s, path, d, r)
		if err == nil {
			e := &cached{cred: c}
			if s.LeaseID != "" {
				e.leaseID, e.renewable = s.LeaseID, s.Renewable
			}
			b.store(key, e, time.Duration(s.LeaseDuration)*time.Second)
			return c, nil
		}
	}
	if transient(err) && old != nil && b.now().Before(old.expiresAt) {
		b.log.Warn("Vault cannot be reached; serving the cached credential until it expires",
			"tool", r.Tool, "principal", r.Principal, "expires", old.expiresAt.Format(time.RFC3339), "err", err)
		return old.cred, nil
	}
	b.mu.Lock()
	delete(b.cache, key)
	b.mu.Unlock()
	if errors.Is(err, errNotFound) {
		return Credential{}, err
	}
	var m *MissingError
	if errors.As(err, &m) {
		return Credential{}, m
	}
	return Credential{}, &UnavailableError{Tool: r.Tool, Principal: r.Principal, Source: "vault " + path, Err: err}
}

// store caches e: for its lease when it has one, else for the cache TTL; whichever is shorter.
// It is read again after half that time (two thirds for a lease, which is renewed then).
func (b *Broker) store(key string, e *cached, lease time.Duration) {
	ttl, refresh := b.cfg.CacheTTL, b.cfg.CacheTTL/2
	if e.leaseID != "" && lease > 0 {
		e.lease = lease
		ttl, refresh = lease, lease*2/3
	} else if lease > 0 && lease < ttl {
		ttl, refresh = lease, lease/2
	}
	now := b.now()
	e.refreshAt, e.expiresAt = now.Add(refresh), now.Add(ttl)
	b.mu.Lock()
	b.cache[key] = e
	b.mu.Unlock()
}

// transient reports whether err means Vault could not answer (down, sealed, unreachable), as
// opposed to an answer: a refusal or a missing secret.
func transient(err error) bool {
	if err == nil || errors.Is(err, errNotFound) {
		return false
	}
	var m *MissingError
	if errors.As(err, &m) {
		return false
	}
	s := status(err)
	return s == 0 || s >= http.StatusInternalServerError || s == http.StatusTooManyRequests
}

// secretCredential turns a Vault secret into a credential of the declared type. A KV v2 secret's
// fields are under data.data; any other secret's (KV v1, dynamic engines) directly under data.
func secretCredential(s *api.Secret, path string, d manifest.Credential, r Request) (Credential, error) {
	if s == nil || s.Data == nil {
		return Credential{}, errNotFound
	}
	data := s.Data
	if inner, ok := data["data"]; ok {
		if _, meta := data["metadata"]; meta {
			m, ok := inner.(map[string]any)
			if !ok { // a deleted or destroyed version
				return Credential{}, errNotFound
			}
			data = m
		}
	}
	str := func(names ...string) string {
		for _, n := range names {
			if v, ok := data[n].(string); ok && v != "" {
				return v
			}
		}
		return ""
	}
	c := Credential{Type: d.Type, Source: "vault " + path}
	var lack []string
	need := func(v *string, names ...string) {
		if *v = str(names...); *v == "" {
			lack = append(lack, names[0])
		}
	}
	switch d.Type {
	case TypeBearer, TypeOAuth:
		need(&c.Token, "token", "access_token")
		if d.Type == TypeOAuth { // a stored grant (flow authorization_code)
			c.RefreshToken, c.Issuer = str("refresh_token"), str("issuer")
			if exp, err := time.Parse(time.RFC3339, str("expiry")); err == nil {
				c.Expiry = exp
			}
		}
	case TypeAPIKey:
		need(&c.Key, "key", "api_key")
		c.Header = d.Header
		if c.Header == "" {
			c.Header = str("header")
		}
	case TypeBasic:
		need(&c.Username, "username")
		need(&c.Password, "password")
	case TypeEnv:
		c.Env = map[string]string{}
		for _, name := range d.Env {
			var v string
			if need(&v, name); v != "" {
				c.Env[name] = v
			}
		}
	}
	if len(lack) > 0 {
		return Credential{}, &MissingError{Tool: r.Tool, Principal: r.Principal, Type: d.Type,
			Detail: fmt.Sprintf("the Vault secret at %s has no %s field (it has: %s)", path, strings.Join(lack, ", "), strings.Join(slices.Sorted(maps.Keys(data)), ", ")),
			Fixes:  []string{kvWriteHint(path, fieldsOf(d))}}
	}
	return c, nil
}
