package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/toolref"
	"github.com/lush-agents/lush/vault"
	"github.com/lush-agents/lush/vault/oauth"
)

// oauthTarget is what auth login and remove need to know of a server declared with flow
// authorization_code: the OAuth client (from the gateway config) and the request for the server.
func oauthTarget(project, config string, ref toolref.Ref, who string) (*oauth.Client, oauth.Request, error) {
	cfg, err := loadGatewayConfig(config)
	if err != nil {
		return nil, oauth.Request{}, err
	}
	if config == "" || cfg.Credentials.OAuth == nil {
		return nil, oauth.Request{}, usage("pass --config with the gateway config whose credentials.oauth.clients lists %s (docs/credentials.md)", ref)
	}
	oc, err := oauth.New(*cfg.Credentials.OAuth, oauth.WithRegistrations(filepath.Join(project, filepath.Dir(filepath.FromSlash(vault.LocalFile)), vault.RegistrationsFile)))
	if err != nil {
		return nil, oauth.Request{}, usage("%s: %v", config, err)
	}
	file := filepath.Join(project, "lush.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, oauth.Request{}, fmt.Errorf("read %s: %w", file, err)
	}
	var l diag.List
	pc := spec.ParseProjectConfig("lush.yaml", data, &l)
	if pc == nil || l.HasErrors() {
		return nil, oauth.Request{}, failed("%s has errors; run lushctl build %s to see them", file, project)
	}
	d := declFor(pc.Credentials, ref.String(), who)
	if d == nil || d.Type.Value != vault.TypeOAuth || d.Flow.Value != oauth.FlowAuthorizationCode {
		return nil, oauth.Request{}, usage("lush.yaml does not declare %s for %s with type: oauth, flow: authorization_code; auth login is for that flow (docs/credentials.md)", ref, who)
	}
	r := oauth.Request{Server: ref.String(), URL: ref.DefaultURL(), Principal: who, Flow: oauth.FlowAuthorizationCode,
		Audience: d.Audience.Value, Resource: d.Resource.Value}
	for _, s := range d.Scopes {
		r.Scopes = append(r.Scopes, s.Value)
	}
	for _, s := range pc.Servers {
		if s.Ref.Value == ref.String() && s.URL.Set() {
			r.URL = s.URL.Value
		}
	}
	return oc, r, nil
}

func newAuthLoginCmd() *cobra.Command {
	var f authFlags
	var config, listen string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "login <mcp server>",
		Short: "Grant Lush access to an MCP server at its own authorization server (OAuth authorization code)",
		Long: `login runs the OAuth authorization code flow with PKCE for a server that lush.yaml declares
with type: oauth, flow: authorization_code: it prints the URL where the principal grants access,
receives the redirect on a loopback address, and stores the grant (access and refresh token) in
.lush/credentials.local (mode 0600). The gateway then sends the access token on the principal's
calls to the server and refreshes it before it expires.

The gateway config (--config) names the client Lush has at the server's authorization server
(credentials.oauth.clients); that client must allow the redirect URL
http://<--listen>/callback. Ask for the offline_access scope in lush.yaml where the server needs
it to issue a refresh token.`,
		Example: `  lushctl auth login mcp://crm.example.com/mcp --principal user:alice --config gateway.yaml --listen 127.0.0.1:8976`,
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			ref, who, err := f.target(a[0])
			if err != nil {
				return err
			}
			if ref.Kind != toolref.MCP {
				return usage("%s is an A2A agent: auth login signs in to MCP servers only; store its credential with auth add", ref)
			}
			host, _, err := net.SplitHostPort(listen)
			if err != nil || !(host == "127.0.0.1" || host == "::1" || host == "localhost") {
				return usage("--listen %q: give a loopback address such as 127.0.0.1:8976; the redirect must not leave this machine", listen)
			}
			oc, r, err := oauthTarget(f.project, config, ref, who)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return failed("listen on %s for the redirect: %v", listen, err)
			}
			defer ln.Close()
			login, err := oc.StartLogin(ctx, r, "http://"+ln.Addr().String()+"/callback")
			if err != nil {
				return failed("%v", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Open this URL to grant Lush access to %s as %s:\n%s\n", ref, who, login.URL)
			grant, err := awaitRedirect(ctx, ln, login)
			if err != nil {
				return failed("%v", err)
			}
			file := f.file()
			if _, err := file.Add(vault.FileEntry{Tool: ref.String(), Principal: who, Credential: vault.Credential{Type: vault.TypeOAuth,
				Token: grant.AccessToken, RefreshToken: grant.RefreshToken, Expiry: grant.Expiry, Issuer: grant.Issuer}}); err != nil {
				return err
			}
			refresh := "with a refresh token"
			if grant.RefreshToken == "" {
				refresh = "without a refresh token (log in again when it expires)"
			}
			if f.output == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"tool": ref.String(), "principal": who, "issuer": grant.Issuer,
					"refresh_token": grant.RefreshToken != "", "expiry": grant.Expiry})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stored the grant of %s for %s in %s, %s\n", who, ref, file.Path(), refresh)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&config, "config", "", "the gateway config (credentials.oauth.clients names Lush's client at the server's authorization server)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8976", "loopback address of the redirect (the client must allow http://<address>/callback)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the grant")
	return cmd
}

// awaitRedirect serves the loopback redirect until it brings the login's code (or an error),
// and exchanges the code for the grant. Only a redirect with the login's state is accepted.
func awaitRedirect(ctx context.Context, ln net.Listener, login *oauth.Login) (oauth.Grant, error) {
	type result struct {
		g   oauth.Grant
		err error
	}
	done := make(chan result, 1)
	finish := func(res result) {
		select {
		case done <- res:
		default:
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /callback", func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(login.State)) != 1 {
			http.Error(w, oauth.ErrStateMismatch.Error(), http.StatusBadRequest)
			return
		}
		if e := q.Get("error"); e != "" {
			msg := fmt.Sprintf("the authorization server refused: %s", bounded(e))
			if d := q.Get("error_description"); d != "" {
				msg += ": " + bounded(d)
			}
			http.Error(w, msg, http.StatusForbidden)
			finish(result{err: errors.New(msg)})
			return
		}
		g, err := login.Finish(req.Context(), q.Get("code"))
		if err != nil {
			http.Error(w, "the code could not be exchanged: "+err.Error(), http.StatusBadGateway)
			finish(result{err: err})
			return
		}
		fmt.Fprint(w, "<!doctype html><title>Lush</title><p>Access granted. You can close this window.</p>")
		finish(result{g: g})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	defer func() {
		// Let the browser get its answer, then stop.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
		<-served
	}()
	select {
	case res := <-done:
		return res.g, res.err
	case <-ctx.Done():
		return oauth.Grant{}, errors.New("no grant arrived in time: open the URL, or run auth login again")
	}
}

// bounded cuts text from a redirect to a length fit for a message.
func bounded(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
