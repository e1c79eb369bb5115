package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lush-agents/lush/cmd/lushctl/stack"
	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/bundlesource"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/telemetry"
)

type gatewayFlags struct {
	config, listen, build, decisionLog, environment, devPrincipal, logLevel, ready string
	extAuthz, extAuthzSocket                                                       string
	liveWrites, devGroups, nodePrefix                                              []string
	dev, watch                                                                     bool
	upstreamWait                                                                   time.Duration
}

func newGatewayCmd() *cobra.Command {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway [dir]",
		Short: "Serve the MCP gateway in front of a project's MCP servers",
		Long: `Gateway serves one MCP endpoint per agent of a build:

  /agents/<name>/mcp       streamable HTTP (MCP 2025-03-26 … 2025-11-25)
  /agents/<name>/sse       HTTP+SSE for older clients (messages to /agents/<name>/message)
  /health, /metrics        health (JSON) and Prometheus metrics

Each endpoint offers the tools of the agent's allowlist that the caller may use. Every call is
decided by the project's compiled policy and written to the decision log before it runs; writes
are stubbed unless live writes are on for them (--live-writes). The gateway starts, supervises and
restarts the project's stdio MCP servers, and connects to its remote ones.

Without --build the project in dir is built first (offline) and deployed. The gateway then
follows the project's deployed build: lushctl deploy <hash> swaps it in, atomically; a build that
does not load is refused while the current one keeps serving. With --watch the gateway also
rebuilds the project when its files change and deploys the result (a project that does not build
is reported, and the current build keeps serving).

Callers authenticate as the config's auth: section says (JWT, API keys, trusted proxy,
delegation tokens). --dev accepts requests without credentials as --dev-principal (default
user:<your login>), for local work only.

Memory: unless GOGC or GOMEMLIMIT is set, the gateway (like lushctl serve and run) runs Go's
garbage collector at GOGC=400 under a soft memory limit of max(256 MiB, twice the live heap plus
the runtime's other memory): less CPU per call for a small heap, no more than GOGC=100's memory
for a large one. GOGC=100 restores Go's default (docs/memory.md).`,
		Example: `  # Local development: build, deploy and serve the quickstart; writes are stubbed
  lushctl gateway --dev examples/quickstart

  # ... and pick up every edit of a spec or a policy
  lushctl gateway --dev --watch examples/quickstart

  # Writes to one tool run for real; every other write is stubbed
  lushctl gateway --dev --live-writes=mcp://npx/@modelcontextprotocol/server-filesystem examples/quickstart

  # Production-like: a config file with auth, a kept build, a shared decision log
  lushctl gateway --config gateway.yaml --build 3fa9c1e2 .`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error { return runGateway(cmd, projectDir(a), &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "gateway config file (YAML; see docs/gateway.md)")
	addExtAuthzFlags(fl, &f)
	fl.StringVar(&f.listen, "listen", "", "address to listen on (default 127.0.0.1:8080)")
	fl.StringVar(&f.build, "build", "", "deploy this kept build (hash or prefix) instead of building the project")
	fl.StringArrayVar(&f.liveWrites, "live-writes", nil, "run writes for real: --live-writes for every tool, --live-writes=<tool ref> per tool (repeatable)")
	fl.Lookup("live-writes").NoOptDefVal = "all"
	fl.StringVar(&f.decisionLog, "decision-log", "", "decision log (SQLite file; default <dir>/.lush/decisions.db)")
	fl.StringVar(&f.environment, "environment", "", "environment name passed to the policy (default dev)")
	fl.BoolVar(&f.dev, "dev", false, "accept requests without credentials as --dev-principal (local development only)")
	fl.StringVar(&f.devPrincipal, "dev-principal", "", "principal of credential-less requests in --dev mode (default user:<login>)")
	fl.StringArrayVar(&f.devGroups, "dev-group", nil, "a group of the dev principal (repeatable)")
	fl.StringArrayVar(&f.nodePrefix, "node-prefix", nil, "npm prefix with installed MCP servers (repeatable; default $LUSH_NODE_PREFIX)")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fl.BoolVar(&f.watch, "watch", false, "rebuild and redeploy the project whenever one of its files changes (local development)")
	fl.StringVar(&f.ready, "ready-file", "", "write the listening address to this file once serving (for scripts and tests)")
	fl.DurationVar(&f.upstreamWait, "upstream-wait", 30*time.Second, "at start, wait up to this long for each MCP server's first connection attempt before announcing (0: do not wait)")
	return cmd
}

func runGateway(cmd *cobra.Command, dir string, f *gatewayFlags) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	logger, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return err
	}
	cfg, err := loadGatewayConfig(f.config)
	if err != nil {
		return err
	}
	if err := f.apply(&cfg, dir); err != nil {
		return err
	}
	if !cfg.Auth.Configured() {
		return usage("no authentication is configured: pass --dev for local development, or configure auth: in --config (docs/gateway.md)")
	}
	if f.watch && f.build != "" {
		return usage("--watch rebuilds the project: it cannot be combined with --build")
	}
	store := buildstore.ForProject(dir)
	if err := deployInitial(cmd, dir, store, f); err != nil {
		return err
	}
	tracing, err := telemetry.NewTracing(ctx, "lush-gateway", buildVersion())
	if err != nil {
		return err
	}
	defer tracing.Shutdown(context.WithoutCancel(ctx))
	abs, _ := filepath.Abs(dir)
	st, err := startStack(ctx, stack.Config{ProjectDir: abs, Gateway: cfg, Tracer: tracing.Provider, Logger: logger, Version: buildVersion()})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	srv := serving{store: store, upstreamWait: f.upstreamWait, ready: f.ready, logger: logger, announce: func(st *stack.Stack) {
		printServing(out, st.Addr(), st.Gateway.Revision(), store, cfg, st.Gateway.Credentials(), st.Log().Path())
		printExtAuthz(out, st.Gateway)
	}}
	if f.watch {
		srv.extra = func(ctx context.Context) { watchProject(ctx, dir, store, stderr, logger) }
	}
	return serveStack(ctx, st, srv)
}

// startStack builds a server process; a mistake in its configuration is a usage error.
func startStack(ctx context.Context, cfg stack.Config) (*stack.Stack, error) {
	st, err := stack.Start(ctx, cfg)
	var ce *stack.ConfigError
	if errors.As(err, &ce) {
		return nil, usage("%v", err)
	}
	return st, err
}

// loadGatewayConfig reads the gateway config file, if one is named; a bad file is a usage error.
func loadGatewayConfig(path string) (gateway.Config, error) {
	if path == "" {
		return gateway.Config{}, nil
	}
	cfg, err := gateway.LoadConfig(path)
	if err != nil {
		return cfg, usage("%v", err)
	}
	return cfg, nil
}

// waitUpstreams gives the build's MCP servers time to start (npx may take seconds), so that the
// first clients see their tools; servers that failed to start are reported and keep being retried.
func waitUpstreams(ctx context.Context, gw *gateway.Gateway, wait time.Duration, logger *slog.Logger) {
	if wait <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	gw.WaitSettled(ctx)
	for ref, st := range gw.Upstreams() {
		if !st.Up {
			logger.Warn("MCP server is not up yet; its tools are offered once it is", "server", ref, "reason", st.LastError)
		}
	}
}

// apply merges the flags into the config.
func (f *gatewayFlags) apply(cfg *gateway.Config, dir string) error {
	if f.listen != "" {
		cfg.Listen = f.listen
	}
	if f.environment != "" {
		cfg.Environment = f.environment
	}
	if f.extAuthz != "" {
		cfg.ExtAuthz.Listen = f.extAuthz
	}
	if f.extAuthzSocket != "" {
		cfg.ExtAuthz.Socket = f.extAuthzSocket
	}
	for _, lw := range f.liveWrites {
		if lw == "all" {
			cfg.LiveWrites.All = true
		} else {
			cfg.LiveWrites.Tools = append(cfg.LiveWrites.Tools, lw)
		}
	}
	if f.decisionLog != "" {
		cfg.DecisionLog = f.decisionLog
	} else if cfg.DecisionLog == "" {
		if env := os.Getenv("LUSH_DECISION_LOG"); env != "" {
			cfg.DecisionLog = env
		} else {
			cfg.DecisionLog = filepath.Join(dir, ".lush", "decisions.db")
		}
	}
	prefixes := f.nodePrefix
	if len(prefixes) == 0 && os.Getenv("LUSH_NODE_PREFIX") != "" {
		prefixes = filepath.SplitList(os.Getenv("LUSH_NODE_PREFIX"))
	}
	cfg.Upstreams.NodePrefixes = append(cfg.Upstreams.NodePrefixes, prefixes...)
	if f.dev || f.devPrincipal != "" {
		p := f.devPrincipal
		if p == "" {
			login := os.Getenv("USER")
			if login == "" {
				login = "dev"
			}
			p = "user:" + login
		}
		cfg.Auth.Dev = &identity.DevConfig{Principal: p, Groups: f.devGroups}
	}
	return nil
}

// deployInitial makes sure a build is deployed: the one named by --build, or the project built now.
func deployInitial(cmd *cobra.Command, dir string, store *buildstore.Store, f *gatewayFlags) error {
	if f.build != "" {
		hash, err := store.Resolve(f.build)
		if err != nil {
			return usage("--build: %v", err)
		}
		return store.Deploy(hash)
	}
	res, err := compiler.Build(cmd.Context(), dir, compiler.Offline(true))
	if err != nil {
		return err
	}
	if !res.OK() {
		if err := diag.WriteText(cmd.ErrOrStderr(), res.Diagnostics); err != nil {
			return err
		}
		return failed("the project does not build (%s)", diag.Summary(res.Errors, res.Warnings))
	}
	if err := store.Save(res.Hash, res.ManifestJSON, res.Bundle); err != nil {
		return err
	}
	return store.Deploy(res.Hash)
}

func printServing(w io.Writer, addr, hash string, store *buildstore.Store, cfg gateway.Config, credentials, decisionLog string) {
	m, _, err := store.Manifest(hash)
	if err != nil {
		return
	}
	fmt.Fprintf(w, "lush gateway: build %s of %s on http://%s\n", manifest.Short(hash), m.Project, addr)
	for _, a := range m.Agents {
		fmt.Fprintf(w, "  agent %-16s http://%s/agents/%s/mcp\n", a.Name, addr, a.Name)
	}
	switch {
	case cfg.LiveWrites.All:
		fmt.Fprintln(w, "  live writes: ALL tools (writes run for real)")
	case len(cfg.LiveWrites.Tools) > 0:
		fmt.Fprintf(w, "  live writes: %s (every other write is stubbed)\n", strings.Join(cfg.LiveWrites.Tools, ", "))
	default:
		fmt.Fprintln(w, "  live writes: off (writes are stubbed)")
	}
	if cfg.Auth.Dev != nil {
		fmt.Fprintf(w, "  dev mode: requests without credentials act as %s\n", cfg.Auth.Dev.Principal)
	}
	printOAuth(w, cfg.Auth, "http://"+addr)
	fmt.Fprintf(w, "  credentials: %s\n", credentials)
	fmt.Fprintf(w, "  decision log: %s\n", decisionLog) // without a PostgreSQL URL's password
}

// printOAuth prints the authorization servers whose access tokens the process accepts, and where
// MCP clients find them (RFC 9728 metadata, served at base).
func printOAuth(w io.Writer, auth identity.Config, base string) {
	for _, o := range auth.OAuth {
		fmt.Fprintf(w, "  oauth: access tokens of %s (clients discover it at %s%s/agents/<name>/mcp)\n", o.Issuer, base, identity.MetadataPath)
	}
}

// printExtAuthz prints where the ext_authz server listens, when it runs.
func printExtAuthz(w io.Writer, gw *gateway.Gateway) {
	ea := gw.ExtAuthz()
	if ea == nil {
		return
	}
	var addrs []string
	for _, a := range ea.Addrs() {
		if a.Network() == "unix" {
			addrs = append(addrs, "unix://"+a.String())
		} else {
			addrs = append(addrs, a.String())
		}
	}
	fmt.Fprintf(w, "  ext_authz (Envoy, gRPC): %s\n", strings.Join(addrs, ", "))
}

// addExtAuthzFlags adds the flags that turn on the ext_authz server.
func addExtAuthzFlags(fl *pflag.FlagSet, f *gatewayFlags) {
	fl.StringVar(&f.extAuthz, "ext-authz", "", "also serve Envoy's ext_authz (gRPC) on this address, e.g. 127.0.0.1:9191 (docs/mesh.md)")
	fl.StringVar(&f.extAuthzSocket, "ext-authz-socket", "", "also serve Envoy's ext_authz (gRPC) on this Unix socket")
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usage("--log-level: %q is not debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func newDeployCmd() *cobra.Command {
	var to, resource, tokenFile, output string
	cmd := &cobra.Command{
		Use:   "deploy <hash> [dir]",
		Short: "Make a kept build the one running gateways serve (and roll back), or publish it to replicas",
		Long: `Deploy names a kept build (lushctl builds lists them) as the project's deployed build.
Gateways serving the project pick it up within a second and swap it in atomically; calls in flight
finish under the previous build. Deploying an older hash rolls back.

With --to, deploy publishes the build's OPA bundle (the manifest travels inside it) for replicas
that serve from a bundle server (lushctl serve with LUSH_BUNDLE_SERVICE) instead:

  --to <directory>   the bundle is written to <directory>/<resource> atomically (a temporary
                     file, then a rename), for any static server (nginx, an S3 sync, a file server)
  --to <http(s) URL> the bundle is uploaded with an HTTP PUT to that URL (the bundle's full URL),
                     with the bearer token in --token-file, for bundle servers that accept uploads
  --to oci://<registry>/<repository>:<tag>
                     the bundle is pushed to an OCI registry as OPA pulls it (an image manifest
                     whose application/vnd.oci.image.layer.v1.tar+gzip layer is the bundle), with
                     the bearer token in --token-file; replicas and OPA (services[].type: oci) pull
                     it; oci+http:// is plain HTTP, for a registry on loopback only

The replicas poll the server and switch within their polling interval; lushctl status --replicas
shows when all of them run it. The local deployed build does not change.
Exit codes: 0 published, 1 the publish failed, 2 usage (no such build, a bad flag).`,
		Example: `  lushctl deploy 3fa9c1e2
  lushctl deploy $(lushctl build -q) examples/quickstart

  # Publish to the directory a bundle server serves, then wait for the replicas
  lushctl deploy 3fa9c1e2 --to /srv/bundles --resource bundles/quickstart.tar.gz
  lushctl status --replicas http://10.0.0.5:8080,http://10.0.0.6:8080 --watch

  # Upload to a bundle server that accepts PUT
  lushctl deploy 3fa9c1e2 --to https://bundles.example.com/bundles/quickstart.tar.gz --token-file token.txt -o json

  # Push to an OCI registry (replicas: LUSH_BUNDLE_SERVICE=oci://ghcr.io LUSH_BUNDLE_RESOURCE=acme/lush:prod)
  lushctl deploy 3fa9c1e2 --to oci://ghcr.io/acme/lush:prod --token-file ghcr-token.txt`,
		Args: args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			dir := "."
			if len(a) > 1 {
				dir = a[1]
			}
			store := buildstore.ForProject(dir)
			hash, err := store.Resolve(a[0])
			if err != nil {
				return usage("%v", err)
			}
			if to != "" {
				return publish(cmd, store, hash, publishTarget{to: to, resource: resource, tokenFile: tokenFile, output: output})
			}
			if resource != "" || tokenFile != "" {
				return usage("--resource and --token-file go with --to")
			}
			if err := store.Deploy(hash); err != nil {
				var notFound *os.PathError
				if errors.As(err, &notFound) {
					return failed("%v", err)
				}
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]string{"hash": hash, "to": store.Path()})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deployed %s\n", hash)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&to, "to", "", "publish the bundle instead: a directory a bundle server serves, an http(s) URL to PUT it to, or oci://<registry>/<repository>:<tag>")
	fl.StringVar(&resource, "resource", "", "with a --to directory: the bundle's path in it, as replicas' LUSH_BUNDLE_RESOURCE (default bundles/<project>.tar.gz)")
	fl.StringVar(&tokenFile, "token-file", "", "with a --to URL or oci:// reference: a file holding the bearer token of the upload")
	outputFlag(cmd, &output)
	return cmd
}

// publishTarget is where deploy --to publishes a bundle.
type publishTarget struct{ to, resource, tokenFile, output string }

// publish puts a kept build's bundle where replicas' bundle server serves it.
func publish(cmd *cobra.Command, store *buildstore.Store, hash string, t publishTarget) error {
	m, bundle, err := store.Load(hash)
	if err != nil {
		return failed("%v", err)
	}
	if _, _, err := bundlesource.Unpack(bundle); err != nil {
		return failed("build %s cannot be served by replicas: %v (run lushctl build again: bundles carry their manifest since this version)", manifest.Short(hash), err)
	}
	progress := cmd.ErrOrStderr()
	if t.output != "json" {
		progress = cmd.OutOrStdout()
	}
	res := struct {
		Hash   string `json:"hash"`
		To     string `json:"to"`
		Path   string `json:"path,omitempty"`
		Digest string `json:"digest,omitempty"` // the manifest's, with --to oci://
		Bytes  int    `json:"bytes"`
	}{Hash: hash, To: t.to, Bytes: len(bundle)}
	switch {
	case bundlesource.IsOCI(t.to):
		if t.resource != "" {
			return usage("--resource goes with a --to directory; with oci://, give the repository and tag in --to")
		}
		if err := bundlesource.CheckOCITarget(t.to); err != nil {
			return usage("--to: %v", err)
		}
		if t.tokenFile != "" {
			if _, err := os.Stat(t.tokenFile); err != nil {
				return usage("--token-file: %v", err)
			}
		}
		fmt.Fprintf(progress, "publishing build %s of %s (%d bytes) to %s ...\n", manifest.Short(hash), m.Project, len(bundle), t.to)
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
		defer cancel()
		if res.Digest, err = bundlesource.PublishOCI(ctx, t.to, bundle, hash, t.tokenFile); err != nil {
			return failed("%v", err)
		}
	case bundlesource.IsURL(t.to):
		if t.resource != "" {
			return usage("--resource goes with a --to directory; with a URL, give the bundle's full URL")
		}
		token := ""
		if t.tokenFile != "" {
			b, err := os.ReadFile(t.tokenFile)
			if err != nil {
				return usage("--token-file: %v", err)
			}
			token = strings.TrimSpace(string(b))
		}
		fmt.Fprintf(progress, "publishing build %s of %s (%d bytes) to %s ...\n", manifest.Short(hash), m.Project, len(bundle), t.to)
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
		defer cancel()
		if err := bundlesource.PublishHTTP(ctx, http.DefaultClient, t.to, bundle, token); err != nil {
			return failed("%v", err)
		}
	default:
		if t.tokenFile != "" {
			return usage("--token-file goes with a --to URL")
		}
		if strings.Contains(t.to, "://") {
			return usage("--to %q: give a directory, an http(s):// URL or an oci:// reference", t.to)
		}
		if info, err := os.Stat(t.to); err != nil || !info.IsDir() {
			return usage("--to %s: not a directory (create it, or give an http(s):// URL)", t.to)
		}
		resource := t.resource
		if resource == "" {
			resource = "bundles/" + m.Project + ".tar.gz"
		}
		fmt.Fprintf(progress, "publishing build %s of %s (%d bytes) to %s ...\n", manifest.Short(hash), m.Project, len(bundle), filepath.Join(t.to, resource))
		if res.Path, err = bundlesource.PublishDir(t.to, resource, bundle); err != nil {
			return failed("%v", err)
		}
	}
	if t.output == "json" {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	fmt.Fprintf(progress, "published %s: replicas polling it switch within their polling interval (lushctl status --replicas ... --watch)\n", hash)
	return nil
}
