// Command notes runs the notes MCP server, the bearer-token protected upstream that Lush's
// quickstart reaches as mcp://notes.example.com/mcp (see package notes):
//
//	go run ./examples/notes --tokens-file FILE [--addr 127.0.0.1:8931] [--seed FILE] [--allow-remote]
//	    [--oauth-issuer URL --oauth-jwks URL --oauth-audience URL]
//
// With the --oauth flags it also accepts that issuer's JWT access tokens for that audience.
//
// It serves http://ADDR/mcp until SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lush-agents/lush/examples/notes/notes"
	"github.com/lush-agents/lush/internal/identity"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "notes:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then shuts down.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("notes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8931", "listen address")
	tokensFile := fs.String("tokens-file", "", `file of "<account> <token>" lines (required)`)
	seedFile := fs.String("seed", "", `JSON file of initial notes: {"<account>": ["note", ...]}`)
	allowRemote := fs.Bool("allow-remote", false, "allow a listen address that is not loopback")
	oauthIssuer := fs.String("oauth-issuer", "", "also accept JWT access tokens of this issuer (with --oauth-jwks and --oauth-audience)")
	oauthJWKS := fs.String("oauth-jwks", "", "the JWKS URL of --oauth-issuer's signing keys")
	oauthAudience := fs.String("oauth-audience", "", "the aud tokens must carry: this server's URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *tokensFile == "":
		return fmt.Errorf("--tokens-file is required")
	case !*allowRemote && !isLoopback(*addr):
		return fmt.Errorf("listen address %q is not loopback; pass --allow-remote to serve beyond this host", *addr)
	case (*oauthIssuer != "" || *oauthJWKS != "" || *oauthAudience != "") && (*oauthIssuer == "" || *oauthJWKS == "" || *oauthAudience == ""):
		return fmt.Errorf("--oauth-issuer, --oauth-jwks and --oauth-audience go together: give all three")
	}

	seed, err := loadSeed(*seedFile)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	opts := notes.Options{TokensFile: *tokensFile, Seed: seed, Logger: logger}
	if *oauthIssuer != "" {
		auth, err := identity.New(ctx, identity.Config{JWT: []identity.JWTConfig{{Issuer: *oauthIssuer,
			Audiences: []string{*oauthAudience}, JWKSURL: *oauthJWKS, Algorithms: []string{"ES256", "RS256", "EdDSA"}}}})
		if err != nil {
			return fmt.Errorf("--oauth-issuer %s: %w", *oauthIssuer, err)
		}
		defer auth.Close()
		opts.OAuth = auth
	}
	srv, err := notes.New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	httpSrv.RegisterOnShutdown(srv.Close) // end open MCP streams so Shutdown need not wait for them
	served := make(chan error, 1)
	go func() { served <- httpSrv.Serve(ln) }()
	fmt.Fprintf(stderr, "notes: serving http://%s/mcp (%d accounts)\n", ln.Addr(), srv.Accounts())

	select {
	case err := <-served: // Serve returns only on failure before Shutdown
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintln(stderr, "notes: stopped")
	return nil
}

// isLoopback reports whether a listen address stays on this host: localhost or a loopback IP.
// A missing host (":8931") listens on every interface, so it is not loopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// loadSeed reads the --seed file; no file means no notes.
func loadSeed(path string) (map[string][]string, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read seed file: %w", err)
	}
	var seed map[string][]string
	if err := json.Unmarshal(data, &seed); err != nil {
		return nil, fmt.Errorf("seed file %s: want {\"<account>\": [\"note\", ...]}: %w", path, err)
	}
	return seed, nil
}
