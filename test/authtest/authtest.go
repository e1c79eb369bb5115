// Package authtest starts the real authorization servers of examples/authserver/authserver (Ory
// Hydra with the scripted login and consent app, the front, and the token-exchange server) for a
// test, on loopback, stopped by the test's cleanup. Hydra's output is shown only when the test
// fails.
package authtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lush-agents/lush/examples/authserver/authserver"
	"github.com/lush-agents/lush/test/syncbuf"
)

// The default users: alice and bob log in and consent; carol refuses consent.
var (
	Alice = authserver.User{Subject: "alice", Email: "alice@example.com", Groups: []string{"engineering", "admins"}}
	Bob   = authserver.User{Subject: "bob", Email: "bob@example.com", Groups: []string{"sales"}}
	Carol = authserver.User{Subject: "carol", Email: "carol@example.com", Groups: []string{"engineering"}, DenyConsent: true}
)

// Option changes the configuration Start uses.
type Option func(*authserver.Config)

// WithUsers replaces the default users (Alice, Bob, Carol); the first is the default user.
func WithUsers(users ...authserver.User) Option {
	return func(c *authserver.Config) { c.Users = users }
}

// WithAllowedResources sets the resources (audiences) clients may ask tokens for.
func WithAllowedResources(resources ...string) Option {
	return func(c *authserver.Config) { c.AllowedResources = resources }
}

// WithScopes sets the scopes clients may ask for besides the OpenID ones.
func WithScopes(scopes ...string) Option {
	return func(c *authserver.Config) { c.Scopes = scopes }
}

// WithTokenTTL sets the lifetimes of access and refresh tokens (short ones for refresh tests).
func WithTokenTTL(access, refresh time.Duration) Option {
	return func(c *authserver.Config) { c.AccessTokenTTL, c.RefreshTokenTTL = access, refresh }
}

// WithExchange configures the token-exchange server (its clients and trusted actor keys).
func WithExchange(x authserver.ExchangeConfig) Option {
	return func(c *authserver.Config) { c.Exchange = x }
}

// WithConfig changes anything else.
func WithConfig(f func(*authserver.Config)) Option {
	return Option(f)
}

// Start starts the authorization servers for t and stops them when t ends. It fails t with "run
// make hydra-tool" when the Hydra binary is missing.
func Start(t testing.TB, opts ...Option) *authserver.Server {
	t.Helper()
	logs := &syncbuf.Buffer{}
	cfg := authserver.Config{
		HydraPath: HydraPath(t),
		Users:     []authserver.User{Alice, Bob, Carol},
		Logs:      logs,
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := authserver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start the authorization servers: %v\nhydra output:\n%s", err, logs.String())
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("stop the authorization servers: %v", err)
		}
		if t.Failed() {
			t.Logf("authorization servers' output:\n%s", logs.String())
		}
	})
	return srv
}

// HydraPath is the Hydra binary: $LUSH_HYDRA, or .tools/bin/hydra at the repository's root. It
// fails t when it is missing.
func HydraPath(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("LUSH_HYDRA"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("LUSH_HYDRA=%s: %v: run make hydra-tool, or unset LUSH_HYDRA", p, err)
		}
		return p
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("find the Hydra binary: %v", err)
	}
	p := filepath.Join(root, ".tools", "bin", "hydra")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the Hydra binary %s is missing: run make hydra-tool (or set LUSH_HYDRA)", p)
	}
	return p
}

// repoRoot is the nearest directory above the working directory whose go.mod is Lush's module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.HasPrefix(bytes.TrimSpace(b), []byte("module github.com/lush-agents/lush\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
