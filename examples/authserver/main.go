// Command authserver runs the demo's OAuth authorization servers on loopback (see package
// authserver): Ory Hydra with a login and consent app that approves scripted users, the front
// that is its issuer, and the RFC 8693 token-exchange server.
//
//	go run ./examples/authserver [--hydra PATH] [--user SUBJECT:EMAIL:GROUP,...]... [--deny-consent SUBJECT]...
//	    [--resource URL]... [--scope SCOPE]... [--access-ttl 1h] [--refresh-ttl 720h]
//	    [--clients FILE] [--exchange-clients FILE] [--actor-keys FILE] [--actor-jwks URL] [--quiet]
//
// When every server answers it prints one line to stderr:
//
//	authserver: issuer=<url> exchange=<url> admin=<url>
//
// and serves until SIGINT or SIGTERM. Hydra's output goes to stderr too, unless --quiet.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lush-agents/lush/examples/authserver/authserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "authserver:", err)
		os.Exit(1)
	}
}

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// run serves until ctx is done, then stops everything.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("authserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var users, deny, resources, scopes list
	hydra := fs.String("hydra", defaultHydra(), "the hydra binary (make hydra-tool builds .tools/bin/hydra; default $LUSH_HYDRA or .tools/bin/hydra)")
	fs.Var(&users, "user", "a user who can log in, SUBJECT:EMAIL:GROUP,GROUP (repeatable; the first is the default user; default alice and bob)")
	fs.Var(&deny, "deny-consent", "a user (subject) who refuses consent (repeatable)")
	fs.Var(&resources, "resource", "a resource URL clients may ask tokens for (repeatable)")
	fs.Var(&scopes, "scope", "a scope clients may ask for besides the OpenID ones (repeatable)")
	accessTTL := fs.Duration("access-ttl", time.Hour, "access-token lifetime")
	refreshTTL := fs.Duration("refresh-ttl", 720*time.Hour, "refresh-token lifetime")
	clientsFile := fs.String("clients", "", `JSON file of Hydra clients to create: [{"id": …, "secret": …, "grant_types": […], "redirect_uris": […], "scopes": […], "audience": […], "token_endpoint_auth_method": …}]`)
	exchangeFile := fs.String("exchange-clients", "", `file of "<client id> <secret>" lines: the clients of the token-exchange server`)
	actorKeys := fs.String("actor-keys", "", "JWK set file of the public keys that sign actor tokens for token exchange")
	actorJWKS := fs.String("actor-jwks", "", "JWKS URL of the keys that sign actor tokens for token exchange")
	quiet := fs.Bool("quiet", false, "discard Hydra's output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	cfg := authserver.Config{
		HydraPath:        *hydra,
		AllowedResources: resources,
		Scopes:           scopes,
		AccessTokenTTL:   *accessTTL,
		RefreshTokenTTL:  *refreshTTL,
		Logs:             stderr,
	}
	if *quiet {
		cfg.Logs = io.Discard
	}
	if len(users) == 0 {
		users = list{"alice:alice@example.com:engineering,admins", "bob:bob@example.com:sales"}
	}
	for _, u := range users {
		user, err := parseUser(u)
		if err != nil {
			return fmt.Errorf("--user %q: %w", u, err)
		}
		cfg.Users = append(cfg.Users, user)
	}
	for _, d := range deny {
		found := false
		for i := range cfg.Users {
			if cfg.Users[i].Subject == d {
				cfg.Users[i].DenyConsent, found = true, true
			}
		}
		if !found {
			return fmt.Errorf("--deny-consent %q: not a --user", d)
		}
	}
	var clients []authserver.Client
	if *clientsFile != "" {
		data, err := os.ReadFile(*clientsFile)
		if err != nil {
			return fmt.Errorf("--clients: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&clients); err != nil {
			return fmt.Errorf("--clients %s: want a JSON list of clients: %w", *clientsFile, err)
		}
	}
	if *exchangeFile != "" {
		ex, err := readExchangeClients(*exchangeFile)
		if err != nil {
			return fmt.Errorf("--exchange-clients %s: %w", *exchangeFile, err)
		}
		cfg.Exchange.Clients = ex
	}
	if *actorKeys != "" {
		data, err := os.ReadFile(*actorKeys)
		if err != nil {
			return fmt.Errorf("--actor-keys: %w", err)
		}
		cfg.Exchange.TrustedActorKeys = data
	}
	cfg.Exchange.TrustedActorJWKSURL = *actorJWKS

	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	srv, err := authserver.Start(startCtx, cfg)
	cancel()
	if err != nil {
		return err
	}
	defer srv.Close()
	for i, c := range clients {
		if err := srv.CreateClient(ctx, c); err != nil {
			return fmt.Errorf("--clients %s: client %d: %w", *clientsFile, i, err)
		}
	}
	fmt.Fprintf(stderr, "authserver: issuer=%s exchange=%s admin=%s\n", srv.Issuer(), srv.ExchangeIssuer(), srv.AdminURL())
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	fmt.Fprintln(stderr, "authserver: stopped")
	return nil
}

// defaultHydra is $LUSH_HYDRA, or .tools/bin/hydra.
func defaultHydra() string {
	if p := os.Getenv("LUSH_HYDRA"); p != "" {
		return p
	}
	return filepath.Join(".tools", "bin", "hydra")
}

// parseUser parses SUBJECT:EMAIL:GROUP,GROUP (the subject may hold colons; email and groups are
// the last two fields, either may be empty).
func parseUser(s string) (authserver.User, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 3 {
		return authserver.User{}, errors.New("want SUBJECT:EMAIL:GROUP,GROUP (email and groups may be empty, as in bob::)")
	}
	n := len(parts)
	u := authserver.User{Subject: strings.Join(parts[:n-2], ":"), Email: parts[n-2]}
	if u.Subject == "" {
		return authserver.User{}, errors.New("the subject is empty")
	}
	for _, g := range strings.Split(parts[n-1], ",") {
		if g = strings.TrimSpace(g); g != "" {
			u.Groups = append(u.Groups, g)
		}
	}
	return u, nil
}

// readExchangeClients reads "<client id> <secret>" lines (# comments and blank lines skipped).
func readExchangeClients(path string) ([]authserver.ExchangeClient, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []authserver.ExchangeClient
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"<client id> <secret>\"", n)
		}
		out = append(out, authserver.ExchangeClient{ID: fields[0], Secret: fields[1]})
	}
	return out, sc.Err()
}
