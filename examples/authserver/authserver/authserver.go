// Package authserver runs real OAuth 2.1 / OpenID Connect authorization servers on loopback for
// Lush's OAuth tests and demo: Ory Hydra (a separate process) with a scripted login and consent
// app and a thin front that makes it usable by MCP clients, and an RFC 8693 token-exchange server
// built on zitadel/oidc's OpenID provider. Nothing here is hand-rolled OAuth: Hydra and zitadel's
// OP mint, sign and check every token.
//
// # Hydra
//
// Hydra runs as `hydra serve all --dev` with in-memory storage on two free 127.0.0.1 ports,
// JWT access tokens, dynamic client registration enabled and advertised, and the scopes of a token
// in both `scp` (a JSON array) and `scope` (a space-separated string)
// (strategies.jwt.scope_claim: both). The claims `email` and `groups` of a user's session are at
// the top level of access tokens (oauth2.allowed_top_level_claims) and in ID tokens. Its admin API
// (AdminURL) is where clients are created and consents revoked; Hydra's introspection endpoint is
// on the admin side too (IntrospectionURL). Hydra's output goes to Config.Logs.
//
// # Login and consent
//
// Hydra asks an app of ours to log users in and to get their consent. That app approves without a
// browser: the user who logs in is the one the authorization request's `login_hint` names if it
// is a configured user, else the default user (Config.DefaultUser, or the first user; changed at
// runtime with SetNextUser). Consent grants every requested scope, and grants as access-token
// audience the RFC 8707 `resource` parameter(s) of the original authorization request plus its
// `audience` parameter; a resource the client is not allowed (its registered audience) is refused
// with invalid_target. The session carries the user's email and groups. A user with DenyConsent
// refuses consent: the client gets error=access_denied, as when a person never completes it.
//
// # The front
//
// The issuer (Issuer) is not Hydra's public port but a reverse proxy in front of it. It fixes
// only what stops MCP clients from using Hydra (documented in /work/shared/FACTS.md), and never
// mints, reads or alters a token:
//
//   - Hydra ignores RFC 8707's `resource` and has its own `audience` parameter. On token requests
//     (POST /oauth2/token, every grant) the front adds each `resource` value to `audience`, so a
//     client-credentials or refresh token is issued for the resource the client asked for. Hydra
//     still checks that audience against the client's allowed audiences.
//   - Hydra's dynamic-registration response has "" for unset URIs and null for contacts, which the
//     official TypeScript SDKs reject. The front drops every top-level "" and null field from the
//     responses of /oauth2/register.
//   - A dynamically registered client may only ask for audiences it registered; MCP clients do
//     not register any. On POST /oauth2/register the front sets the client's `audience` to the
//     configured allowed resources (Config.AllowedResources).
//
// Hydra advertises registration_endpoint because webfinger.oidc_discovery.client_registration_url
// is set to the front's /oauth2/register.
//
// # Token exchange
//
// Hydra has no RFC 8693 token exchange, so the exchange server (ExchangeIssuer) is zitadel/oidc's
// OP with a storage of ours. Clients authenticate with a configured id and secret. It accepts as
// subject token a JWT access token issued by the Hydra issuer (verified with Hydra's JWKS, and
// unexpired) or one it issued itself, and as actor token a JWT signed by one of the configured
// trusted keys. It issues a JWT access token with sub = the subject token's sub, aud = the
// requested `audience` and `resource` values (each must be an allowed resource), the subject
// token's email and groups, and `act` = {"sub": actor token's sub, "act": actor token's own act},
// so a chain user ← agent ← agent nests. It refuses an invalid or expired subject token, an actor
// token no trusted key signed, an unknown client or wrong secret, and an audience that is not
// allowed.
//
// # Helpers
//
// CreateClient, DeleteClient and RevokeConsent drive Hydra's admin API. ClientCredentialsToken,
// AuthorizationCodeToken (the whole code + PKCE flow without a browser) and RefreshToken get
// tokens as a client would; Browse plays the browser of a person who opens an authorization URL a
// client built, on to the client's own callback. AllowResources adds allowed resources once
// their URLs are known. Close stops everything, Hydra's process group included.
package authserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// User is a person the login app can log in.
type User struct {
	Subject     string   // the token's sub
	Email       string   // the email claim
	Groups      []string // the groups claim
	DenyConsent bool     // refuse consent (the client gets access_denied)
}

// Config configures Start.
type Config struct {
	// HydraPath is the hydra binary (built by `make hydra-tool` to .tools/bin/hydra). Required.
	HydraPath string
	// Users the login app can log in; at least one.
	Users []User
	// DefaultUser is the subject logged in when an authorization request names no configured
	// user in login_hint; "" means the first user.
	DefaultUser string
	// AllowedResources are the resource URLs (audiences) clients may ask tokens for: dynamically
	// registered clients are allowed all of them, and the exchange server issues tokens only for
	// them. Server.AllowResources adds more later.
	AllowedResources []string
	// Scopes are the scopes clients may ask for besides openid, offline_access, email and
	// profile: dynamically registered clients that name no scope get them all.
	Scopes []string
	// AccessTokenTTL and RefreshTokenTTL are the lifetimes of Hydra's tokens (and AccessTokenTTL
	// of the exchange server's); zero means 1h and 720h.
	AccessTokenTTL  time.Duration
	RefreshTokenTTL time.Duration
	// Exchange configures the token-exchange server.
	Exchange ExchangeConfig
	// Logs receives Hydra's stdout and stderr and the servers' logs; nil discards them.
	Logs io.Writer
}

// ExchangeConfig configures the RFC 8693 token-exchange server.
type ExchangeConfig struct {
	// Clients may exchange tokens, authenticating with their id and secret.
	Clients []ExchangeClient
	// TrustedActorKeys is a JWK set (JSON) of public keys (Ed25519, EC or RSA) that sign actor
	// tokens. TrustedActorJWKSURL is a JWKS URL that serves such keys, fetched on each exchange.
	// With neither, every actor token is refused.
	TrustedActorKeys    []byte
	TrustedActorJWKSURL string
}

// ExchangeClient is a client of the token-exchange server.
type ExchangeClient struct {
	ID     string
	Secret string
}

// Server is a running set of authorization servers. Close stops it.
type Server struct {
	cfg    Config
	logger *slog.Logger

	hydra    *hydraProcess
	front    *http.Server
	frontURL string
	login    *http.Server
	loginURL string
	exch     *exchangeServer

	users     map[string]User
	resources *resourceList
	mu        sync.Mutex
	nextUser  string

	admin *http.Client // Hydra's admin API and token requests (loopback)

	closeOnce sync.Once
	closeErr  error
	served    sync.WaitGroup
}

// maxStartAttempts bounds how often Start retries Hydra when a free port it picked was taken
// before Hydra bound it.
const maxStartAttempts = 3

// Start starts Hydra, the login and consent app, the front and the exchange server on 127.0.0.1
// free ports and returns when all of them answer. ctx bounds the start only; Close stops them.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// Hydra runs in a directory of its own: a relative path would be resolved there.
	abs, err := filepath.Abs(cfg.HydraPath)
	if err != nil {
		return nil, fmt.Errorf("authserver: HydraPath: %w", err)
	}
	cfg.HydraPath = abs
	if cfg.AccessTokenTTL == 0 {
		cfg.AccessTokenTTL = time.Hour
	}
	if cfg.RefreshTokenTTL == 0 {
		cfg.RefreshTokenTTL = 720 * time.Hour
	}
	logs := cfg.Logs
	if logs == nil {
		logs = io.Discard
	}
	s := &Server{
		cfg:       cfg,
		logger:    slog.New(slog.NewTextHandler(logs, nil)),
		users:     map[string]User{},
		resources: &resourceList{},
		admin:     &http.Client{Timeout: 30 * time.Second},
	}
	s.resources.add(cfg.AllowedResources...)
	for _, u := range cfg.Users {
		s.users[u.Subject] = u
	}
	s.nextUser = cfg.DefaultUser
	if s.nextUser == "" {
		s.nextUser = cfg.Users[0].Subject
	}
	if err := s.start(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) start(ctx context.Context) error {
	frontLn, err := listen()
	if err != nil {
		return fmt.Errorf("start the front: %w", err)
	}
	loginLn, err := listen()
	if err != nil {
		frontLn.Close()
		return fmt.Errorf("start the login app: %w", err)
	}
	s.frontURL = "http://" + frontLn.Addr().String()
	s.loginURL = "http://" + loginLn.Addr().String()
	s.login = &http.Server{Handler: s.loginHandler(), ReadHeaderTimeout: 10 * time.Second}
	s.serve(s.login, loginLn)

	var lastErr error
	for range maxStartAttempts {
		h, err := startHydra(ctx, s.hydraOptions())
		if err == nil {
			s.hydra = h
			break
		}
		lastErr = err
		if !errors.Is(err, errHydraExited) || ctx.Err() != nil {
			break
		}
	}
	if s.hydra == nil {
		frontLn.Close()
		return lastErr
	}
	front, err := s.frontHandler()
	if err != nil {
		frontLn.Close()
		return err
	}
	s.front = &http.Server{Handler: front, ReadHeaderTimeout: 10 * time.Second}
	s.serve(s.front, frontLn)

	exch, err := startExchange(ctx, exchangeOptions{
		cfg:         s.cfg.Exchange,
		allowed:     s.resources,
		ttl:         s.cfg.AccessTokenTTL,
		hydraIssuer: s.frontURL,
		hydraJWKS:   s.hydra.publicURL + "/.well-known/jwks.json",
		logger:      s.logger,
	})
	if err != nil {
		return err
	}
	s.exch = exch
	return s.waitReady(ctx)
}

// waitReady returns when the front answers Hydra's discovery document and the exchange server its
// own.
func (s *Server) waitReady(ctx context.Context) error {
	for _, u := range []string{s.frontURL + "/.well-known/openid-configuration", s.exch.url + "/.well-known/openid-configuration"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return fmt.Errorf("check %s: %w", u, err)
		}
		resp, err := s.admin.Do(req)
		if err != nil {
			return fmt.Errorf("check %s: %w", u, err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("check %s: status %s", u, resp.Status)
		}
	}
	return nil
}

// serve runs srv on ln until Close.
func (s *Server) serve(srv *http.Server, ln net.Listener) {
	s.served.Add(1)
	go func() {
		defer s.served.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("authserver: serve", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

// Close stops every server and Hydra's process group, and removes Hydra's files. It is safe to
// call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var errs []error
		for _, srv := range []*http.Server{s.front, s.login} {
			if srv != nil {
				if err := srv.Shutdown(ctx); err != nil {
					errs = append(errs, err)
					_ = srv.Close()
				}
			}
		}
		if s.exch != nil {
			errs = append(errs, s.exch.close(ctx))
		}
		if s.hydra != nil {
			errs = append(errs, s.hydra.stop())
		}
		s.served.Wait()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// Issuer is the issuer of Hydra's tokens: the front's URL.
func (s *Server) Issuer() string { return s.frontURL }

// ExchangeIssuer is the token-exchange server's issuer URL.
func (s *Server) ExchangeIssuer() string { return s.exch.url }

// AdminURL is Hydra's admin API (clients, consent sessions, introspection).
func (s *Server) AdminURL() string { return s.hydra.adminURL }

// IntrospectionURL is Hydra's RFC 7662 introspection endpoint (admin side, no client
// authentication).
func (s *Server) IntrospectionURL() string { return s.hydra.adminURL + "/admin/oauth2/introspect" }

// JWKSURL is the JWKS of Hydra's tokens, as the issuer's discovery names it.
func (s *Server) JWKSURL() string { return s.frontURL + "/.well-known/jwks.json" }

// ExchangeJWKSURL is the JWKS of the exchange server's tokens.
func (s *Server) ExchangeJWKSURL() string { return s.exch.url + "/keys" }

// TokenURL is Hydra's token endpoint through the front.
func (s *Server) TokenURL() string { return s.frontURL + "/oauth2/token" }

// ExchangeTokenURL is the exchange server's token endpoint.
func (s *Server) ExchangeTokenURL() string { return s.exch.url + "/oauth/token" }

// SetNextUser makes subject the user logged in by authorization requests that name no configured
// user in login_hint, from now on. It refuses a subject that is not a configured user.
func (s *Server) SetNextUser(subject string) error {
	if _, ok := s.users[subject]; !ok {
		return fmt.Errorf("set next user: %q is not a configured user (%s)", subject, strings.Join(s.subjects(), ", "))
	}
	s.mu.Lock()
	s.nextUser = subject
	s.mu.Unlock()
	return nil
}

func (s *Server) subjects() []string {
	out := make([]string, 0, len(s.users))
	for k := range s.users {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (c Config) validate() error {
	if c.HydraPath == "" {
		return errors.New("authserver: HydraPath is empty: build Hydra with `make hydra-tool` (.tools/bin/hydra) and pass its path")
	}
	if _, err := os.Stat(c.HydraPath); err != nil {
		return fmt.Errorf("authserver: HydraPath: %w: build it with `make hydra-tool`", err)
	}
	if len(c.Users) == 0 {
		return errors.New("authserver: Users is empty: configure at least one user to log in")
	}
	seen := map[string]bool{}
	for i, u := range c.Users {
		switch {
		case u.Subject == "":
			return fmt.Errorf("authserver: Users[%d].Subject is empty", i)
		case seen[u.Subject]:
			return fmt.Errorf("authserver: Users[%d].Subject %q is configured twice", i, u.Subject)
		}
		seen[u.Subject] = true
	}
	if c.DefaultUser != "" && !seen[c.DefaultUser] {
		return fmt.Errorf("authserver: DefaultUser %q is not one of Users", c.DefaultUser)
	}
	for i, r := range c.AllowedResources {
		if err := checkResource(r); err != nil {
			return fmt.Errorf("authserver: AllowedResources[%d]: %w", i, err)
		}
	}
	for i, sc := range c.Scopes {
		if sc == "" || strings.ContainsAny(sc, " \t\n\"\\") {
			return fmt.Errorf("authserver: Scopes[%d] %q is not a scope token", i, sc)
		}
	}
	if c.AccessTokenTTL < 0 || c.RefreshTokenTTL < 0 {
		return errors.New("authserver: AccessTokenTTL and RefreshTokenTTL must not be negative")
	}
	if c.AccessTokenTTL != 0 && c.AccessTokenTTL < time.Second {
		return fmt.Errorf("authserver: AccessTokenTTL %s: must be at least 1s", c.AccessTokenTTL)
	}
	for i, cl := range c.Exchange.Clients {
		if cl.ID == "" || cl.Secret == "" {
			return fmt.Errorf("authserver: Exchange.Clients[%d]: ID and Secret are required", i)
		}
	}
	return nil
}

// listen listens on a free 127.0.0.1 port.
func listen() (net.Listener, error) {
	return net.Listen("tcp", "127.0.0.1:0")
}

// freePort returns a 127.0.0.1 port that was free a moment ago (for Hydra, which binds its own).
func freePort() (int, error) {
	ln, err := listen()
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// randomHex returns n random bytes, hex-encoded.
func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return hex.EncodeToString(b), nil
}
