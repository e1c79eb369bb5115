package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/cmd/lushctl/stack"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/tracestore"
	"github.com/lush-agents/lush/scheduler"
)

type runFlags struct {
	gatewayFlags
	model       modelConfig
	maxTurns    int
	timeout     time.Duration
	schedulerDB string
	catchUp     time.Duration
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [dir]",
		Short: "Serve a project for development: gateway and agents in one process, rebuilt on every change",
		Long: `Run builds the project in dir (default .) and serves it: the gateway, every agent (agentd) and the
scheduler that fires its loops, in one process on one port:

  POST /agents/<name>/chat          chat (JSON)
  POST /agents/<name>/chat/stream   chat (Server-Sent Events)
       /agents/<name>/mcp           the agent as an MCP server (its tool invokes it)
  GET  /agents/<name>/status        the agent, its tools and its recent invocations
  GET  /agents                      the agents you may invoke
  GET  /loops, /loops/<name>/history the loops and their firings (lushctl loop list|history)
  POST /loops/<name>/trigger        fire a loop now (lushctl loop trigger)
       /gateway/agents/<name>/mcp   the agent's tools, through the gateway
  GET  /traces, /traces/<id>        recent traces (kept in memory)
  GET  /health, /metrics

A watcher rebuilds the project when one of its files changes and swaps the new build in; a
project that does not build is reported with file:line and the last good build keeps serving.

Requests without credentials act as --dev-principal (default user:<your login>): run is for
development. Give --config with an auth: section to require credentials.`,
		Example: `  # Offline: the quickstart on its scripted model turns
  lushctl run examples/quickstart --provider scripted

  # Then, from another terminal
  curl -s localhost:8080/agents/orchestrator/chat -d '{"message": "Summarize Q3"}'

  # On Gemini, as a member of group:engineering
  GOOGLE_API_KEY=... lushctl run examples/quickstart --dev-group group:engineering`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error { return runDev(cmd, projectDir(a), &f) },
	}
	fl := cmd.Flags()
	agentFlags(fl, &f.model, &f.maxTurns, &f.timeout)
	fl.StringVar(&f.config, "config", "", "gateway config file (YAML; see docs/gateway.md)")
	addExtAuthzFlags(fl, &f.gatewayFlags)
	fl.StringVar(&f.listen, "listen", "", "address to listen on (default 127.0.0.1:8080)")
	fl.StringArrayVar(&f.liveWrites, "live-writes", nil, "run writes for real: --live-writes for every tool, --live-writes=<tool ref> per tool (repeatable)")
	fl.Lookup("live-writes").NoOptDefVal = "all"
	fl.StringVar(&f.decisionLog, "decision-log", "", "decision log (SQLite file; default <dir>/.lush/decisions.db)")
	fl.StringVar(&f.environment, "environment", "", "environment name passed to the policy (default dev)")
	fl.StringVar(&f.devPrincipal, "dev-principal", "", "principal of requests without credentials (default user:<login>)")
	fl.StringArrayVar(&f.devGroups, "dev-group", nil, "a group of the dev principal (repeatable)")
	fl.StringArrayVar(&f.nodePrefix, "node-prefix", nil, "npm prefix with installed MCP servers (repeatable; default $LUSH_NODE_PREFIX)")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fl.StringVar(&f.schedulerDB, "scheduler-db", "", `the scheduler's store: SQLite file (default <dir>/.lush/scheduler.db), postgres:// URL, or "off"`)
	fl.DurationVar(&f.catchUp, "catch-up", 0, "missed loop firings younger than this run after a restart (default 1h; a loop's catch_up wins)")
	fl.StringVar(&f.ready, "ready-file", "", "write the listening address to this file once serving (for scripts and tests)")
	return cmd
}

func runDev(cmd *cobra.Command, dir string, f *runFlags) error {
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
	if !cfg.Auth.AuthenticatesPeople() {
		f.dev = true // development: requests without credentials act as the dev principal
	}
	if err := f.apply(&cfg, dir); err != nil {
		return err
	}
	mdl, provider, closeModel, err := newModel(ctx, f.model, dir, cfg.Credentials)
	if err != nil {
		return err
	}
	defer closeModel()
	store := buildstore.ForProject(dir)
	if err := deployInitial(cmd, dir, store, &f.gatewayFlags); err != nil {
		return err
	}
	traces := tracestore.NewMemory(0)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(traces))
	defer tp.Shutdown(context.WithoutCancel(ctx))
	abs, _ := filepath.Abs(dir)
	st, err := startStack(ctx, stack.Config{ProjectDir: abs, Gateway: cfg, Model: mdl, Tracer: tp, Traces: tracestore.Handler(traces),
		Logger: logger, Version: buildVersion(), Agents: &agentd.Config{MaxTurns: f.maxTurns, Timeout: f.timeout},
		Scheduler: f.scheduler(dir), Audit: true})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	return serveStack(ctx, st, serving{store: store, upstreamWait: defaultUpstreamWait, ready: f.ready, logger: logger,
		announce: func(st *stack.Stack) { printStack(out, st, store, cfg, provider) },
		extra:    func(ctx context.Context) { watchProject(ctx, dir, store, stderr, logger) }})
}

// shutdownGrace bounds a graceful stop: loop runs, then requests in flight (Stack.Shutdown).
// It stays under the 30s that container orchestrators give by default before SIGKILL.
const shutdownGrace = 25 * time.Second

// defaultUpstreamWait is how long, at start, run and serve wait for each MCP server's first
// connection attempt before announcing (lushctl gateway's --upstream-wait).
const defaultUpstreamWait = 30 * time.Second

// serving is how serveStack serves a stack.
type serving struct {
	store        *buildstore.Store
	pinned       string        // a full hash to serve; "" follows the store's deployed build
	upstreamWait time.Duration // wait up to this long for the MCP servers before announcing (0: do not)
	ready        string        // a file to write the listening address to, once serving
	announce     func(*stack.Stack)
	extra        func(context.Context) // runs beside the server until it stops (the watcher)
	logger       *slog.Logger
}

// serveStack serves the build pinned, or else follows the store's deployed build, and runs
// extra when given, until ctx ends; then it shuts the stack down gracefully.
func serveStack(ctx context.Context, st *stack.Stack, s serving) (err error) {
	ctx, stop := context.WithCancel(ctx)
	var background sync.WaitGroup
	defer func() {
		stop()
		background.Wait()
		if serr := shutdown(ctx, st, shutdownGrace, s.logger); err == nil {
			err = serr
		}
	}()
	followErr := make(chan error, 1)
	if s.pinned != "" {
		m, bundle, err := s.store.Load(s.pinned)
		if err != nil {
			return err
		}
		if err := st.Deploy(ctx, m, s.pinned, bundle); err != nil {
			return err
		}
	} else {
		background.Go(func() { followErr <- st.Gateway.Follow(ctx, s.store, gateway.DefaultFollowInterval) })
	}
	for st.Gateway.Revision() == "" {
		select {
		case err := <-followErr:
			return err
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Millisecond):
		}
	}
	if s.extra != nil {
		background.Go(func() { s.extra(ctx) })
	}
	waitUpstreams(ctx, st.Gateway, s.upstreamWait, s.logger)
	s.announce(st)
	if s.ready != "" {
		if err := os.WriteFile(s.ready, []byte(st.Addr()), 0o644); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-st.Served():
		return fmt.Errorf("serve: %w", err)
	case err := <-followErr:
		return err
	}
}

// stopper is what shutdown stops: a *stack.Stack.
type stopper interface {
	Shutdown(ctx context.Context) error
}

// shutdown stops the stack gracefully, within grace. A stop that runs out of time cuts off the
// requests still running: the server ran and found a failure (exit 1); it is not a command that
// could not run.
func shutdown(ctx context.Context, st stopper, grace time.Duration, logger *slog.Logger) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	logger.Info("shutting down")
	err := st.Shutdown(sctx)
	switch {
	case err == nil:
		logger.Info("shut down")
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return failed("shutdown: requests still running after %s were cut off", grace)
	default:
		return fmt.Errorf("shutdown: %w", err)
	}
}

func printStack(w io.Writer, st *stack.Stack, store *buildstore.Store, cfg gateway.Config, provider string) {
	hash := st.Gateway.Revision()
	m, _, err := store.Manifest(hash)
	if err != nil {
		return
	}
	url := "http://" + st.Addr()
	fmt.Fprintf(w, "lush: build %s of %s on %s\n", manifest.Short(hash), m.Project, url)
	for _, a := range m.Agents {
		fmt.Fprintf(w, "  agent %-16s %s/agents/%s/chat   (tools: %s/gateway/agents/%s/mcp)\n", a.Name, url, a.Name, url, a.Name)
	}
	if st.Scheduler != nil && len(m.Loops) > 0 {
		names := make([]string, 0, len(m.Loops))
		for _, l := range m.Loops {
			names = append(names, l.Name)
		}
		fmt.Fprintf(w, "  loops: %s (lushctl loop list)\n", strings.Join(names, ", "))
	}
	printExtAuthz(w, st.Gateway)
	fmt.Fprintf(w, "  model: %s\n", provider)
	switch {
	case cfg.LiveWrites.All:
		fmt.Fprintln(w, "  live writes: ALL tools (writes run for real)")
	case len(cfg.LiveWrites.Tools) > 0:
		fmt.Fprintf(w, "  live writes: %v (every other write is stubbed)\n", cfg.LiveWrites.Tools)
	default:
		fmt.Fprintln(w, "  live writes: off (writes are stubbed)")
	}
	if cfg.Auth.Dev != nil {
		fmt.Fprintf(w, "  dev mode: requests without credentials act as %s\n", cfg.Auth.Dev.Principal)
	}
	printOAuth(w, cfg.Auth, url)
	fmt.Fprintf(w, "  decision log: %s (auditors: %s/ui/, lushctl audit verify)\n", st.Log().Path(), url)
}

// scheduler is the scheduler's configuration from the flags; nil when --scheduler-db=off.
func (f *runFlags) scheduler(dir string) *scheduler.Config {
	store := firstNonEmpty(f.schedulerDB, filepath.Join(dir, ".lush", "scheduler.db"))
	if store == "off" {
		return nil
	}
	return &scheduler.Config{Store: store, CatchUp: f.catchUp}
}
