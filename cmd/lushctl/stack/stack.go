// Package stack is Lush's composition root: it builds one server process from its parts and
// wires them together. Every lushctl command that serves (gateway, run, serve, chat) builds its
// process here. The parts of a process share one decision log, one authenticator and one policy
// (enforce.Policy): a build deployed to the gateway is the policy of every enforcement point of
// the process at once. They also share one report of failed authentications
// (identity.Failures), so that its log lines are limited across every API of the process.
//
// Parts: the MCP gateway with its approvals and budgets APIs (always); agentd (Config.Agents)
// and the scheduler that fires loops through it (Config.Scheduler); the audit API and web UI
// (Config.Audit); the trace API (Config.Traces).
//
// Routes of a gateway alone:
//
//	/agents/<name>/mcp           the gateway: the tools of agent <name> (also /sse, /message)
//
// and with agentd:
//
//	/gateway/agents/<name>/mcp   the gateway: the tools of agent <name> (also /sse, /message)
//	/agents/<name>/...           agentd: chat, chat/stream, mcp (the agent as a tool), status
//	/agents                      agentd: the agents the caller may invoke
//	/loops, /loops/<name>/...    the scheduler: loops, their history, manual triggers
//
// and in both:
//
//	/approvals[/<id>]            calls waiting for a person's approval: list, approve, deny (approvalhttp)
//	/budgets, /budgets/<n>/top-up  budget usage and top-ups, for the budget role (budgethttp)
//	/audit/decisions[/<id>]      the decision log, for principals with the audit role (audithttp)
//	/audit/builds/..., /audit/replay, /audit/eval  the project's kept builds: graph, access
//	                             review, replay, policy playground (audithttp, the audit role)
//	/ui/                         the read-only web UI of the decision log (static; /ui redirects)
//	/traces, /traces/<id>        the trace store, when one is given (lushctl run)
//	/health, /metrics            health and Prometheus metrics
//	/.well-known/oauth-protected-resource[/<endpoint>]  RFC 9728 metadata of the server and of
//	                             each agent's MCP endpoints, with auth.oauth (policyhttp)
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
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lush-agents/lush/agentd"
	a2aserver "github.com/lush-agents/lush/agentd/a2a"
	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/audit/audithttp"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/gateway/approvalhttp"
	"github.com/lush-agents/lush/gateway/budgethttp"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/internal/tracestore"
	"github.com/lush-agents/lush/policies/budget"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
	"github.com/lush-agents/lush/scheduler"
)

// Config is what a Stack is made of. The gateway is always part of it; the other parts are
// optional.
type Config struct {
	ProjectDir string         // where stdio servers and local tools run
	Gateway    gateway.Config // listen address, auth, decision log, live writes, upstreams, ...
	// Agents, when set, runs agentd in the process (turn limit and timeout; the gateway URL is
	// set by the stack), on Model.
	Agents *agentd.Config
	Model  model.Model
	// Scheduler, when set (with Agents), fires the build's loops (its store: SQLite, or
	// PostgreSQL for replicas). Nil: loops do not fire in this process.
	Scheduler *scheduler.Config
	// Audit serves the decision log to auditors: the audit API and its web UI.
	Audit bool
	// DelegationKey signs the tokens agents and lush:// calls carry. Nil: a key is generated for
	// this process (replicas that call each other need a shared one). Used with Agents only.
	DelegationKey ed25519.PrivateKey
	Tracer        trace.TracerProvider // optional
	Traces        http.Handler         // optional: served at /traces (authenticated)
	// TraceStore is the store behind Traces (optional): the audit API serves its traces as
	// audit/read decisions (GET /audit/traces/{id}, the console's trace page).
	TraceStore tracestore.Store
	// Builds is the build store (optional): the audit API describes the rules of a decision's
	// build from it.
	Builds   *buildstore.Store
	Logger   *slog.Logger // optional
	Version  string
	Instance string // this replica's name in decision-log events (default: host name)
}

// ConfigError is an error in what the stack was configured with (as opposed to one of running
// it: a port that cannot be listened on, a decision log that cannot be opened).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Stack is a running server process.
type Stack struct {
	Gateway   *gateway.Gateway
	Agents    *agentd.Server       // nil without Config.Agents
	A2A       *a2aserver.Server    // the agents as A2A servers; nil without Config.Agents
	Scheduler *scheduler.Scheduler // nil without Config.Scheduler
	Metrics   *telemetry.Metrics
	Policy    *enforce.Policy // the policy every part decides with

	ln        net.Listener
	srv       *http.Server
	log       *decisionlog.Log
	approvals *decisionlog.Approvals
	auth      *identity.Authenticator
	failures  *identity.Failures // failed authentications, at every gate of the process
	served    chan error
	deployedM atomic.Pointer[manifest.Manifest] // the build deployed last, for the protected resource metadata
}

// Start opens the decision log, listens, builds the parts, and serves. No build is deployed
// yet: Deploy (or the gateway's Follow) gives it one; until then every call is denied.
func Start(ctx context.Context, cfg Config) (st *Stack, err error) {
	if cfg.Agents != nil && cfg.Model == nil {
		return nil, &ConfigError{errors.New("stack: agents need a model provider")}
	}
	if cfg.Scheduler != nil && cfg.Agents == nil {
		return nil, &ConfigError{errors.New("stack: the scheduler runs loops through agentd: it needs agents")}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	gcfg := cfg.Gateway.WithDefaults()
	s := &Stack{Metrics: telemetry.NewMetrics(), served: make(chan error, 1)}
	s.failures = identity.NewFailures(s.Metrics, cfg.Logger)
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	var signer *identity.Signer
	if cfg.Agents != nil {
		if signer, err = delegation(&gcfg, cfg.DelegationKey); err != nil {
			return nil, err
		}
	}
	if s.ln, err = net.Listen("tcp", gcfg.Listen); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", gcfg.Listen, err)
	}
	self := "http://" + loopback(s.ln.Addr().(*net.TCPAddr))
	if gcfg.Auth.ResourceURL == "" {
		gcfg.Auth.ResourceURL = self // the protected resources' identifiers, when clients reach the server at its listen address
	}
	if err := s.open(ctx, cfg, gcfg); err != nil {
		return nil, err
	}
	if signer != nil {
		// A delegated call keeps its caller's OAuth token for token exchange (identity.SubjectTokens).
		subjects := identity.NewSubjectTokens()
		signer.KeepSubjectTokens(subjects)
		s.auth.KeepSubjectTokens(subjects)
	}
	if cfg.Agents != nil && gcfg.Agents.URL == "" {
		gcfg.Agents.URL = self // lush:// calls go to agentd in this process
	}
	if s.Gateway, err = gateway.New(gcfg, gateway.Options{ProjectDir: cfg.ProjectDir, Policy: s.Policy, Auth: s.auth, AuthFailures: s.failures, Metrics: s.Metrics,
		Tracer: cfg.Tracer, Logger: cfg.Logger, Signer: signer, OnDeploy: s.deployed, Approvals: s.approvals}); err != nil {
		return nil, &ConfigError{err}
	}
	if cfg.Agents != nil {
		acfg := *cfg.Agents
		acfg.GatewayURL, acfg.AllowedHosts, acfg.ArgumentLimits = self, gcfg.AllowedHosts, gcfg.ArgumentLimits()
		if s.Agents, err = agentd.New(acfg, agentd.Options{Model: cfg.Model, Signer: signer, Auth: s.auth, AuthFailures: s.failures, Policy: s.Policy,
			Metrics: s.Metrics, Tracer: cfg.Tracer, Logger: cfg.Logger, Version: cfg.Version}); err != nil {
			return nil, &ConfigError{err}
		}
		// The same agents over A2A, behind the same authentication, run by the same runner. The
		// cards publish how to authenticate: bearer, API keys, and each OAuth authorization server.
		card := a2aserver.CardOptions{BaseURL: gcfg.Auth.ResourceURL, APIKeys: len(gcfg.Auth.APIKeys) > 0}
		for _, o := range gcfg.Auth.OAuth {
			card.OAuth = append(card.OAuth, a2aserver.OAuthServer{Issuer: o.Issuer, Scopes: o.Scopes})
		}
		if s.A2A, err = a2aserver.New(s.Agents, &policyhttp.Gate{Auth: s.auth, Failures: s.failures}, card); err != nil {
			return nil, &ConfigError{err}
		}
	}
	if cfg.Scheduler != nil {
		if s.Scheduler, err = scheduler.New(ctx, *cfg.Scheduler, scheduler.Options{Invoker: scheduler.Agents(s.Agents), Auth: s.auth, AuthFailures: s.failures,
			Policy: s.Policy, Metrics: s.Metrics, Logger: cfg.Logger}); err != nil {
			return nil, err
		}
	}
	mux, err := s.routes(cfg)
	if err != nil {
		return nil, err
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { s.served <- s.srv.Serve(s.ln) }()
	if s.Scheduler != nil {
		s.Scheduler.Start()
	}
	return s, nil
}

// open opens what the parts share: the decision log and the approvals store beside it, the
// authenticator, and the policy.
func (s *Stack) open(ctx context.Context, cfg Config, gcfg gateway.Config) (err error) {
	if s.log, err = gateway.OpenDecisionLog(ctx, gcfg, filepath.Join(cfg.ProjectDir, ".lush")); err != nil {
		return err
	}
	if s.approvals, err = gateway.OpenApprovals(gcfg); err != nil {
		return err
	}
	if s.auth, err = identity.New(ctx, gcfg.Auth); err != nil {
		return &ConfigError{err}
	}
	for _, p := range s.auth.OAuthProblems() {
		cfg.Logger.WarnContext(ctx, "authorization server unreachable", "error", p)
	}
	// One budget ledger for the process: calls decided at any of its enforcement points cannot
	// overspend together, and a top-up through the budgets API is seen by all of them at once.
	s.Policy = enforce.NewPolicy(enforce.Config{Environment: gcfg.Environment, Instance: cfg.Instance, Version: cfg.Version,
		Log: s.log, Metrics: s.Metrics, Logger: cfg.Logger, Budgets: budget.New(s.log)})
	return nil
}

// delegation returns the signer of the delegation tokens agents and lush:// calls carry, with key
// (a new one when nil), and makes gcfg accept the tokens this process signs, besides what it
// accepts already.
func delegation(gcfg *gateway.Config, key ed25519.PrivateKey) (*identity.Signer, error) {
	if key == nil {
		var err error
		if _, key, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return nil, fmt.Errorf("generate a delegation key: %w", err)
		}
	}
	deleg := identity.DelegationConfig{}
	if gcfg.Auth.Delegation != nil {
		deleg = *gcfg.Auth.Delegation
	}
	deleg.Keys = append(deleg.Keys, key.Public().(ed25519.PublicKey))
	gcfg.Auth.Delegation = &deleg
	return identity.NewSigner(key, gcfg.Auth.DelegationAudience()), nil
}

// deployed tells the parts that serve a build's agents and loops of a build the gateway
// deployed; its policy engine is already the Policy's.
func (s *Stack) deployed(m *manifest.Manifest, hash string) {
	s.deployedM.Store(m)
	if s.Agents != nil {
		s.Agents.Deploy(m, hash)
	}
	if s.Scheduler != nil {
		s.Scheduler.Deploy(m, hash)
	}
}

// routes mounts every part's handler on one mux. The APIs decide their requests with the
// stack's policy, each as an enforcement point of its own.
func (s *Stack) routes(cfg Config) (*http.ServeMux, error) {
	mux := http.NewServeMux()
	gw := s.Gateway.Handler()
	if s.Agents == nil {
		mux.Handle("/", gw) // a gateway alone serves the agents' tools at /agents/<name>/mcp
	} else {
		mux.Handle("/gateway/", gw)
		mux.Handle("GET /health", gw)
		mux.Handle("GET /metrics", gw)
		mux.Handle("/agents", s.Agents.Handler())
		mux.Handle("/agents/", s.Agents.Handler())
		a2a := s.A2A.Handler()
		mux.Handle("/agents/{agent}/a2a", a2a)
		mux.Handle("/agents/{agent}/a2a/", a2a)
		mux.Handle("/agents/{agent}/.well-known/", a2a)
	}
	if s.Scheduler != nil {
		mux.Handle("/loops", s.Scheduler.Handler())
		mux.Handle("/loops/", s.Scheduler.Handler())
	}
	if cfg.Traces != nil {
		traces := (&policyhttp.Gate{Auth: s.auth, Failures: s.failures}).Authenticated(cfg.Traces)
		mux.Handle("/traces", traces)
		mux.Handle("/traces/", traces)
	}
	// The people with the approve role decide here the calls that wait for them.
	approvals, err := approvalhttp.New(approvalhttp.Config{Store: s.approvals, Log: s.log, Decider: s.Policy.Enforcer(approvalhttp.Point),
		Auth: s.auth, AuthFailures: s.failures, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	mux.Handle("/approvals", approvals.Handler())
	mux.Handle("/approvals/", approvals.Handler())
	// Budget usage and top-ups.
	budgets, err := budgethttp.New(budgethttp.Config{Store: s.log, Decider: s.Policy.Enforcer(budgethttp.Point), Auth: s.auth,
		AuthFailures: s.failures, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	mux.Handle("/budgets", budgets.Handler())
	mux.Handle("/budgets/", budgets.Handler())
	// RFC 9728 metadata of the server and of each agent's MCP endpoints (the gateway's and
	// agentd's), for OAuth clients (auth.oauth).
	metadata := (&policyhttp.Gate{Auth: s.auth}).ResourceMetadata(s.servesResource)
	mux.Handle("GET "+identity.MetadataPath, metadata)
	mux.Handle("GET "+identity.MetadataPath+"/", metadata)
	if cfg.Audit {
		// The audit API logs its own decisions in the log it serves. The console's build pages
		// (graph, access review, replay, playground) read the project's kept builds.
		builds := cfg.Builds
		if builds == nil && cfg.ProjectDir != "" {
			builds = buildstore.ForProject(cfg.ProjectDir)
		}
		audit, err := audithttp.New(audithttp.Config{Log: s.log, Decider: s.Policy.Enforcer(audithttp.Point), Auth: s.auth,
			AuthFailures: s.failures, Logger: cfg.Logger, Builds: builds, Traces: cfg.TraceStore})
		if err != nil {
			return nil, err
		}
		ah := audit.Handler()
		mux.Handle("/audit/", ah)
		mux.Handle("/ui", ah)
		mux.Handle("/ui/", ah)
	}
	return mux, nil
}

// servesResource reports whether the process serves the protected resource at path
// (identity.ResourcePath): the server itself, or the MCP endpoint of an agent of the deployed
// build.
func (s *Stack) servesResource(path string) bool {
	if path == "" {
		return true
	}
	agent, _, ok := identity.ResourceAgent(path)
	if !ok {
		return false
	}
	m := s.deployedM.Load()
	if m == nil {
		return false
	}
	_, found := m.Agent(agent)
	return found
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

// URL is the address the stack serves at (http://host:port).
func (s *Stack) URL() string { return "http://" + loopback(s.ln.Addr().(*net.TCPAddr)) }

// Addr is the listener's address.
func (s *Stack) Addr() string { return s.ln.Addr().String() }

// Log is the decision log.
func (s *Stack) Log() *decisionlog.Log { return s.log }

// Deploy deploys a build to the gateway, and so to every part of the stack.
func (s *Stack) Deploy(ctx context.Context, m *manifest.Manifest, hash string, bundle []byte) error {
	return s.Gateway.Deploy(ctx, m, hash, bundle)
}

// Served reports the HTTP server's end (an error other than http.ErrServerClosed is a failure).
func (s *Stack) Served() <-chan error { return s.served }

// Shutdown stops the scheduler (loop runs in flight finish until ctx ends; the rest are given
// back for the next start or another replica), stops accepting requests, ends the MCP streams
// (those that carry only the server's notifications at once), waits for the requests in flight
// (until ctx ends), and closes the gateway's upstreams, agentd's streams and the decision log
// (which commits what it holds). It returns ctx's error when requests were still running when
// ctx ended; they are cut off.
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
	// http.Server.Shutdown waits for every request to finish, and a stream never finishes by
	// itself: the streams end beside it.
	var streams sync.WaitGroup
	streamErrs := make([]error, 2)
	streams.Go(func() { streamErrs[0] = s.Gateway.EndStreams(ctx) })
	if s.Agents != nil {
		streams.Go(func() { streamErrs[1] = s.Agents.EndStreams(ctx) })
	}
	if err := s.srv.Shutdown(ctx); err != nil {
		errs = append(errs, err)
		s.srv.Close() // cut off what still runs
	}
	streams.Wait()
	errs = append(errs, streamErrs...)
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
