package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/mesh/xds"
)

func newMeshCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mesh",
		Short: "Mesh mode: configure Envoy sidecars (xDS, bootstrap) and check ext_authz",
		Long: `Mesh mode puts Envoy sidecars in front of agent traffic, with Lush as their external
authorization service: a gateway process serves ext_authz when its config (or --ext-authz) says
where (docs/mesh.md). These commands configure the sidecars and debug the setup:

  lushctl mesh xds        serve the sidecars' listeners, routes and clusters over xDS
  lushctl mesh bootstrap  write the static Envoy bootstrap a sidecar starts from
  lushctl mesh check      send CheckRequests to an ext_authz server and show the answers`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newMeshXDSCmd(), newMeshBootstrapCmd(), newMeshCheckCmd())
	return cmd
}

type meshXDSFlags struct {
	listen, extAuthz, lush, sidecar, gatewayConfig, build, ready, logLevel string
	tlsCert, tlsKey, tlsCA                                                 string
	eaCert, eaKey, eaCA                                                    string
	timeout                                                                time.Duration
	print                                                                  bool
}

func newMeshXDSCmd() *cobra.Command {
	var f meshXDSFlags
	cmd := &cobra.Command{
		Use:   "xds [dir]",
		Short: "Serve Envoy sidecars the project's deployed build over xDS",
		Long: `Xds serves, over gRPC (ADS, and LDS/RDS/CDS; with health and reflection), the configuration of
an Envoy sidecar for the project's deployed build: one listener whose HTTP filters are jwt_authn
(with --gateway-config's JWT issuers), ext_authz (pointing at Lush, with the request body and the
peer certificate) and the router; a route per remote MCP server of each agent
(/agents/<agent>/tools/<server>/mcp), per agent (/agents/<name>/, agentd) and per agent's tools
inside Lush (/gateway/agents/<agent>/, where ext_authz is off: the gateway decides); a cluster
per upstream. Every resource passes its proto's ValidateAll.

It follows the deployed build (lushctl deploy) and pushes a new snapshot to every connected
sidecar on each deploy; --build serves one kept build. Every sidecar gets the same snapshot.
--print prints the resources as one JSON document and exits: {"listeners": [...], "routes": [...],
"clusters": [...]}, each resource as its proto's JSON.`,
		Example: `  # Sidecars fetch from :18000; Lush (ext_authz over mTLS, ext_authz.tls) on lush.internal
  lushctl mesh xds --listen 0.0.0.0:18000 --ext-authz lush.internal:9191 --lush lush.internal:8080 \
    --ext-authz-tls-cert /etc/envoy/client.pem --ext-authz-tls-key /etc/envoy/client.key \
    --ext-authz-tls-ca /etc/envoy/lush-ca.pem .

  # With the gateway config's JWT issuers verified by the sidecars, and mTLS with SPIFFE ids
  lushctl mesh xds --gateway-config gateway.yaml --tls-cert /etc/spire/svid.pem \
    --tls-key /etc/spire/svid.key --tls-ca /etc/spire/bundle.pem .

  # What the sidecars would get: the routes' paths
  lushctl mesh xds --print examples/mesh | jq -r '.routes[].virtual_hosts[].routes[].match'`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error { return runMeshXDS(cmd, projectDir(a), &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:18000", "address the xDS server listens on")
	fl.StringVar(&f.extAuthz, "ext-authz", "127.0.0.1:9191", "Lush's ext_authz server, as the sidecars reach it: host:port or unix:///path")
	fl.StringVar(&f.lush, "lush", "127.0.0.1:8080", "Lush's HTTP server (agentd and the gateway), as the sidecars reach it: host:port")
	fl.StringVar(&f.sidecar, "sidecar-listen", "127.0.0.1:10000", "the address the sidecars' listener binds")
	fl.DurationVar(&f.timeout, "timeout", time.Second, "how long a sidecar waits for a Check before it denies (503)")
	fl.StringVar(&f.gatewayConfig, "gateway-config", "", "gateway config whose auth.jwt issuers (with jwks_url) the sidecars verify with jwt_authn")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "downstream mTLS: the sidecar's certificate (a path on the sidecar's host)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "downstream mTLS: its private key")
	fl.StringVar(&f.tlsCA, "tls-ca", "", "downstream mTLS: the CA bundle peers' certificates must chain to")
	fl.StringVar(&f.eaCert, "ext-authz-tls-cert", "", "mTLS to Lush's ext_authz (ext_authz.tls): the sidecar's client certificate")
	fl.StringVar(&f.eaKey, "ext-authz-tls-key", "", "mTLS to ext_authz: its private key")
	fl.StringVar(&f.eaCA, "ext-authz-tls-ca", "", "mTLS to ext_authz: the CA of Lush's server certificate")
	fl.StringVar(&f.build, "build", "", "serve this kept build (hash or prefix) instead of following the deployed one")
	fl.StringVar(&f.ready, "ready-file", "", "write the listening address to this file once serving (for scripts and tests)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.BoolVar(&f.print, "print", false, "print the build's resources as one JSON document and exit")
	return cmd
}

func (f *meshXDSFlags) options() (xds.Options, error) {
	o := xds.Options{Listen: f.sidecar, ExtAuthz: f.extAuthz, Lush: f.lush, Timeout: f.timeout}
	switch n := btoi(f.tlsCert != "") + btoi(f.tlsKey != "") + btoi(f.tlsCA != ""); n {
	case 3:
		o.TLS = &xds.TLS{CertFile: f.tlsCert, KeyFile: f.tlsKey, CAFile: f.tlsCA}
	case 0:
	default:
		return o, usage("downstream mTLS needs all of --tls-cert, --tls-key and --tls-ca")
	}
	switch n := btoi(f.eaCert != "") + btoi(f.eaKey != "") + btoi(f.eaCA != ""); n {
	case 3:
		o.ExtAuthzTLS = &xds.TLS{CertFile: f.eaCert, KeyFile: f.eaKey, CAFile: f.eaCA}
	case 0:
	default:
		return o, usage("mTLS to ext_authz needs all of --ext-authz-tls-cert, --ext-authz-tls-key and --ext-authz-tls-ca")
	}
	if f.gatewayConfig != "" {
		cfg, err := loadGatewayConfig(f.gatewayConfig)
		if err != nil {
			return o, err
		}
		for _, j := range cfg.Auth.JWT {
			if j.JWKSURL != "" {
				o.JWT = append(o.JWT, xds.JWTProvider{Issuer: j.Issuer, Audiences: j.Audiences, JWKSURL: j.JWKSURL})
			}
		}
	}
	return o, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func runMeshXDS(cmd *cobra.Command, dir string, f *meshXDSFlags) error {
	ctx := cmd.Context()
	o, err := f.options()
	if err != nil {
		return err
	}
	logger, err := newLogger(cmd.ErrOrStderr(), f.logLevel)
	if err != nil {
		return err
	}
	srv, err := xds.New(o, logger)
	if err != nil {
		return usage("%v", err)
	}
	store := buildstore.ForProject(dir)
	if _, err := os.Stat(dir); err != nil {
		return &exitError{code: exitRuntime, msg: fmt.Sprintf("project %s: %v", dir, err)}
	}
	pinned := ""
	if f.build != "" {
		if pinned, err = store.Resolve(f.build); err != nil {
			return usage("--build: %v", err)
		}
	} else if pinned, err = store.Current(); err != nil || pinned == "" {
		return &exitError{code: exitRuntime, msg: fmt.Sprintf("nothing is deployed in %s: run lushctl build and lushctl deploy, or give --build", store.Path())}
	}
	if f.print {
		m, _, err := store.Load(pinned)
		if err != nil {
			return &exitError{code: exitRuntime, msg: err.Error()}
		}
		return printResources(cmd, m, o)
	}
	deploy := func(ctx context.Context, hash string) error {
		m, _, err := store.Load(hash)
		if err != nil {
			return err
		}
		if err := srv.Deploy(ctx, m, hash); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "lush xds: build %s of %s, version %s\n", manifest.Short(hash), m.Project, srv.Version())
		return nil
	}
	if err := deploy(ctx, pinned); err != nil {
		return &exitError{code: exitRuntime, msg: err.Error()}
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return &exitError{code: exitRuntime, msg: fmt.Sprintf("listen on %s: %v", f.listen, err)}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "lush xds: serving on %s (sidecars: lushctl mesh bootstrap --xds %s)\n", ln.Addr(), ln.Addr())
	if f.ready != "" {
		if err := os.WriteFile(f.ready, []byte(ln.Addr().String()), 0o644); err != nil {
			ln.Close()
			return err
		}
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	followed := make(chan error, 1)
	if f.build == "" {
		go func() {
			followed <- store.Follow(ctx, buildstore.DefaultFollowInterval, func(ctx context.Context, hash string) error {
				if hash == pinned {
					return nil // served already
				}
				return deploy(ctx, hash)
			}, func(hash string, err error) {
				logger.Error("refused a new build; the sidecars keep the current one", "build", manifest.Short(hash), "error", err)
			})
		}()
	} else {
		close(followed)
	}
	err = srv.Serve(ctx, ln)
	stop()
	<-followed
	return err
}

// xdsResources is what mesh xds --print prints: one JSON document with a build's resources by
// type, each as its proto's JSON (with the proto field names).
type xdsResources struct {
	Listeners []json.RawMessage `json:"listeners"`
	Routes    []json.RawMessage `json:"routes"`
	Clusters  []json.RawMessage `json:"clusters"`
}

func printResources(cmd *cobra.Command, m *manifest.Manifest, o xds.Options) error {
	res, err := xds.Resources(m, o)
	if err != nil {
		return &exitError{code: exitFailed, msg: err.Error()}
	}
	doc := xdsResources{Listeners: []json.RawMessage{}, Routes: []json.RawMessage{}, Clusters: []json.RawMessage{}}
	for typ, dst := range map[string]*[]json.RawMessage{resource.ListenerType: &doc.Listeners, resource.RouteType: &doc.Routes, resource.ClusterType: &doc.Clusters} {
		for _, r := range res[typ] {
			js, err := xds.JSON(r)
			if err != nil {
				return fmt.Errorf("print %s: %w", typ, err)
			}
			*dst = append(*dst, js)
		}
	}
	return writeJSON(cmd.OutOrStdout(), doc)
}

type meshBootstrapFlags struct {
	xds, nodeID, cluster, admin, out string
}

func newMeshBootstrapCmd() *cobra.Command {
	var f meshBootstrapFlags
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Write the static Envoy bootstrap of a sidecar that fetches the rest from lushctl mesh xds",
		Long: `Bootstrap writes an Envoy bootstrap (YAML): the node's id and cluster, the admin interface, and one
static cluster, the xDS server, from which the sidecar fetches its listeners, routes and clusters
over ADS. The bootstrap passes Envoy's proto validation (ValidateAll).`,
		Example: `  lushctl mesh bootstrap --xds lush-xds.internal:18000 --node-id notes-sidecar -o envoy.yaml
  envoy -c envoy.yaml`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := xds.Bootstrap(xds.BootstrapOptions{XDS: f.xds, NodeID: f.nodeID, Cluster: f.cluster, Admin: f.admin})
			if err != nil {
				return usage("%v", err)
			}
			if f.out == "" || f.out == "-" {
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			if err := os.WriteFile(f.out, b, 0o644); err != nil {
				return &exitError{code: exitRuntime, msg: err.Error()}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", f.out)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.xds, "xds", "127.0.0.1:18000", "the xDS server (lushctl mesh xds): host:port or unix:///path")
	fl.StringVar(&f.nodeID, "node-id", "lush-sidecar", "the sidecar's node id")
	fl.StringVar(&f.cluster, "cluster", "lush-mesh", "the sidecar's service cluster")
	fl.StringVar(&f.admin, "admin", "127.0.0.1:9901", "Envoy's admin interface")
	fl.StringVarP(&f.out, "out", "o", "", "write to this file (default: standard output)")
	return cmd
}
