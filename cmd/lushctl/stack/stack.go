// Package stack assembles one Lush server process: the MCP gateway, agentd and the scheduler
// behind one HTTP listener. They share one decision log, one
// authenticator, one delegation key and, for each deployed build, one policy engine.
//
// Routes:
//
//	/gateway/agents/<name>/mcp   the gateway: the tools of agent <name> (also /sse, /message)
//	/agents/<name>/...           agentd: chat, chat/stream, mcp (the agent as a tool), status
//	/agents                      agentd: the agents the caller may invoke
//	/loops, /loops/<name>/...    the scheduler: loops, their history, manual triggers
//	/traces, /traces/<id>        the trace store, when one is given (lushctl run)
//	/audit/decisions[/<id>]      the decision log, for principals with the audit role (audithttp)
//	/ui/                         the read-only web UI of the decision log (static; /ui redirects)
//	/approvals[/<id>]            calls waiting for a person's approval: list, approve, deny (approvalhttp)
//	/budgets, /budgets/<n>/top-up  budget usage and top-ups, for the budget role (budgethttp)
//	/health, /metrics            health and Prometheus metrics
//
// agentd reaches tools only through the gateway's URL, over HTTP, even in the same process: the
// path a tool call takes is the same whether the two run together or apart.
package stack

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/audit/audithttp"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/gateway/approvalhttp"
	"github.com/lush-agents/lush/gateway/budgethttp"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/scheduler"
)

// Config is what a Stack is made of.
type Config struct {
	ProjectDir string         // where stdio servers and local tools run
	Gateway    gateway.Config // listen address, auth, decision log, live writes, upstreams, ...
	Agents     agentd.Config  // turn limit and timeout; the gateway URL is set by the stack
	// Scheduler, when set, fires the build's loops (its store: SQLite, or PostgreSQL for
	// replicas). Nil: loops do not fire in this process.
	Scheduler *scheduler.Config
	Model     model.Model
	// DelegationKey signs the tokens agents and lush:// calls carry. Nil: a key is generated for
	// this process (replicas that call each other need a shared one).
	DelegationKey ed25519.PrivateKey
	Tracer        trace.TracerProvider // optional
	Traces        http.Handler         // optional: served at /traces (authenticated)
	Logger        *slog.Logger         // optional
	Version       string
}

// Stack is a running server.
type Stack struct {
	Gateway   *gateway.Gateway
	Agents    *agentd.Server
	Scheduler *scheduler.Scheduler // nil without Config.Scheduler
	Metrics   *telemetry.Metrics

	ln        net.Listener
	srv       *http.Server
	log       *decisionlog.Log
	approvals *decisionlog.Approvals
	auth      *identity.Authenticator
	served    chan error
}

// Start opens the decision log, listens, builds the gateway and agentd, and serves. No build is
// deployed yet: Deploy or Follow gives it one; until then every call is denied.
func Start(ctx context.Context, cfg Config) (st *Stack, err error) {
	if cfg.Model == nil {
		return nil, errors.New("stack: a model provider is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	key := cfg.DelegationKey
	if key == nil {
		if _, key, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return nil, fmt.Errorf("generate a delegation key: %w", err)
		}
	}
	gcfg := cfg.Gateway
	if gcfg.Listen == "" {
		gcfg.Listen = gateway.DefaultListen
	}
	// Tokens signed by this process are accepted by it, besides what the config accepts.
	deleg := identity.DelegationConfig{}
	if gcfg.Auth.Delegation != nil {
		deleg = *gcfg.Auth.Delegation
	}
	deleg.Keys = append(deleg.Keys, key.Public().(ed25519.PublicKey))
	gcfg.Auth.Delegation = &deleg
	signer := identity.NewSigner(key, gcfg.Auth.DelegationAudience())

	s := &Stack{Metrics: telemetry.NewMetrics(), served: make(chan error, 1)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.log, err = gateway.OpenDecisionLog(ctx, gcfg, filepath.Join(cfg.ProjectDir, ".lush")); err != nil {
		return nil, err
	}
	if s.approvals, err = gateway.OpenApprovals(gcfg); err != nil {
		return nil, err
	}
	if s.auth, err = identity.New(ctx, gcfg.Auth); err != nil {
		return nil, err
	}
	if s.ln, err = net.Listen("tcp", gcfg.Listen); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", gcfg.Listen, err)
	}
	self := "http://" + loopback(s.ln.Addr().(*net.TCPAddr))
	if gcfg.Agents.URL == "" {
		gcfg.Agents.URL = self
	}
	acfg := cfg.Agents
	acfg.GatewayURL = self
	acfg.Environment = gcfg.Environment
	acfg.AllowedHosts = gcfg.AllowedHosts
	if s.Agents, err = agentd.New(acfg, agentd.Options{Model: cfg.Model, Signer: signer, Auth: s.auth, Log: s.log,
		Metrics: s.Metrics, Tracer: cfg.Tracer, Logger: cfg.Logger, Version: cfg.Version}); err != nil {
		return nil, err
	}
	if cfg.Scheduler != nil {
		scfg := *cfg.Scheduler
		scfg.Environment = gcfg.Environment
		if s.Scheduler, err = scheduler.New(ctx, scfg, scheduler.Options{Invoker: scheduler.Agents(s.Agents), Auth: s.auth,
			Log: s.log, Metrics: s.Metrics, Logger: cfg.Logger, Version: cfg.Version}); err != nil {
			return nil, err
		}
	}
	// The audit API decides audit/read with the same policy engine as everything else, and logs
	// those decisions in the same log it serves.
	instance, _ := os.Hostname()
	auditor := enforce.New(enforce.Config{Point: audithttp.Point, Environment: gcfg.Environment, Instance: instance,
		Version: cfg.Version, Log: s.log, Metrics: s.Metrics, Logger: cfg.Logger})
	audit, err := audithttp.New(audithttp.Config{Log: s.log, Decider: auditor, Auth: s.auth, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	// The approvals API: the people with the approve role decide the calls that wait for them.
	approver := enforce.New(enforce.Config{Point: approvalhttp.Point, Environment: gcfg.Environment, Instance: instance,
		Version: cfg.Version, Log: s.log, Metrics: s.Metrics, Logger: cfg.Logger})
	approvals, err := approvalhttp.New(approvalhttp.Config{Store: s.approvals, Log: s.log, Decider: approver, Auth: s.auth, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	// The budgets API. Every enforcer of the process shares the log, and so one budget ledger
	// (budget.ForLog): calls decided anywhere in the process cannot overspend together, and a
	// top-up here is seen by all of them at once.
	budgeter := enforce.New(enforce.Config{Point: budgethttp.Point, Environment: gcfg.Environment, Instance: instance,
		Version: cfg.Version, Log: s.log, Metrics: s.Metrics, Logger: cfg.Logger})
	budgets, err := budgethttp.New(budgethttp.Config{Store: s.log, Decider: budgeter, Auth: s.auth, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	onDeploy := func(m *manifest.Manifest, hash string, eng *authz.Engine) {
		auditor.SetEngine(eng)
		approver.SetEngine(eng)
		budgeter.SetEngine(eng)
		s.Agents.Deploy(m, hash, eng)
		if s.Scheduler != nil {
			s.Scheduler.Deploy(m, hash, eng)
		}
	}
	if s.Gateway, err = gateway.New(gcfg, gateway.Options{ProjectDir: cfg.ProjectDir, Log: s.log, Auth: s.auth, Metrics: s.Metrics,
		Tracer: cfg.Tracer, Logger: cfg.Logger, Version: cfg.Version, Signer: signer, OnDeploy: onDeploy, Approvals: s.approvals}); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	gw := s.Gateway.Handler()
	mux.Handle("/gateway/", gw)
	mux.Handle("GET /health", gw)
	mux.Handle("GET /metrics", gw)
	mux.Handle("/agents", s.Agents.Handler())
	mux.Handle("/agents/", s.Agents.Handler())
	if s.Scheduler != nil {
		mux.Handle("/loops", s.Scheduler.Handler())
		mux.Handle("/loops/", s.Scheduler.Handler())
	}
	if cfg.Traces != nil {
		mux.Handle("/traces", s.authenticated(cfg.Traces))
		mux.Handle("/traces/", s.authenticated(cfg.Traces))
	}
	mux.Handle("/approvals", approvals.Handler())
	mux.Handle("/approvals/", approvals.Handler())
	mux.Handle("/budgets", budgets.Handler())
	mux.Handle("/budgets/", budgets.Handler())
	ah := audit.Handler()
	mux.Handle("/audit/", ah)
	mux.Handle("/ui", ah)
	mux.Handle("/ui/", ah)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { s.served <- s.srv.Serve(s.ln) }()
	if s.Scheduler != nil {
		s.Scheduler.Start()
	}
	return s, nil
}

// loopback is the address this process calls itself at: a wildcard listen address is reached
// on 127.0.0.1 (or ::1).
func loopback(a *net.TCPAddr) string {
	ip := a.IP
	switch {
	case ip == nil || ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(a.Port))
}

// authenticated lets only authenticated callers through.
func (s *Stack) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.auth.Authenticate(r); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lush"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// URL is the address the stack serves at (http://host:port).
func (s *Stack) URL() string { return "http://" + loopback(s.ln.Addr().(*net.TCPAddr)) }

// Addr is the listener's address.
func (s *Stack) Addr() string { return s.ln.Addr().String() }

// Log is the decision log.
func (s *Stack) Log() *decisionlog.Log { return s.log }

// Deploy deploys a build to the gateway and agentd.
func (s *Stack) Deploy(ctx context.Context, m *manifest.Manifest, hash string, bundle []byte) error {
	return s.Gateway.Deploy(ctx, m, hash, bundle)
}

// Served reports the HTTP server's end (an error other than http.ErrServerClosed is a failure).
func (s *Stack) Served() <-chan error { return s.served }

// Shutdown stops the scheduler (loop runs in flight finish until ctx ends; the rest are given
// back for the next start or another replica), stops accepting requests, waits for those in
// flight (until ctx ends), and closes the gateway's upstreams, agentd's streams and the decision
// log (which commits what it holds).
func (s *Stack) Shutdown(ctx context.Context) error {
	var errs []error
	if s.Scheduler != nil {
		// Loop runs call the gateway through this server: they stop first, with two thirds of
		// the grace, leaving the rest to the requests in flight.
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if deadline, ok := ctx.Deadline(); ok {
			sctx, cancel = context.WithDeadline(ctx, deadline.Add(-time.Until(deadline)/3))
		}
		errs = append(errs, s.Scheduler.Close(sctx))
		cancel()
		s.Scheduler = nil
	}
	errs = append(errs, s.srv.Shutdown(ctx))
	s.close()
	return errors.Join(errs...)
}

func (s *Stack) close() {
	if s.Scheduler != nil {
		s.Scheduler.Close(context.Background())
	}
	if s.srv == nil && s.ln != nil {
		s.ln.Close()
	}
	if s.Agents != nil {
		s.Agents.Close()
	}
	if s.Gateway != nil {
		s.Gateway.Close()
	}
	if s.auth != nil {
		s.auth.Close()
	}
	if s.approvals != nil {
		s.approvals.Close()
	}
	if s.log != nil {
		s.log.Close()
	}
}
