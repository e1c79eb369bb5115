package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/cmd/lushctl/stack"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/bundlesource"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/internal/tracestore"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/scheduler"
)

func newServeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Serve a kept build in production: gateway and agents, configured by environment variables",
		Long: `Serve runs a kept build (lushctl build, then lushctl deploy or LUSH_BUILD) with the gateway and every
agent in one process, with no file watcher. It is configured only by environment variables:

  PORT                          listen port (default 8080; all interfaces)
  LUSH_LISTEN_HOST              listen on this address only (e.g. 127.0.0.1) instead of all
  LOG_LEVEL                     debug, info, warn, error (default info)
  GOOGLE_API_KEY                Gemini API key, when the credential broker has none for
                                model://gemini (likewise OPENAI_API_KEY, ANTHROPIC_API_KEY)
  OTEL_EXPORTER_OTLP_ENDPOINT   OpenTelemetry collector (with TRACE_BACKEND=otlp)
  TRACE_BACKEND                 sqlite (default), otlp or none
  LUSH_PROJECT                  the project directory holding .lush/build (default .)
  LUSH_BUILD                    the build to serve (hash or prefix); default: the deployed one,
                                followed as lushctl deploy changes it
  LUSH_BUNDLE_SERVICE           serve the builds a bundle server serves instead (OPA's bundle
                                protocol: ETag polling, jitter, long polling): its base URL; or
                                an OCI registry (OPA's type: oci), oci://<host>[:port][/prefix]
                                (oci+http:// for a registry on loopback)
  LUSH_BUNDLE_RESOURCE          the bundle's path on it (required with LUSH_BUNDLE_SERVICE), e.g.
                                bundles/quickstart.tar.gz; on a registry <repository>:<tag> or
                                <repository>@sha256:<digest>, e.g. acme/lush:prod
  LUSH_BUNDLE_TOKEN_FILE        a file holding a bearer token for the bundle server or registry
  LUSH_BUNDLE_VERIFY_KEY        a PEM public key (or HMAC secret) file every bundle must be signed
                                with; LUSH_BUNDLE_VERIFY_KEY_ID (default "default") and
                                LUSH_BUNDLE_VERIFY_ALG (default RS256) name the key and algorithm
  LUSH_BUNDLE_POLL_MIN, LUSH_BUNDLE_POLL_MAX   delay between polls, jittered (default 10s, 20s)
  LUSH_BUNDLE_LONG_POLL         ask the server to hold each poll up to this long (default off;
                                not with a registry)
  LUSH_INSTANCE                 this replica's name in the decision log (labels.id; default: the
                                host name, which is the pod's name in Kubernetes)
  LUSH_CONFIG                   gateway config file: auth, credentials, upstreams (docs/gateway.md)
  LUSH_DECISION_LOG             decision log file (default <project>/.lush/decisions.db); its
                                directory is the state directory, where the traces and the
                                scheduler's store go by default (<project>/.lush for a
                                postgres:// log)
  LUSH_TRACES_DB                trace database with TRACE_BACKEND=sqlite (default
                                <state directory>/traces.db)
  LUSH_DELEGATION_KEY           Ed25519 private key (PEM) for delegation tokens; replicas that call
                                each other's agents share it (default: a key per process)
  LUSH_LIVE_WRITES              "all" or a comma-separated list of tool references (default: none)
  LUSH_ALLOWED_HOSTS            comma-separated host names clients use (besides loopback)
  LUSH_EXT_AUTHZ_LISTEN         also serve Envoy's ext_authz (gRPC) on this address, e.g.
                                127.0.0.1:9191 (LUSH_CONFIG's ext_authz: section sets the rest)
  LUSH_EXT_AUTHZ_SOCKET         ... and/or on this Unix socket
  LUSH_ENVIRONMENT              input.environment of the policy (default production)
  LUSH_MODEL_PROVIDER           empty (default: each agent on the provider its model names), a
                                provider (only its models run) or scripted (LUSH_SCRIPTS)
  LUSH_MAX_TURNS, LUSH_TIMEOUT  agent loop limits (default 12 turns, 5m)
  LUSH_SCHEDULER_DB             the loop scheduler's store: a SQLite file (default
                                <state directory>/scheduler.db), a postgres:// URL shared by
                                replicas, or "off" (loops do not fire in this process)
  LUSH_SCHEDULER_CATCH_UP       missed firings younger than this run after downtime (default 1h;
                                a loop's catch_up wins)
  LUSH_SCHEDULER_LEASE          a dead replica's firings are retried after this long (default 30s)
  LUSH_SCHEDULER_MAX_RUNNING    loop firings this process runs at once (default 64)
  LUSH_SCHEDULER_POLL           how often the store is checked for queued, manual and orphaned
                                firings (default 2s)

Authentication comes from LUSH_CONFIG's auth: section; serve refuses to start without one.
A bad variable is exit 2; a port or a store that cannot be opened is exit 3.
SIGTERM (or SIGINT) stops accepting requests, ends the MCP streams clients hold open, lets the requests in
flight, and loop runs, finish (up to 25s) and flushes the decision log and the traces. It exits 0, or 1 when
requests still running at the end of the 25s were cut off.`,
		Example: `  lushctl build && lushctl deploy $(lushctl build -q)
  LUSH_CONFIG=gateway.yaml GOOGLE_API_KEY=... PORT=8080 lushctl serve`,
		Args: args(cobra.NoArgs),
		RunE: runServe,
	}
}

// serveEnv reads serve's configuration from the environment; errors name the variable.
type serveEnv struct {
	project, build, configFile, traceBackend, tracesDB string
	cfg                                                gateway.Config
	model                                              modelConfig
	agents                                             agentd.Config
	key                                                ed25519.PrivateKey
	logLevel                                           string
	scheduler                                          *scheduler.Config
	instance                                           string
	bundles                                            *bundlesource.Config // nil: builds come from the project's store
}

func readServeEnv() (*serveEnv, error) {
	e := &serveEnv{project: envOr("LUSH_PROJECT", "."), build: os.Getenv("LUSH_BUILD"), configFile: os.Getenv("LUSH_CONFIG"),
		traceBackend: envOr("TRACE_BACKEND", "sqlite"), logLevel: envOr("LOG_LEVEL", "info"),
		model: modelConfig{provider: os.Getenv("LUSH_MODEL_PROVIDER"), scripts: os.Getenv("LUSH_SCRIPTS")}}
	cfg, err := loadGatewayConfig(e.configFile) // its errors name the file
	if err != nil {
		return nil, err
	}
	e.cfg = cfg
	if !e.cfg.Auth.AuthenticatesPeople() && e.cfg.Auth.Dev == nil {
		return nil, usage("no authentication is configured: set LUSH_CONFIG to a gateway config with an auth: section (docs/running.md)")
	}
	port := envOr("PORT", "8080")
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return nil, usage("PORT: %q is not a port number", port)
	}
	e.cfg.Listen = ":" + port
	if host := os.Getenv("LUSH_LISTEN_HOST"); host != "" {
		if strings.ContainsAny(host, ":/ ") && !strings.HasPrefix(host, "[") {
			return nil, usage("LUSH_LISTEN_HOST: %q is not a host name or IP address (an IPv6 address goes in brackets)", host)
		}
		e.cfg.Listen = host + ":" + port
	}
	e.cfg.DecisionLog = envOr("LUSH_DECISION_LOG", firstNonEmpty(e.cfg.DecisionLog, filepath.Join(e.project, ".lush", "decisions.db")))
	state := stateDir(e.project, e.cfg.DecisionLog)
	e.tracesDB = envOr("LUSH_TRACES_DB", filepath.Join(state, "traces.db"))
	e.cfg.Environment = envOr("LUSH_ENVIRONMENT", firstNonEmpty(e.cfg.Environment, "production"))
	if lw := os.Getenv("LUSH_LIVE_WRITES"); lw != "" {
		if lw == "all" {
			e.cfg.LiveWrites.All = true
		} else {
			for _, ref := range strings.Split(lw, ",") {
				e.cfg.LiveWrites.Tools = append(e.cfg.LiveWrites.Tools, strings.TrimSpace(ref))
			}
		}
	}
	e.cfg.ExtAuthz.Listen = envOr("LUSH_EXT_AUTHZ_LISTEN", e.cfg.ExtAuthz.Listen)
	e.cfg.ExtAuthz.Socket = envOr("LUSH_EXT_AUTHZ_SOCKET", e.cfg.ExtAuthz.Socket)
	if hosts := os.Getenv("LUSH_ALLOWED_HOSTS"); hosts != "" {
		for _, h := range strings.Split(hosts, ",") {
			e.cfg.AllowedHosts = append(e.cfg.AllowedHosts, strings.TrimSpace(h))
		}
	}
	switch e.traceBackend {
	case "sqlite", "otlp", "none":
	default:
		return nil, usage("TRACE_BACKEND: %q is not sqlite, otlp or none", e.traceBackend)
	}
	if e.traceBackend == "otlp" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, usage("TRACE_BACKEND=otlp needs OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if v := os.Getenv("LUSH_MAX_TURNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, usage("LUSH_MAX_TURNS: %q is not a positive number", v)
		}
		e.agents.MaxTurns = n
	}
	if v := os.Getenv("LUSH_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, usage("LUSH_TIMEOUT: %q is not a positive duration like 5m", v)
		}
		e.agents.Timeout = d
	}
	if e.scheduler, err = schedulerFromEnv(state); err != nil {
		return nil, err
	}
	e.instance = os.Getenv("LUSH_INSTANCE")
	if e.bundles, err = bundlesFromEnv(&e.cfg); err != nil {
		return nil, err
	}
	if e.bundles != nil && e.build != "" {
		return nil, usage("LUSH_BUILD and LUSH_BUNDLE_SERVICE: set one (a kept build, or the builds a bundle server serves)")
	}
	if k := os.Getenv("LUSH_DELEGATION_KEY"); k != "" {
		key, err := identity.LoadPrivateKey(k)
		if err != nil {
			return nil, usage("LUSH_DELEGATION_KEY: %v", err)
		}
		e.key = key
	}
	return e, nil
}

func runServe(cmd *cobra.Command, _ []string) error {
	ctx := cmd.Context()
	e, err := readServeEnv()
	if err != nil {
		return err
	}
	logger, err := newLogger(cmd.ErrOrStderr(), e.logLevel)
	if err != nil {
		return usage("LOG_LEVEL: %q is not debug, info, warn or error", e.logLevel)
	}
	store := buildstore.ForProject(e.project)
	var source *bundlesource.Source
	if e.bundles != nil {
		if source, err = bundlesource.New(*e.bundles); err != nil {
			return usage("LUSH_BUNDLE_*: %v", err)
		}
	}
	pinned := ""
	if e.build != "" {
		if pinned, err = store.Resolve(e.build); err != nil {
			return usage("LUSH_BUILD: %v", err)
		}
	}
	mdl, provider, closeModel, err := newModel(ctx, e.model, e.project, e.cfg.Credentials)
	if err != nil {
		return err
	}
	defer closeModel()
	tp, traces, err := serveTracing(ctx, e)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if sdk, ok := tp.(*sdktrace.TracerProvider); ok {
			sdk.Shutdown(sctx)
		}
		if traces != nil {
			traces.Close()
		}
	}()
	abs, _ := filepath.Abs(e.project)
	scfg := stack.Config{ProjectDir: abs, Gateway: e.cfg, Agents: &e.agents, Model: mdl, DelegationKey: e.key,
		Tracer: tp, Logger: logger, Version: buildVersion(), Scheduler: e.scheduler, Audit: true, Builds: store, Instance: e.instance}
	if traces != nil { // TRACE_BACKEND=sqlite: the console's trace page reads it
		scfg.TraceStore = traces
	}
	st, err := startStack(ctx, scfg)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	return serveStack(ctx, st, serving{store: store, pinned: pinned, source: source, upstreamWait: defaultUpstreamWait, logger: logger,
		announce: func(st *stack.Stack) {
			printStack(out, st, e.cfg, provider)
			if source != nil {
				fmt.Fprintf(out, "  builds: from %s (lushctl deploy --to publishes them)\n", source.URL())
			}
		}})
}

// serveTracing builds the tracer provider TRACE_BACKEND names.
func serveTracing(ctx context.Context, e *serveEnv) (trace.TracerProvider, *tracestore.SQLite, error) {
	res := telemetry.Resource("lush", buildVersion())
	switch e.traceBackend {
	case "sqlite":
		db, err := tracestore.OpenSQLite(ctx, e.tracesDB)
		if err != nil {
			return nil, nil, fmt.Errorf("TRACE_BACKEND=sqlite: %w", err)
		}
		return sdktrace.NewTracerProvider(sdktrace.WithBatcher(db), sdktrace.WithResource(res)), db, nil
	case "otlp":
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("TRACE_BACKEND=otlp: %w", err)
		}
		return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil, nil
	}
	return noop.NewTracerProvider(), nil, nil
}

// stateDir is where serve keeps its state by default: beside the decision log when that is a file
// (so that a read-only project with LUSH_DECISION_LOG on a writable volume keeps every file
// there), and the project's .lush otherwise.
func stateDir(project, decisionLog string) string {
	if decisionlog.IsPostgres(decisionLog) {
		return filepath.Join(project, ".lush")
	}
	return filepath.Dir(decisionLog)
}

// schedulerFromEnv reads the scheduler's LUSH_SCHEDULER_* variables, the store defaulting to
// scheduler.db in the state directory; nil means off.
func schedulerFromEnv(state string) (*scheduler.Config, error) {
	store := envOr("LUSH_SCHEDULER_DB", filepath.Join(state, "scheduler.db"))
	if store == "off" {
		return nil, nil
	}
	cfg := &scheduler.Config{Store: store}
	for _, v := range []struct {
		name string
		dst  *time.Duration
	}{{"LUSH_SCHEDULER_CATCH_UP", &cfg.CatchUp}, {"LUSH_SCHEDULER_LEASE", &cfg.Lease}, {"LUSH_SCHEDULER_POLL", &cfg.Poll}} {
		if s := os.Getenv(v.name); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return nil, usage("%s: %q is not a positive duration like 30s", v.name, s)
			}
			*v.dst = d
		}
	}
	if v := os.Getenv("LUSH_SCHEDULER_MAX_RUNNING"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, usage("LUSH_SCHEDULER_MAX_RUNNING: %q is not a positive number", v)
		}
		cfg.MaxRunning = n
	}
	return cfg, nil
}

// bundlesFromEnv reads the LUSH_BUNDLE_* variables: where builds come from (nil: the project's
// store) and the key they must be signed with (into cfg.Bundles, which the gateway verifies with).
func bundlesFromEnv(cfg *gateway.Config) (*bundlesource.Config, error) {
	if key := os.Getenv("LUSH_BUNDLE_VERIFY_KEY"); key != "" {
		if _, err := os.Stat(key); err != nil {
			return nil, usage("LUSH_BUNDLE_VERIFY_KEY: %v", err)
		}
		cfg.Bundles.VerificationKey = key
		cfg.Bundles.KeyID = envOr("LUSH_BUNDLE_VERIFY_KEY_ID", firstNonEmpty(cfg.Bundles.KeyID, "default"))
		cfg.Bundles.Algorithm = envOr("LUSH_BUNDLE_VERIFY_ALG", firstNonEmpty(cfg.Bundles.Algorithm, "RS256"))
	}
	service := os.Getenv("LUSH_BUNDLE_SERVICE")
	if service == "" {
		for _, v := range []string{"LUSH_BUNDLE_RESOURCE", "LUSH_BUNDLE_TOKEN_FILE", "LUSH_BUNDLE_POLL_MIN", "LUSH_BUNDLE_POLL_MAX", "LUSH_BUNDLE_LONG_POLL"} {
			if os.Getenv(v) != "" {
				return nil, usage("%s is set but LUSH_BUNDLE_SERVICE is not: set the bundle server's URL too", v)
			}
		}
		return nil, nil
	}
	bc := &bundlesource.Config{Service: service, Resource: os.Getenv("LUSH_BUNDLE_RESOURCE"), TokenFile: os.Getenv("LUSH_BUNDLE_TOKEN_FILE")}
	if bc.Resource == "" {
		return nil, usage("LUSH_BUNDLE_RESOURCE: required with LUSH_BUNDLE_SERVICE: the bundle's path on the server, e.g. bundles/app.tar.gz (on an oci:// registry, the repository and tag, e.g. acme/lush:prod)")
	}
	if bc.TokenFile != "" {
		if _, err := os.Stat(bc.TokenFile); err != nil {
			return nil, usage("LUSH_BUNDLE_TOKEN_FILE: %v", err)
		}
	}
	for _, v := range []struct {
		name string
		dst  *time.Duration
	}{{"LUSH_BUNDLE_POLL_MIN", &bc.PollMin}, {"LUSH_BUNDLE_POLL_MAX", &bc.PollMax}, {"LUSH_BUNDLE_LONG_POLL", &bc.LongPoll}} {
		if s := os.Getenv(v.name); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d < time.Second || d%time.Second != 0 {
				return nil, usage("%s: %q is not a whole number of seconds like 10s (at least 1s)", v.name, s)
			}
			*v.dst = d
		}
	}
	if err := bc.Validate(); err != nil {
		return nil, usage("LUSH_BUNDLE_*: %v", err)
	}
	return bc, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func newHealthCmd() *cobra.Command {
	var url string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check a running Lush server's /health (for container health checks)",
		Long: `Health asks a running server's /health endpoint and exits 0 when it answers 200 (a build is
deployed), 1 otherwise. Container images without a shell use it as their HEALTHCHECK.`,
		Example: `  lushctl health --url http://127.0.0.1:8080/health`,
		Args:    args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
			if err != nil {
				return usage("--url: %v", err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return failed("%v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return failed("%s answered %s", url, resp.Status)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:"+envOr("PORT", "8080")+"/health", "the health endpoint")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	return cmd
}
