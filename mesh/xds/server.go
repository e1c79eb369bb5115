package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/lush-agents/lush/internal/manifest"
)

// allNodes gives every sidecar the same snapshot: each serves every route of the build, and
// ext_authz decides who may use what.
type allNodes struct{}

func (allNodes) ID(*corev3.Node) string { return "lush" }

// Server serves the deployed build's snapshot over xDS. Create it with New, give it builds with
// Deploy, and Serve it.
type Server struct {
	opts   Options
	log    *slog.Logger
	cache  cache.SnapshotCache
	health *health.Server

	mu      sync.Mutex
	version string
}

// New returns a server with no snapshot yet: sidecars that connect wait for the first Deploy.
func New(o Options, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	o = o.withDefaults()
	// The options alone must make valid resources: check them on an empty build now, rather
	// than at the first deploy.
	if _, err := Resources(&manifest.Manifest{}, o); err != nil {
		return nil, err
	}
	s := &Server{opts: o, log: logger, cache: cache.NewSnapshotCache(true, allNodes{}, nil), health: health.NewServer()}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	return s, nil
}

// Deploy makes m (hash) the configuration every sidecar gets; connected sidecars get it at once.
// A build whose configuration is not valid is refused, and the current one stays.
func (s *Server) Deploy(ctx context.Context, m *manifest.Manifest, hash string) error {
	snap, err := Snapshot(m, hash, s.opts)
	if err != nil {
		return fmt.Errorf("xds: build %s: %w", manifest.Short(hash), err)
	}
	if err := s.cache.SetSnapshot(ctx, allNodes{}.ID(nil), snap); err != nil {
		return fmt.Errorf("xds: set snapshot of build %s: %w", manifest.Short(hash), err)
	}
	s.mu.Lock()
	s.version = snap.GetVersion("type.googleapis.com/envoy.config.listener.v3.Listener")
	s.mu.Unlock()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.log.Info("xds: pushed a snapshot", "build", manifest.Short(hash), "version", s.Version(), "project", m.Project)
	return nil
}

// Version is the version of the snapshot served ("" before the first Deploy).
func (s *Server) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// stopGrace bounds how long Serve waits for streams when ctx ends: xDS streams never end on
// their own.
const stopGrace = 2 * time.Second

// Serve serves ADS and the listener, route and cluster discovery services (with gRPC health
// and reflection) on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	xds := serverv3.NewServer(ctx, s.cache, serverv3.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, id int64, typ string) error {
			s.log.Debug("xds: stream opened", "stream", id, "type", typ)
			return nil
		},
		StreamRequestFunc: func(id int64, r *discoverygrpc.DiscoveryRequest) error {
			if r.GetErrorDetail() != nil {
				s.log.Warn("xds: a sidecar rejected the configuration", "node", r.GetNode().GetId(), "type", r.GetTypeUrl(),
					"version", r.GetVersionInfo(), "error", r.GetErrorDetail().GetMessage())
			}
			return nil
		},
	})
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, xds)
	routeservice.RegisterRouteDiscoveryServiceServer(g, xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, xds)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)

	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("xds: serve: %w", err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		g.Stop()
		<-stopped
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("xds: serve: %w", err)
	}
	return nil
}
