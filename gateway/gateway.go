// Package gateway is Lush's MCP gateway: a policy enforcement point in front of every MCP server.
// Each agent of the deployed build has an endpoint (/agents/<name>/mcp, streamable HTTP; and
// /agents/<name>/sse for older clients) that offers exactly the tools of its allowlist the caller
// may use. Every call is decided by the one policy decision function and recorded in the decision
// log before it runs; writes are stubbed unless live writes are on for them; upstream servers are
// started, supervised and restarted by the gateway.
//
// A new build is swapped in atomically (Deploy): calls in flight finish under the policy they
// started with, and a build that does not load is refused while the last good one keeps serving.
package gateway

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/bundle"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/lush-agents/lush/gateway/builtin/shell"
	"github.com/lush-agents/lush/internal/a2acard"
	"github.com/lush-agents/lush/internal/bundlesource"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/internal/taskstore"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/mesh/extauthz"
	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
	"github.com/lush-agents/lush/vault"
	"github.com/lush-agents/lush/vault/oauth"
)

// extAuthzGrace bounds how long Close waits for Checks in flight.
const extAuthzGrace = 5 * time.Second

// Point is the gateway's name as an enforcement point in decision-log events.
const Point = "mcp-gateway"

// Options are what a Gateway is built from besides its Config.
type Options struct {
	ProjectDir string // where stdio servers and local tools run
	// Policy is the process's policy: the gateway deploys each build's engine to it, and decides
	// (and logs) every call with it.
	Policy  *enforce.Policy
	Auth    *identity.Authenticator
	Metrics *telemetry.Metrics   // optional
	Tracer  trace.TracerProvider // optional
	Logger  *slog.Logger         // optional
	// Signer signs the delegation tokens of lush:// calls (with Config.Agents.URL). When nil and
	// agents.delegation_key is set, the gateway loads that key.
	Signer *identity.Signer
	// Approvals is where calls that need a person's approval wait (OpenApprovals). Without it,
	// such calls are refused.
	Approvals *decisionlog.Approvals
	// OnDeploy, when set, is called after a build is deployed (its engine is then the Policy's):
	// agentd and the scheduler, in the same process, serve the same build.
	OnDeploy func(m *manifest.Manifest, hash string)
	// AuthFailures counts and logs failed authentications, here and at ext_authz (optional; one
	// per process).
	AuthFailures *identity.Failures
}

// Gateway serves the MCP endpoints of the deployed build. Create it with New, give it a build
// with Deploy, serve Handler, and Close it.
type Gateway struct {
	cfg            Config
	opts           Options
	log            *slog.Logger
	metrics        *telemetry.Metrics
	tracer         trace.Tracer
	tracing        bool // tracer records spans (it is not the no-op tracer)
	enforcer       *enforce.Enforcer
	gate           *policyhttp.Gate // authenticates the callers of the agents' endpoints
	pool           *upstream.Pool
	broker         *vault.Broker
	logins         logins // pending OAuth logins (oauthlogin.go)
	fpKey          []byte // keys credential fingerprints (vault.Credential.Fingerprint)
	transport      *mcphttp.Server
	verify         *bundle.VerificationConfig
	extAuthz       *extauthz.Server   // nil unless ext_authz is configured
	shell          *shell.Config      // builtin/shell
	notifier       *approval.Notifier // tells approvers of new approval requests; nil without approvals.notify
	approvals      *approval.Waiter   // where calls wait for approvals; nil without Options.Approvals
	workspace      string             // the project directory, absolute: where built-in tools work
	argLimits      jsonlimit.Limits   // bound the arguments of tools/call (Config.ArgumentLimits)
	approvalStates stateSigner        // signs in-band approvals' requestState (inband.go)

	state    atomic.Pointer[snapshot]
	problem  atomic.Pointer[Problem] // the last refused build or failed poll (/health)
	catMu    sync.Mutex
	catalogs map[string]*catalog // agent -> catalog, rebuilt when upstreams or the build change
	subs     subscriptions
	// exchanges hold the upstream calls of 2026-07-28 clients whose upstream asks them the old
	// way (exchange.go).
	exchanges *exchanges
	tasks     *taskstore.Store[taskRecord] // the tasks created through this replica (tasks.go)
	a2aCards  a2acard.Cache                // the Agent Cards of remote A2A agents (a2a.go)
}

// snapshot is one deployed build.
type snapshot struct {
	hash     string
	manifest *manifest.Manifest
	engine   *authz.Engine
	loaded   time.Time // when it was swapped in
}

// New creates a gateway with no build deployed yet (every call is denied until Deploy).
func New(cfg Config, opts Options) (*Gateway, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Policy == nil || opts.Policy.Log() == nil || opts.Auth == nil {
		return nil, errors.New("gateway: a policy with a decision log, and an authenticator, are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Signer == nil && cfg.Agents.DelegationKey != "" {
		key, err := identity.LoadPrivateKey(cfg.Agents.DelegationKey)
		if err != nil {
			return nil, fmt.Errorf("agents.delegation_key: %w", err)
		}
		opts.Signer = identity.NewSigner(key, cfg.Auth.DelegationAudience())
	}
	tp := opts.Tracer
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	_, isNoop := tp.(noop.TracerProvider)
	key, err := sessionKey(cfg.SessionKeyFile)
	if err != nil {
		return nil, err
	}
	sessions, err := mcphttp.NewSessions(key, cfg.Sessions.TTL, mcphttp.SessionOptions{MaxTerminated: cfg.Sessions.MaxTerminated})
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, opts: opts, log: opts.Logger, metrics: opts.Metrics, tracer: tp.Tracer("lush/gateway"), tracing: !isNoop, catalogs: map[string]*catalog{},
		argLimits: cfg.ArgumentLimits(), approvalStates: newStateSigner(key, "lush/in-band-approval-state/v1"), exchanges: newExchanges(key)}
	workspace := opts.ProjectDir
	if workspace != "" {
		if workspace, err = filepath.Abs(workspace); err != nil {
			return nil, fmt.Errorf("project directory: %w", err)
		}
	}
	g.workspace = workspace
	if g.shell, err = cfg.Builtins.Shell.runner(workspace, os.Getenv); err != nil {
		return nil, err
	}
	g.subs.init()
	g.tasks = newTaskStore()
	g.notifier = approval.NewNotifier(cfg.Approvals.Notify, opts.Logger, func(ok bool) {
		if opts.Metrics != nil {
			opts.Metrics.Approvals.WithLabelValues(map[bool]string{true: "notified", false: "notify_failed"}[ok]).Inc()
		}
	})
	g.enforcer = opts.Policy.Enforcer(Point)
	g.gate = &policyhttp.Gate{Auth: opts.Auth, Failures: opts.AuthFailures, WriteRefusal: writeRefusal}
	if opts.Approvals != nil {
		ac := cfg.Approvals.WithDefaults()
		g.approvals = &approval.Waiter{Store: opts.Approvals, Config: ac, MaxWait: ac.Wait, Requested: g.approvalRequested}
	}
	if cfg.Bundles.VerificationKey != "" {
		key, err := os.ReadFile(cfg.Bundles.VerificationKey)
		if err != nil {
			return nil, fmt.Errorf("bundles.verification_key: %w", err)
		}
		g.verify = bundle.NewVerificationConfig(map[string]*bundle.KeyConfig{cfg.Bundles.KeyID: {Key: string(key), Algorithm: cfg.Bundles.Algorithm}}, cfg.Bundles.KeyID, "", nil)
	}
	g.transport = mcphttp.NewServer(mcphttp.Config{
		Handler:      (*handler)(g),
		Sessions:     sessions,
		Endpoint:     func(r *http.Request) string { return r.PathValue("agent") },
		Principal:    func(r *http.Request) string { return identity.CallerFrom(r.Context()).ID },
		CheckOrigin:  mcphttp.HostCheck(cfg.AllowedHosts),
		MaxBodyBytes: cfg.MaxBodyBytes,
		Logger:       opts.Logger,
		// Bounds of what sessions hold on this replica (docs/memory.md); 0 is the default.
		MaxStreams:           cfg.Sessions.MaxStreams,
		MaxStreamsPerSession: cfg.Sessions.MaxStreamsPerSession,
		SessionEnded:         g.subs.drop,
		Stateless:            true, // 2026-07-28 clients: handler answers server/discover
		StreamAfter:          cmp.Or(cfg.Sessions.StreamAfter, DefaultStreamAfter),
		PollAfter:            cfg.Sessions.PollAfter,
	})
	creds := cfg.Credentials
	if creds.File == "" && opts.ProjectDir != "" {
		creds.File = filepath.Join(opts.ProjectDir, filepath.FromSlash(vault.LocalFile))
	}
	if g.broker, err = vault.New(creds, vault.WithLogger(opts.Logger)); err != nil {
		return nil, err
	}
	g.fpKey = make([]byte, 32)
	rand.Read(g.fpKey)
	g.pool = upstream.NewPool(upstream.Options{
		Dial:              upstream.DialOptions{Resolver: &upstream.Resolver{ProjectDir: opts.ProjectDir, NodePrefixes: cfg.Upstreams.NodePrefixes}},
		CallTimeout:       cfg.Upstreams.CallTimeout,
		HealthInterval:    cfg.Upstreams.HealthInterval,
		BackoffInitial:    cfg.Upstreams.BackoffInitial,
		BackoffMax:        cfg.Upstreams.BackoffMax,
		Logger:            opts.Logger,
		OnChange:          g.upstreamChanged,
		OnResourceUpdated: g.resourceUpdated,
		OnTaskStatus:      g.taskStatus,
		OnRestart: func(ref string) {
			if g.metrics != nil {
				g.metrics.UpstreamRestarts.WithLabelValues(ref).Inc()
			}
		},
	}, cfg.Upstreams.PrivateIdle)
	if cfg.ExtAuthz.Enabled() {
		if g.extAuthz, err = extauthz.New(cfg.ExtAuthz, extauthz.Options{Policy: opts.Policy, Auth: opts.Auth, AuthFailures: opts.AuthFailures, Broker: g.broker,
			LiveWrites: cfg.LiveWrites.Live, Metrics: opts.Metrics, Tracer: opts.Tracer, Logger: opts.Logger,
			Approvals: opts.Approvals, ApprovalConfig: cfg.Approvals, NotifyApproval: g.notifier.Notify,
			ArgumentLimits: g.argLimits}); err != nil {
			g.Close()
			return nil, err
		}
		if err := g.extAuthz.Start(); err != nil {
			g.Close()
			return nil, err
		}
	}
	return g, nil
}

// deriveKey derives a key for one purpose from the session key (HMAC-SHA256 of the purpose), so
// that what it signs cannot be passed off as a session id, nor the reverse.
func deriveKey(key []byte, purpose string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// sessionKey reads the key session ids are signed with; replicas must share it. Without a file,
// the key is random: sessions then only work with this process.
func sessionKey(file string) ([]byte, error) {
	if file == "" {
		key := make([]byte, 32)
		_, err := rand.Read(key)
		return key, err
	}
	info, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("session_key_file: %w", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("session_key_file %s is readable by others (mode %o): chmod 600 it", file, info.Mode().Perm())
	}
	key, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("session_key_file: %w", err)
	}
	key = []byte(strings.TrimSpace(string(key)))
	if len(key) < mcphttp.MinKeyBytes {
		return nil, fmt.Errorf("session_key_file %s holds %d bytes; use at least %d random bytes (e.g. openssl rand -base64 48)", file, len(key), mcphttp.MinKeyBytes)
	}
	return key, nil
}

// Deploy makes a build current: its bundle is loaded (and its signature verified when the
// gateway requires one) before anything changes, so a bad build is refused and the current one
// keeps serving. Upstream servers the new build names are started; those it no longer names are
// stopped. A refusal is counted (lush_bundle_refused_total{reason}), logged and shown by /health;
// its error is a *bundlesource.Refused.
func (g *Gateway) Deploy(ctx context.Context, m *manifest.Manifest, hash string, bundleData []byte) error {
	return g.deploy(ctx, m, hash, bundleData, "store")
}

// DeployBundle deploys a build from its bundle alone (the manifest travels inside it, see
// bundlesource.Unpack), as a replica does with what its bundle server serves; source names where
// the bundle came from (a URL) in the log and the decision log. Refusals are as Deploy's.
func (g *Gateway) DeployBundle(ctx context.Context, bundleData []byte, source string) error {
	m, hash, err := bundlesource.Unpack(bundleData)
	if err != nil {
		return g.refuse(ctx, hash, err)
	}
	if hash == g.Revision() {
		return nil // served already (a rollback to it, or a server that lost our ETag)
	}
	return g.deploy(ctx, m, hash, bundleData, source)
}

func (g *Gateway) deploy(ctx context.Context, m *manifest.Manifest, hash string, bundleData []byte, source string) error {
	opts := []authz.Option{}
	if t := g.cfg.Limits.DecisionTimeout; t > 0 {
		opts = append(opts, authz.Timeout(t))
	}
	if g.verify != nil {
		if err := bundlesource.Verify(bundleData, g.verify); err != nil {
			return g.refuse(ctx, hash, err)
		}
		opts = append(opts, authz.VerifyWith(g.verify.PublicKeys, g.verify.KeyID))
	}
	eng, err := authz.FromBytes(ctx, bundleData, opts...)
	if err == nil && eng.Revision() != hash {
		err = &bundlesource.Refused{Reason: bundlesource.ReasonManifestMismatch,
			Err: fmt.Errorf("the bundle's revision %s does not match build %s", manifest.Short(eng.Revision()), manifest.Short(hash))}
	}
	if err != nil {
		if bundlesource.RefusalReason(err) == "" {
			err = &bundlesource.Refused{Reason: bundlesource.ReasonCompile, Err: err}
		}
		return g.refuse(ctx, hash, err)
	}
	previous := g.Revision()
	g.problem.Store(nil) // /health's last_error: what went wrong since the build served was loaded
	g.pool.Sync(m.Tools, privateServers(m))
	g.state.Store(&snapshot{hash: hash, manifest: m, engine: eng, loaded: time.Now().UTC()})
	g.opts.Policy.Set(eng) // every enforcement point of the process decides with it from now on
	g.invalidate()
	if g.extAuthz != nil {
		g.extAuthz.Deploy(m, hash)
	}
	if g.opts.OnDeploy != nil {
		g.opts.OnDeploy(m, hash)
	}
	if g.metrics != nil {
		g.metrics.Reloads.WithLabelValues("ok").Inc()
		g.metrics.SetRevision(hash)
		var declared []telemetry.DeclaredTool
		for _, a := range m.Agents {
			for _, t := range a.Tools {
				declared = append(declared, telemetry.DeclaredTool{Agent: a.Name, Tool: t.Ref, Access: t.Access})
			}
		}
		g.metrics.SetDeclaredTools(declared)
	}
	cache := "on"
	if _, _, on, why := eng.CacheStats(); !on {
		cache = "off: " + why
	}
	g.log.Info("deployed build", "revision", manifest.Short(hash), "project", m.Project, "agents", len(m.Agents),
		"decision_cache", cache)
	if previous != "" && previous != hash {
		g.log.Info("build switched", "from", manifest.Short(previous), "to", manifest.Short(hash), "source", source)
		if err := g.opts.Policy.RecordSwitch(ctx, previous, hash, source); err != nil {
			g.log.Warn("the build switch is not in the decision log", "error", err)
		}
	}
	return nil
}

// Problem is the last thing that went wrong getting a build since the build served was loaded
// (/health's last_error): a refused build, or a bundle server that could not be polled.
type Problem struct {
	At     time.Time `json:"at"`
	Build  string    `json:"build,omitempty"` // the refused build's hash, when known
	Reason string    `json:"reason"`          // a bundlesource Reason, or "download"
	Error  string    `json:"error"`
}

// refuse records a refused build and returns err.
func (g *Gateway) refuse(ctx context.Context, hash string, err error) error {
	reason := bundlesource.RefusalReason(err)
	if reason == "" {
		reason = bundlesource.ReasonUnreadable
	}
	if g.metrics != nil {
		g.metrics.Reloads.WithLabelValues("rejected").Inc()
		g.metrics.BundleRefused.WithLabelValues(reason).Inc()
	}
	g.problem.Store(&Problem{At: time.Now().UTC(), Build: hash, Reason: reason, Error: err.Error()})
	g.log.ErrorContext(ctx, "refused a build; the last good one keeps serving", "build", manifest.Short(hash), "reason", reason,
		"serving", manifest.Short(g.Revision()), "error", err)
	if hash != "" {
		return fmt.Errorf("deploy build %s: %w", manifest.Short(hash), err)
	}
	return fmt.Errorf("deploy bundle: %w", err)
}

// SourceFailed records that the bundle server could not be polled (the last good build keeps
// serving): counted, logged, and shown by /health.
func (g *Gateway) SourceFailed(ctx context.Context, source string, err error) {
	if reason := bundlesource.RefusalReason(err); reason != "" {
		g.refuse(ctx, "", err)
		return
	}
	if g.metrics != nil {
		g.metrics.BundleFailures.Inc()
	}
	g.problem.Store(&Problem{At: time.Now().UTC(), Reason: "download", Error: err.Error()})
	g.log.WarnContext(ctx, "could not poll the bundle server; the last good build keeps serving", "source", source,
		"serving", manifest.Short(g.Revision()), "error", err)
}

// LastProblem returns the last refusal or download failure (nil when there was none).
func (g *Gateway) LastProblem() *Problem { return g.problem.Load() }

// Manifest returns the deployed build's manifest (nil before the first deploy).
func (g *Gateway) Manifest() *manifest.Manifest {
	if s := g.state.Load(); s != nil {
		return s.manifest
	}
	return nil
}

// Revision returns the deployed build's hash ("" before the first deploy).
func (g *Gateway) Revision() string {
	if s := g.state.Load(); s != nil {
		return s.hash
	}
	return ""
}

// WaitUpstreams waits until every MCP server of the deployed build is up, or ctx ends.
func (g *Gateway) WaitUpstreams(ctx context.Context) error {
	return g.eachUpstream(func(s *upstream.Server) error { return s.WaitUp(ctx) })
}

// WaitSettled waits until every MCP server of the deployed build has finished its first
// connection attempt (up, or failed and retrying), or ctx ends: from then on, tools/list shows
// what the gateway can offer.
func (g *Gateway) WaitSettled(ctx context.Context) error {
	return g.eachUpstream(func(s *upstream.Server) error { return s.WaitSettled(ctx) })
}

func (g *Gateway) eachUpstream(f func(*upstream.Server) error) error {
	s := g.state.Load()
	if s == nil {
		return errors.New("no build deployed")
	}
	for _, t := range s.manifest.Tools {
		if srv, ok := g.pool.Get(t.Ref); ok {
			if err := f(srv); err != nil {
				return err
			}
		}
	}
	return nil
}

// Upstreams reports each MCP server's state.
func (g *Gateway) Upstreams() map[string]upstream.State { return g.pool.States() }

// ExtAuthz is the ext_authz server (nil unless the config's ext_authz section enables it).
func (g *Gateway) ExtAuthz() *extauthz.Server { return g.extAuthz }

// EndStreams ends the MCP streams of the agents' endpoints for a graceful stop: those that carry
// only notifications at once, legacy SSE streams once the requests posted for them are answered
// (until ctx ends: then they are cancelled). New streams are refused. The HTTP server waits for
// the other requests in flight.
func (g *Gateway) EndStreams(ctx context.Context) error { return g.transport.Shutdown(ctx) }

// Close stops the ext_authz server, the upstream servers and the transport's streams.
func (g *Gateway) Close() {
	if g.extAuthz != nil {
		ctx, cancel := context.WithTimeout(context.Background(), extAuthzGrace)
		g.extAuthz.Stop(ctx)
		cancel()
	}
	g.transport.Close()
	g.exchanges.Close()
	g.pool.Close()
	g.broker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), notifyGrace)
	g.notifier.Close(ctx)
	cancel()
}

// notifyGrace is how long Close lets queued approval notifications be sent.
const notifyGrace = 2 * time.Second

// Credentials describes where upstream credentials come from.
func (g *Gateway) Credentials() string { return g.broker.Sources() }

// Handler serves the gateway's HTTP API: the agents' MCP endpoints, /health and /metrics.
//
// Each agent's tools are served at /gateway/agents/<name>/mcp (and /sse, /message). A gateway
// alone also answers at /agents/<name>/...; where agentd runs in the same process, that path is
// agentd's (the agent itself as an MCP server), and only the /gateway/ paths reach the gateway.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, prefix := range []string{"/gateway/agents/{agent}", "/agents/{agent}"} {
		mux.Handle(prefix+"/mcp", g.agentEndpoint(g.transport))
		mux.Handle(prefix+"/sse", g.agentEndpoint(http.HandlerFunc(g.transport.LegacySSE)))
		mux.Handle(prefix+"/message", g.agentEndpoint(http.HandlerFunc(g.transport.LegacyMessages)))
	}
	mux.Handle("GET "+oauth.LoginPath, g.gate.Authenticated(http.HandlerFunc(g.oauthLogin)))
	mux.HandleFunc("GET "+oauth.CallbackPath, g.oauthCallback)
	mux.HandleFunc("GET /health", g.health)
	if g.metrics != nil {
		mux.Handle("GET /metrics", g.metrics.Handler())
	}
	return mux
}

// agentEndpoint authenticates the caller (the process's one gate: a delegation token must be for
// the route's agent), checks the agent exists in the deployed build, and carries the incoming
// W3C trace context.
func (g *Gateway) agentEndpoint(next http.Handler) http.Handler {
	return g.gate.Authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agent := r.PathValue("agent")
		s := g.state.Load()
		if s == nil {
			writeError(w, http.StatusServiceUnavailable, "no build is deployed yet")
			return
		}
		if _, ok := s.manifest.Agent(agent); !ok {
			var names []string
			for _, a := range s.manifest.Agents {
				names = append(names, a.Name)
			}
			writeError(w, http.StatusNotFound, fmt.Sprintf("no agent %q in build %s; agents: %s", agent, manifest.Short(s.hash), strings.Join(names, ", ")))
			return
		}
		next.ServeHTTP(w, r)
	}))
}

// writeRefusal answers a request the gate refused as MCP clients show it: a JSON-RPC error with
// the authentication error's own text (code and message) or the policy's explanation.
func writeRefusal(w http.ResponseWriter, r policyhttp.Refusal) {
	msg := r.Message
	if r.Err != nil {
		msg = r.Err.Error()
	}
	writeError(w, r.Status, msg)
}

func (g *Gateway) health(w http.ResponseWriter, _ *http.Request) {
	s := g.state.Load()
	status := struct {
		Status    string                 `json:"status"`
		Ready     bool                   `json:"ready"`
		Revision  string                 `json:"revision,omitempty"`
		Loaded    *time.Time             `json:"loaded_at,omitempty"`
		LastError *Problem               `json:"last_error,omitempty"`
		Upstreams map[string]upstreamDoc `json:"upstreams"`
	}{Status: "ok", Ready: true, Upstreams: map[string]upstreamDoc{}, LastError: g.problem.Load()}
	code := http.StatusOK
	if s == nil {
		status.Status, status.Ready, code = "no build deployed", false, http.StatusServiceUnavailable
		if p := status.LastError; p != nil {
			status.Status = "no build deployed: " + p.Reason + ": " + p.Error
		}
	} else {
		status.Revision, status.Loaded = s.hash, &s.loaded
	}
	for ref, st := range g.pool.States() {
		status.Upstreams[ref] = upstreamDoc{Up: st.Up, Restarts: st.Restarts, Error: st.LastError, Protocol: st.Protocol}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(status)
}

type upstreamDoc struct {
	Up       bool   `json:"up"`
	Restarts int    `json:"restarts"`
	Error    string `json:"error,omitempty"`
	Protocol string `json:"protocol,omitempty"` // the MCP version spoken with it
}

// writeError answers with a JSON-RPC error body, which MCP clients show.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": mcphttp.CodeInvalidRequest, "message": msg}})
}

// catalog returns an agent's catalog in the current build.
func (g *Gateway) catalog(s *snapshot, agent string) *catalog {
	g.catMu.Lock()
	defer g.catMu.Unlock()
	key := s.hash + "\x00" + agent
	if c, ok := g.catalogs[key]; ok {
		return c
	}
	a, _ := s.manifest.Agent(agent)
	c := buildCatalog(a, s.manifest, g.pool)
	g.catalogs[key] = c
	return c
}

// invalidate drops cached catalogs (a build was deployed, or an upstream's lists changed).
func (g *Gateway) invalidate() {
	g.catMu.Lock()
	g.catalogs = map[string]*catalog{}
	g.catMu.Unlock()
}

// upstreamChanged runs when a server comes up, goes down or changes its lists: catalogs are
// rebuilt and clients listening on this replica are told their lists changed.
func (g *Gateway) upstreamChanged(ref string) {
	g.invalidate()
	if g.metrics != nil {
		if srv, ok := g.pool.Get(ref); ok {
			up := 0.0
			if srv.State().Up {
				up = 1
			}
			g.metrics.UpstreamUp.WithLabelValues(ref).Set(up)
		}
	}
	s := g.state.Load()
	if s == nil {
		return
	}
	for _, a := range s.manifest.Agents {
		if slices.ContainsFunc(a.Tools, func(t manifest.AllowedTool) bool { return t.Ref == ref }) {
			g.transport.Broadcast(a.Name, "notifications/tools/list_changed", nil)
			g.transport.Broadcast(a.Name, "notifications/prompts/list_changed", nil)
			g.transport.Broadcast(a.Name, "notifications/resources/list_changed", nil)
		}
	}
}
