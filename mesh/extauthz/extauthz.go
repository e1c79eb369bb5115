// Package extauthz is Lush as Envoy's external authorization service: a gRPC server of
// envoy.service.auth.v3.Authorization that decides each request an Envoy sidecar holds, with the
// same policy, the same decision function and the same decision-log event as the MCP gateway.
//
// A request is read by the route it takes (mesh.Table; the xDS server puts the route's meaning in
// the ext_authz context extensions): an MCP message to a remote MCP server is decided as the
// gateway decides it (tools/call with its tool and arguments, tools/list, resources, prompts; the
// session's own messages as tools/list of the server), and a call of an agent's endpoints as
// agent/invoke. An MCP 2026 request is read from its body cross-checked with its Mcp-Method and
// Mcp-Name headers, or, on a route whose calls need nothing from the body (mesh.Route.Body), from
// those headers alone (request.go). The caller is the identity Envoy verified (jwt_authn metadata, the peer
// certificate's SPIFFE id) or what Lush's authenticator accepts (bearer tokens, API keys, a
// trusted proxy's header).
//
// Answers: allowed requests continue with the decision id and the upstream's credential (from
// the credentials broker) added; denied ones get a JSON-RPC error with 401 (identity), 403
// (policy) or 503 (the policy could not be evaluated, or Lush is overloaded: admit.go); stubbed writes are answered at the sidecar
// with a JSON-RPC success that marks the stub, so the upstream never sees them.
package extauthz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/mesh"
	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/vault"
)

// Point is the ext_authz server's name as an enforcement point in decision-log events.
const Point = "ext_authz"

// Config is the `ext_authz:` section of the gateway config (docs/mesh.md).
type Config struct {
	Listen   string               `yaml:"listen"` // TCP address, e.g. 127.0.0.1:9191
	Socket   string               `yaml:"socket"` // Unix socket path
	TLS      *TLSConfig           `yaml:"tls"`    // mTLS: required to listen beyond loopback
	Identity identity.EnvoyConfig `yaml:"identity"`
}

// TLSConfig is the server's mTLS: only clients with a certificate from ClientCAFile (the
// sidecars) may call Check.
type TLSConfig struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

// Enabled reports whether the server should run: a listen address or a socket is set.
func (c Config) Enabled() bool { return c.Listen != "" || c.Socket != "" }

// Validate names every bad field.
func (c Config) Validate() error {
	var errs []error
	if c.Listen != "" {
		host, _, err := net.SplitHostPort(c.Listen)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("ext_authz.listen: %q is not host:port (e.g. 127.0.0.1:9191)", c.Listen))
		case c.TLS == nil && !loopback(host):
			// An allowed Check's answer carries the caller's upstream credential: whoever can call
			// Check with a forged identity could collect credentials.
			errs = append(errs, fmt.Errorf("ext_authz.listen: %s is not a loopback address, and Check answers carry the callers' upstream credentials: "+
				"listen on loopback or a Unix socket (with the sidecar beside Lush), or set ext_authz.tls so that only the sidecars' certificates may call", c.Listen))
		}
	}
	if t := c.TLS; t != nil && (t.CertFile == "" || t.KeyFile == "" || t.ClientCAFile == "") {
		errs = append(errs, errors.New("ext_authz.tls: set cert_file, key_file and client_ca_file (the CA of the sidecars' client certificates)"))
	}
	if c.Socket != "" && !filepath.IsAbs(c.Socket) {
		errs = append(errs, fmt.Errorf("ext_authz.socket: %q must be an absolute path (e.g. /run/lush/ext_authz.sock)", c.Socket))
	}
	if err := c.Identity.Validate("ext_authz.identity"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// loopback reports whether host is a loopback address or localhost.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serverCredentials are the gRPC server's mTLS credentials.
func (t *TLSConfig) serverCredentials() (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("ext_authz.tls: load cert_file and key_file: %w", err)
	}
	pem, err := os.ReadFile(t.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("ext_authz.tls.client_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ext_authz.tls.client_ca_file: %s holds no PEM certificate", t.ClientCAFile)
	}
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}), nil
}

// Options are what a Server is built from besides its Config.
type Options struct {
	Policy     *enforce.Policy         // required: the process's policy, with its decision log
	Auth       *identity.Authenticator // required: bearer tokens, API keys, trusted proxy headers
	Broker     *vault.Broker           // optional: without it, no call carries a credential
	LiveWrites func(ref string) bool   // which write tools run for real; nil: none
	Metrics    *telemetry.Metrics      // optional
	Tracer     trace.TracerProvider    // optional: a span per Check, a child of the request's W3C trace context
	Logger     *slog.Logger            // optional
	// Approvals, when set, is where calls that need a person's approval ask for one: the sidecar
	// does not wait (Envoy's check would time out), it answers 403 with the pending approval's
	// id, and a repeat of the same call once approved runs. Without it such calls are refused.
	Approvals      *decisionlog.Approvals
	ApprovalConfig approval.Config // how long approvals stay open
	// NotifyApproval, when set, is told of each new approval request (approvals.notify).
	NotifyApproval func(decisionlog.Approval)
	// ArgumentLimits bound the arguments of a tools/call, checked before they are decoded; the
	// zero value is jsonlimit's defaults.
	ArgumentLimits jsonlimit.Limits
	// AuthFailures counts and logs the requests refused for their credentials (optional; one per
	// process).
	AuthFailures *identity.Failures
}

// Server answers Check. Create it with New, give it builds with Deploy, and serve it with Serve
// (or Start, for the listeners of the Config); Stop ends it.
type Server struct {
	authv3.UnimplementedAuthorizationServer

	cfg       Config
	opts      Options
	enforcer  *enforce.Enforcer
	approvals *approval.Waiter // nil without Options.Approvals
	tracer    trace.Tracer
	health    *health.Server
	grpc      *grpc.Server
	state     atomic.Pointer[build]
	admission *admission

	mu        sync.Mutex
	listeners []net.Listener
	serving   sync.WaitGroup
}

// build is one deployed build.
type build struct {
	hash     string
	manifest *manifest.Manifest
	routes   *mesh.Table
}

// New returns a server with no build: every Check is denied until Deploy.
func New(cfg Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Policy == nil || opts.Policy.Log() == nil || opts.Auth == nil {
		return nil, errors.New("ext_authz: a policy with a decision log, and an authenticator, are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.LiveWrites == nil {
		opts.LiveWrites = func(string) bool { return false }
	}
	tp := opts.Tracer
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	s := &Server{cfg: cfg, opts: opts, health: health.NewServer(), tracer: tp.Tracer("lush/ext_authz"), admission: newAdmission()}
	s.enforcer = opts.Policy.Enforcer(Point)
	if opts.Approvals != nil {
		s.approvals = &approval.Waiter{Store: opts.Approvals, Config: opts.ApprovalConfig.WithDefaults(),
			Requested: func(_ context.Context, ap decisionlog.Approval, joined bool) {
				if !joined && opts.NotifyApproval != nil {
					opts.NotifyApproval(ap)
				}
			}}
	}
	var gopts []grpc.ServerOption
	if cfg.TLS != nil {
		creds, err := cfg.TLS.serverCredentials()
		if err != nil {
			return nil, err
		}
		gopts = append(gopts, grpc.Creds(creds))
	}
	// Long-lived goroutines decide Checks, as many as the admission lets in (admit.go).
	gopts = append(gopts, grpc.NumStreamWorkers(uint32(streamWorkers())))
	s.grpc = grpc.NewServer(gopts...)
	authv3.RegisterAuthorizationServer(s.grpc, s)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	return s, nil
}

// Deploy makes m (hash) the build that Checks from now on route by; its policy engine is the
// one deployed to the server's Policy.
func (s *Server) Deploy(m *manifest.Manifest, hash string) {
	s.state.Store(&build{hash: hash, manifest: m, routes: mesh.Routes(m)})
	s.setHealth(healthpb.HealthCheckResponse_SERVING)
}

// setHealth sets the status of the whole server and of the Authorization service.
func (s *Server) setHealth(st healthpb.HealthCheckResponse_ServingStatus) {
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(authv3.Authorization_ServiceDesc.ServiceName, st)
}

// Start listens on the Config's address and socket and serves on both until Stop. A socket file
// left by a previous run is replaced.
func (s *Server) Start() error {
	var lns []net.Listener
	if s.cfg.Listen != "" {
		ln, err := net.Listen("tcp", s.cfg.Listen)
		if err != nil {
			return fmt.Errorf("ext_authz: listen on %s: %w", s.cfg.Listen, err)
		}
		lns = append(lns, ln)
	}
	if s.cfg.Socket != "" {
		if fi, err := os.Lstat(s.cfg.Socket); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(s.cfg.Socket)
		}
		ln, err := net.Listen("unix", s.cfg.Socket)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fmt.Errorf("ext_authz: listen on unix socket %s: %w", s.cfg.Socket, err)
		}
		lns = append(lns, ln)
	}
	for _, ln := range lns {
		s.Serve(ln)
	}
	return nil
}

// Serve serves Check on ln in the background, until Stop.
func (s *Server) Serve(ln net.Listener) {
	s.mu.Lock()
	s.listeners = append(s.listeners, ln)
	s.mu.Unlock()
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		if err := s.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.opts.Logger.Error("ext_authz: serve", "address", ln.Addr().String(), "error", err)
		}
	}()
}

// Addrs are the addresses served on.
func (s *Server) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]net.Addr, 0, len(s.listeners))
	for _, ln := range s.listeners {
		out = append(out, ln.Addr())
	}
	return out
}

// Stop stops serving: Checks in flight get until ctx ends to finish.
func (s *Server) Stop(ctx context.Context) {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
	s.serving.Wait()
	if s.cfg.Socket != "" {
		os.Remove(s.cfg.Socket)
	}
}
