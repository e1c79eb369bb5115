// Package agentd runs the agents of a deployed build. An invocation is decided first (action
// agent/invoke: the caller needs execute in the agent's ACL, and the call chain must not be too
// deep), then the agent's model runs a tool loop whose every tool call goes through the MCP
// gateway, as the caller, with a delegation token naming the agent and the chain of agents. agentd
// holds no route to an MCP server, a local tool or a credential: the gateway is its only way to
// act.
//
// Every agent is also an MCP server (/agents/<name>/mcp) with one tool, named after the agent,
// that invokes it; that is how lush://<name> tools reach it through the gateway. The HTTP API
// (Handler) adds the chat endpoints, status and the list of agents.
package agentd

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// Point is agentd's name as an enforcement point in decision-log events.
const Point = "agentd"

// Defaults.
const (
	DefaultMaxTurns = 12
	DefaultTimeout  = 5 * time.Minute
)

// Config tunes the agent loop.
type Config struct {
	// GatewayURL is the gateway's base URL; an agent's tools are at
	// <GatewayURL>/gateway/agents/<name>/mcp.
	GatewayURL string
	MaxTurns   int           // model turns per invocation (default 12)
	Timeout    time.Duration // wall-clock limit of one invocation (default 5m)
	// AllowedHosts are host names clients may use besides loopback ones (DNS-rebinding
	// protection of the agents' MCP endpoints), as the gateway's allowed_hosts.
	AllowedHosts []string
	// ArgumentLimits bound the arguments of a tools/call of an agent's MCP tool, checked before
	// they are decoded, as the gateway's limits.arguments (the zero value: jsonlimit's defaults).
	ArgumentLimits jsonlimit.Limits
}

// Options are what a Server is built from besides its Config.
type Options struct {
	Model      model.Model      // the provider every agent's model runs on
	Signer     *identity.Signer // signs the delegation tokens agents call the gateway with
	Auth       *identity.Authenticator
	Policy     *enforce.Policy      // the process's policy, with its decision log: decides agent/invoke
	Metrics    *telemetry.Metrics   // optional
	Tracer     trace.TracerProvider // optional
	Logger     *slog.Logger         // optional
	HTTPClient *http.Client         // for the gateway (default: a pooled client)
	Version    string
	// AuthFailures counts and logs failed authentications (optional; one per process).
	AuthFailures *identity.Failures
}

// Server runs agents. Create it with New, give it a build with Deploy, serve Handler.
type Server struct {
	cfg       Config
	opts      Options
	log       *slog.Logger
	tracer    trace.Tracer
	enforcer  *enforce.Enforcer
	transport *mcphttp.Server
	http      *http.Client

	state atomic.Pointer[snapshot]
	mu    sync.Mutex
	stats map[string]*agentStats // by agent
}

type snapshot struct {
	hash     string
	manifest *manifest.Manifest
}

// agentStats is what /agents/<name>/status reports about recent invocations.
type agentStats struct {
	Invocations int64        `json:"invocations"`
	Errors      int64        `json:"errors"`
	Last        *lastOutcome `json:"last,omitempty"`
}

type lastOutcome struct {
	ID     string    `json:"invocation_id"`
	At     time.Time `json:"at"`
	Status string    `json:"status"`
}

// New returns a server with no build deployed (every invocation is denied until Deploy).
func New(cfg Config, opts Options) (*Server, error) {
	switch {
	case opts.Model == nil:
		return nil, errors.New("agentd: a model provider is required")
	case opts.Signer == nil:
		return nil, errors.New("agentd: a delegation signer is required")
	case opts.Policy == nil || opts.Policy.Log() == nil || opts.Auth == nil:
		return nil, errors.New("agentd: a policy with a decision log, and an authenticator, are required")
	case cfg.GatewayURL == "":
		return nil, errors.New("agentd: the gateway's URL is required: agents reach tools only through it")
	}
	if cfg.MaxTurns <= 0 {
		cfg.MaxTurns = DefaultMaxTurns
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	tp := opts.Tracer
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	hc := opts.HTTPClient
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		hc = &http.Client{Transport: t}
	}
	key := make([]byte, 32)
	rand.Read(key)
	sessions, err := mcphttp.NewSessions(key, 0)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, opts: opts, log: opts.Logger, tracer: tp.Tracer("lush/agentd"), http: hc, stats: map[string]*agentStats{}}
	s.enforcer = opts.Policy.Enforcer(Point)
	s.transport = mcphttp.NewServer(mcphttp.Config{
		Handler:     (*mcpHandler)(s),
		Sessions:    sessions,
		Endpoint:    func(r *http.Request) string { return r.PathValue("agent") },
		Principal:   func(r *http.Request) string { return identity.CallerFrom(r.Context()).ID },
		CheckOrigin: mcphttp.HostCheck(cfg.AllowedHosts),
		Logger:      opts.Logger,
	})
	return s, nil
}

// Deploy makes a build current. Its policy engine is deployed to the server's Policy by whoever
// deployed the build (the gateway in the same process): one build, one policy, for every
// enforcement point.
func (s *Server) Deploy(m *manifest.Manifest, hash string) {
	s.state.Store(&snapshot{hash: hash, manifest: m})
}

// Deployed returns the current build's manifest and hash; ok is false before the first deploy.
// The manifest is shared: callers must not modify it.
func (s *Server) Deployed() (m *manifest.Manifest, hash string, ok bool) {
	st := s.state.Load()
	if st == nil {
		return nil, "", false
	}
	return st.manifest, st.hash, true
}

// EndStreams ends the MCP streams of the agents' endpoints for a graceful stop, as the gateway's
// EndStreams does. Chats in flight are requests the HTTP server waits for.
func (s *Server) EndStreams(ctx context.Context) error { return s.transport.Shutdown(ctx) }

// Close ends the MCP streams of the agents' endpoints.
func (s *Server) Close() { s.transport.Close() }

// record updates an agent's status counters.
func (s *Server) record(agent, id, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats[agent]
	if st == nil {
		st = &agentStats{}
		s.stats[agent] = st
	}
	st.Invocations++
	if status != decisionlog.StatusOK {
		st.Errors++
	}
	st.Last = &lastOutcome{ID: id, At: time.Now().UTC(), Status: status}
}

func (s *Server) statsOf(agent string) agentStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stats[agent]; st != nil {
		return *st
	}
	return agentStats{}
}
