package oauth

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

// DefaultTimeout bounds one request to an authorization server.
const DefaultTimeout = 10 * time.Second

// Config is the operator's side of upstream OAuth, the gateway config's credentials.oauth
// (docs/credentials.md). Secrets are named by file, never written inline.
type Config struct {
	// TokenExchange is the company's authorization server that exchanges a caller's token for an
	// upstream's (flow token_exchange).
	TokenExchange *TokenExchangeConfig `yaml:"token_exchange"`
	// Clients are the gateway's clients at upstreams' authorization servers (flow
	// client_credentials), each for the servers it lists.
	Clients []ClientConfig `yaml:"clients"`
	// Timeout bounds each request to an authorization server (default 10s).
	Timeout time.Duration `yaml:"timeout"`
	// RedirectURL is the gateway's own callback for the authorization code flow, as the
	// person's browser reaches it: https://<gateway>/oauth/callback. With it, the gateway serves
	// GET /oauth/login and /oauth/callback, and a denial for want of a grant carries the login URL.
	RedirectURL string `yaml:"redirect_url"`
}

// TokenExchangeConfig is the authorization server that performs RFC 8693 token exchange.
type TokenExchangeConfig struct {
	Issuer string `yaml:"issuer"` // its token endpoint is discovered from the issuer's metadata
	// TokenEndpoint, when set, is used instead of discovery.
	TokenEndpoint    string `yaml:"token_endpoint"`
	ClientID         string `yaml:"client_id"`
	ClientSecretFile string `yaml:"client_secret_file"`
	// Actor signs the actor tokens that name the acting agents.
	Actor ActorConfig `yaml:"actor"`
}

// ActorConfig is the key Lush signs actor tokens with.
type ActorConfig struct {
	// KeyFile is an Ed25519 private key (PEM, PKCS #8, mode 0600), such as the one
	// `lushctl auth actor-key` writes.
	KeyFile string `yaml:"key_file"`
	// Issuer is the iss of actor tokens (default "lush"); the authorization server trusts it with
	// the key's public half.
	Issuer string `yaml:"issuer"`
}

// ClientConfig is the gateway's client at one upstream authorization server.
type ClientConfig struct {
	Issuer           string   `yaml:"issuer"`
	TokenEndpoint    string   `yaml:"token_endpoint"` // optional: instead of discovery
	ClientID         string   `yaml:"client_id"`
	ClientSecretFile string   `yaml:"client_secret_file"`
	Servers          []string `yaml:"servers"` // the MCP servers (mcp://…) whose tokens it gets
}

// The gateway's routes of the authorization code flow.
const (
	LoginPath    = "/oauth/login"
	CallbackPath = "/oauth/callback"
)

// DefaultActorIssuer is the iss of actor tokens when the config names none.
const DefaultActorIssuer = "lush"

// Check validates the config and names each field at fault, with its fix. It does not read the
// secret files (New does).
func (c *Config) Check() error {
	if c == nil {
		return nil
	}
	var p []string
	if c.Timeout < 0 {
		p = append(p, "credentials.oauth.timeout: must not be negative")
	}
	if c.RedirectURL != "" {
		if u, err := url.Parse(c.RedirectURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != CallbackPath || u.RawQuery != "" || u.Fragment != "" {
			p = append(p, fmt.Sprintf("credentials.oauth.redirect_url: %q is not the gateway's callback: write https://<the gateway's host>%s", c.RedirectURL, CallbackPath))
		}
	}
	if te := c.TokenExchange; te != nil {
		f := "credentials.oauth.token_exchange"
		p = append(p, checkIssuer(f, te.Issuer, te.TokenEndpoint)...)
		if te.ClientID == "" {
			p = append(p, f+".client_id: missing: the client id Lush has at the authorization server")
		}
		if te.ClientSecretFile == "" {
			p = append(p, f+".client_secret_file: missing: a file holding the client secret (mode 0600)")
		}
		if te.Actor.KeyFile == "" {
			p = append(p, f+".actor.key_file: missing: the Ed25519 private key (PEM) that signs actor tokens; the authorization server trusts its public half")
		}
	}
	seen := map[string]string{}
	for i, cl := range c.Clients {
		f := fmt.Sprintf("credentials.oauth.clients[%d]", i)
		p = append(p, checkIssuer(f, cl.Issuer, cl.TokenEndpoint)...)
		if cl.ClientID == "" {
			p = append(p, f+".client_id: missing: the client id the upstream's authorization server gave the gateway")
		}
		if cl.ClientSecretFile == "" {
			p = append(p, f+".client_secret_file: missing: a file holding the client secret (mode 0600)")
		}
		if len(cl.Servers) == 0 {
			p = append(p, f+".servers: missing: list the MCP servers (mcp://…) this client gets tokens for")
		}
		for j, s := range cl.Servers {
			if !strings.HasPrefix(s, "mcp://") {
				p = append(p, fmt.Sprintf("%s.servers[%d]: %q is not an MCP server reference: write it as in lush.yaml, such as mcp://crm.example.com/mcp", f, j, s))
			}
			if other, dup := seen[s]; dup {
				p = append(p, fmt.Sprintf("%s.servers[%d]: %s is also in %s: keep one client per server", f, j, s, other))
			}
			seen[s] = f
		}
	}
	if len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

func checkIssuer(field, issuer, endpoint string) []string {
	var p []string
	if issuer == "" {
		p = append(p, field+".issuer: missing: the authorization server's issuer URL, such as https://login.example.com")
	} else if u, err := url.Parse(issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		p = append(p, fmt.Sprintf("%s.issuer: %q is not an http(s) URL without query or fragment", field, issuer))
	}
	if endpoint != "" {
		if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			p = append(p, fmt.Sprintf("%s.token_endpoint: %q is not an http(s) URL: remove it to discover the endpoint from the issuer", field, endpoint))
		}
	}
	return p
}

// readSecret reads a client secret file: it must be private to its owner and hold one line.
func readSecret(field, path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("%s: %s is not a regular file", field, path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%s: %s is accessible to its group or other users (mode %04o): run chmod 600 %s", field, path, perm, path)
	}
	if info.Size() > 4096 {
		return "", fmt.Errorf("%s: %s is larger than 4 KiB: it must hold only the secret", field, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	s := strings.TrimRight(string(data), "\r\n")
	if s == "" || strings.ContainsAny(s, "\r\n") {
		return "", fmt.Errorf("%s: %s must hold the secret on one line", field, path)
	}
	return s, nil
}

// clientFor returns the configured client for a server.
func (c *Config) clientFor(server string) (int, bool) {
	for i, cl := range c.Clients {
		if slices.Contains(cl.Servers, server) {
			return i, true
		}
	}
	return 0, false
}
