package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/client"
)

// Discovery as a client (MCP authorization, 2025-11-25): for a server that no client under
// credentials.oauth.clients lists, the gateway calls the server without a token, follows its 401
// WWW-Authenticate resource_metadata (RFC 9728) to its authorization server, reads that server's
// metadata (OpenID Connect discovery, else RFC 8414) and registers a client there with dynamic
// client registration (RFC 7591). The registration is kept (the registrations file, mode 0600)
// and used from then on.

// maxMetadata bounds a metadata document or registration response.
const maxMetadata = 64 << 10

// LoopbackRedirect is the redirect URI `lushctl auth login` listens on by default; dynamically
// registered clients allow it besides the gateway's redirect_url.
const LoopbackRedirect = "http://127.0.0.1:8976/callback"

// clientInfo is the client used at a server's authorization server: configured or registered.
type clientInfo struct {
	issuer, tokenEndpoint, id, secret string
}

// registration is a client registered dynamically, as the registrations file keeps it.
type registration struct {
	Server       string    `json:"server"`
	Issuer       string    `json:"issuer"`
	ClientID     string    `json:"client_id"`
	ClientSecret string    `json:"client_secret,omitempty"`
	Registered   time.Time `json:"registered"`
}

// WithRegistrations keeps dynamically registered clients in path (JSON, mode 0600), so the
// gateway and `lushctl auth login` share them and a restart does not register again. Without
// it they live in memory.
func WithRegistrations(path string) Option { return func(c *Client) { c.regPath = path } }

// client returns the client for r's server: the configured one, else one registered
// dynamically after discovery.
func (c *Client) client(ctx context.Context, r Request) (clientInfo, error) {
	if c == nil {
		return clientInfo{}, notConfigured(r, "the gateway has no OAuth configuration: set credentials.oauth in its config (docs/credentials.md)")
	}
	if i, ok := c.cfg.clientFor(r.Server); ok {
		cl := c.cfg.Clients[i]
		return clientInfo{issuer: cl.Issuer, tokenEndpoint: cl.TokenEndpoint, id: cl.ClientID, secret: c.secrets[i]}, nil
	}
	if reg, ok := c.registered(r.Server); ok {
		return clientInfo{issuer: reg.Issuer, id: reg.ClientID, secret: reg.ClientSecret}, nil
	}
	v, err, _ := c.flight.Do("register\x00"+r.Server, func() (any, error) {
		if reg, ok := c.registered(r.Server); ok {
			return reg, nil
		}
		return c.register(ctx, r)
	})
	if err != nil {
		return clientInfo{}, err
	}
	reg := v.(registration)
	return clientInfo{issuer: reg.Issuer, id: reg.ClientID, secret: reg.ClientSecret}, nil
}

func (c *Client) registered(server string) (registration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.regs == nil {
		c.regs = map[string]registration{}
		if c.regPath != "" {
			var list []registration
			if b, err := os.ReadFile(c.regPath); err == nil && json.Unmarshal(b, &list) == nil {
				for _, r := range list {
					c.regs[r.Server] = r
				}
			}
		}
	}
	r, ok := c.regs[server]
	return r, ok
}

// register discovers r's authorization server from the server itself and registers a client.
func (c *Client) register(ctx context.Context, r Request) (registration, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*c.cfg.Timeout)
	defer cancel()
	fail := func(doing string, err error) error {
		return &Error{rule: RuleNotConfigured, reason: fmt.Sprintf("%s needs an OAuth client at its authorization server, and none is configured or could be registered (%s: %s): add one under credentials.oauth.clients with servers: [%s] (docs/credentials.md)",
			r.Server, doing, bounded(describe(err)), r.Server)}
	}
	if r.URL == "" {
		return registration{}, fail("discover", errors.New("the server has no URL"))
	}
	mdURL, err := c.resourceMetadataURL(ctx, r.URL)
	if err != nil {
		return registration{}, fail("ask "+r.URL+" for its resource metadata", err)
	}
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		ScopesSupported      []string `json:"scopes_supported"`
	}
	if err := c.getJSON(ctx, mdURL, &prm); err != nil {
		return registration{}, fail("read "+mdURL, err)
	}
	if prm.Resource != "" && strings.TrimSuffix(prm.Resource, "/") != strings.TrimSuffix(r.URL, "/") {
		return registration{}, fail("check "+mdURL, fmt.Errorf("its resource %q is not the server's URL %s (RFC 9728 section 3.3)", prm.Resource, r.URL))
	}
	if len(prm.AuthorizationServers) == 0 {
		return registration{}, fail("read "+mdURL, errors.New("it names no authorization_servers"))
	}
	issuer := prm.AuthorizationServers[0]
	md, err := c.discoverIssuer(ctx, issuer)
	if err != nil {
		return registration{}, fail("discover "+issuer, err)
	}
	if md.RegistrationEndpoint == "" {
		return registration{}, fail("register at "+issuer, errors.New("its metadata names no registration_endpoint (no dynamic client registration)"))
	}
	redirects := []string{LoopbackRedirect}
	if c.cfg.RedirectURL != "" {
		redirects = append([]string{c.cfg.RedirectURL}, redirects...)
	}
	grants := []string{"authorization_code", "refresh_token"}
	if r.Flow == FlowClientCredentials {
		grants = []string{"client_credentials"}
	}
	body, _ := json.Marshal(map[string]any{
		"client_name": "Lush gateway", "redirect_uris": redirects, "grant_types": grants, "response_types": []string{"code"},
		"token_endpoint_auth_method": "client_secret_basic", "scope": strings.Join(r.Scopes, " "),
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, md.RegistrationEndpoint, bytes.NewReader(body))
	if err != nil {
		return registration{}, fail("register at "+issuer, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return registration{}, fail("register at "+issuer, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadata))
	if err != nil {
		return registration{}, fail("register at "+issuer, err)
	}
	var out struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
		Error        string `json:"error"`
		Description  string `json:"error_description"`
	}
	_ = json.Unmarshal(b, &out)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK || out.ClientID == "" {
		return registration{}, fail("register at "+issuer, fmt.Errorf("HTTP %s %s %s", resp.Status, bounded(out.Error), bounded(out.Description)))
	}
	reg := registration{Server: r.Server, Issuer: issuer, ClientID: out.ClientID, ClientSecret: out.ClientSecret, Registered: c.now().UTC()}
	c.mu.Lock()
	c.regs[r.Server] = reg
	all := make([]registration, 0, len(c.regs))
	for _, v := range c.regs {
		all = append(all, v)
	}
	c.mu.Unlock()
	if c.regPath != "" {
		slices.SortFunc(all, func(a, b registration) int { return strings.Compare(a.Server, b.Server) })
		if err := writePrivate(c.regPath, all); err != nil {
			return reg, nil // registered; kept in memory, registered again after a restart
		}
	}
	return reg, nil
}

var resourceMetadataParam = regexp.MustCompile(`resource_metadata="([^"]+)"`)

// resourceMetadataURL calls the server without a token and reads its 401's resource_metadata;
// without one, the RFC 9728 well-known location for the server's URL.
func (c *Client) resourceMetadataURL(ctx context.Context, server string) (string, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"lush","version":"1"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxMetadata))
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return "", fmt.Errorf("it answered %s without a token, not 401", resp.Status)
	}
	if m := resourceMetadataParam.FindStringSubmatch(resp.Header.Get("WWW-Authenticate")); m != nil {
		return m[1], nil
	}
	u, err := url.Parse(server)
	if err != nil {
		return "", err
	}
	u.Path = "/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.Path, "/")
	u.RawQuery = ""
	return u.String(), nil
}

// discoverIssuer reads the issuer's OpenID Connect metadata, else its RFC 8414 metadata.
func (c *Client) discoverIssuer(ctx context.Context, issuer string) (*discovered, error) {
	md, err := client.Discover(ctx, issuer, c.hc)
	if err == nil {
		return &discovered{RegistrationEndpoint: md.RegistrationEndpoint}, nil
	}
	u, perr := url.Parse(issuer)
	if perr != nil {
		return nil, err
	}
	u.Path = "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.Path, "/")
	md, err2 := client.Discover(ctx, issuer, c.hc, u.String())
	if err2 != nil {
		return nil, err
	}
	return &discovered{RegistrationEndpoint: md.RegistrationEndpoint}, nil
}

type discovered struct {
	RegistrationEndpoint string
}

// getJSON reads a bounded JSON document.
func (c *Client) getJSON(ctx context.Context, u string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadata+1))
	if err != nil {
		return err
	}
	if len(b) > maxMetadata {
		return fmt.Errorf("larger than %d bytes", maxMetadata)
	}
	return json.Unmarshal(b, into)
}

// writePrivate writes v as JSON to path with mode 0600, atomically.
func writePrivate(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".oauth-clients-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	_, werr := tmp.Write(append(b, '\n'))
	if err := errors.Join(werr, tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
