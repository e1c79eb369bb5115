package xds_test

import (
	"context"
	"flag"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	client "github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/mesh"
	"github.com/lush-agents/lush/mesh/xds"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./mesh/xds -update to write it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the generated output (go test ./mesh/xds -update rewrites it):\n%s", path, got)
	}
}

func TestBootstrap(t *testing.T) {
	b, err := xds.Bootstrap(xds.BootstrapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "bootstrap.yaml", b)
}

func build(t *testing.T, edit func(dir string)) (*manifest.Manifest, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/project")); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(dir)
	}
	res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("build: %v %v", err, res.Diagnostics)
	}
	return res.Manifest, res.Hash
}

// The generated listeners, routes and clusters are pinned, for the default options and for a
// sidecar with jwt_authn, mTLS and ext_authz on a Unix socket.
func TestResourcesGolden(t *testing.T) {
	m, _ := build(t, nil)
	for _, tc := range []struct {
		name string
		o    xds.Options
	}{
		{"default", xds.Options{}},
		{"jwt-mtls-socket", xds.Options{Listen: "0.0.0.0:15001", ExtAuthz: "unix:///run/lush/ext_authz.sock", Lush: "lush.lush-system.svc:8080",
			Timeout: 250 * time.Millisecond, MaxRequestBytes: 64 << 10,
			JWT: []xds.JWTProvider{{Issuer: "https://idp.example.com/", Audiences: []string{"lush"}, JWKSURL: "https://idp.example.com/.well-known/jwks.json"}},
			TLS: &xds.TLS{CertFile: "/etc/spire/svid.pem", KeyFile: "/etc/spire/svid.key", CAFile: "/etc/spire/bundle.pem"}}},
		{"ext-authz-mtls", xds.Options{ExtAuthz: "lush.lush-system.svc:9191",
			ExtAuthzTLS: &xds.TLS{CertFile: "/etc/envoy/client.pem", KeyFile: "/etc/envoy/client.key", CAFile: "/etc/envoy/lush-ca.pem"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := xds.Resources(m, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			var out []byte
			for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType} {
				for _, r := range res[typ] {
					js, err := xds.JSON(r)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, js...)
				}
			}
			golden(t, tc.name+".json", out)
		})
	}
}

// What the routes say: a remote server's route goes to its own cluster, rewritten to its path
// and host, with the context extensions ext_authz reads; the gateway's route skips ext_authz.
func TestRoutes(t *testing.T) {
	m, _ := build(t, nil)
	res, err := xds.Resources(m, xds.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rc := res[resource.RouteType][0].(*routev3.RouteConfiguration)
	byName := map[string]*routev3.Route{}
	for _, r := range rc.VirtualHosts[0].Routes {
		byName[r.Name] = r
	}
	notes := byName["assistant/tools/notes"]
	if notes == nil || notes.GetMatch().GetPath() != "/agents/assistant/tools/notes/mcp" || notes.GetRoute().GetCluster() != "mcp_http_10_0_0_5_8080" ||
		notes.GetRoute().GetPrefixRewrite() != "/mcp" || notes.GetRoute().GetHostRewriteLiteral() != "10.0.0.5:8080" {
		t.Fatalf("the notes route: %v", notes)
	}
	per := &extauthzv3.ExtAuthzPerRoute{}
	notes.TypedPerFilterConfig[wellknown.HTTPExternalAuthorization].UnmarshalTo(per)
	ext := per.GetCheckSettings().GetContextExtensions()
	if ext[mesh.ExtKind] != "mcp" || ext[mesh.ExtAgent] != "assistant" || ext[mesh.ExtTool] != "mcp://notes.internal/mcp" {
		t.Errorf("context extensions %v", ext)
	}
	gw := byName["gateway/assistant"]
	gw.TypedPerFilterConfig[wellknown.HTTPExternalAuthorization].UnmarshalTo(per)
	if gw.GetMatch().GetPrefix() != "/gateway/agents/assistant/" || !per.GetDisabled() {
		t.Errorf("the gateway route: %v", gw)
	}
	// agentd decides every A2A method itself: the endpoint and the card skip ext_authz, matched
	// on the path and below it only (not /agents/assistant/a2abc).
	for name, path := range map[string]string{"a2a/assistant": "/agents/assistant/a2a", "a2a-card/assistant": "/agents/assistant/.well-known"} {
		r := byName[name]
		if r == nil {
			t.Fatalf("no route %s", name)
		}
		per := &extauthzv3.ExtAuthzPerRoute{}
		r.TypedPerFilterConfig[wellknown.HTTPExternalAuthorization].UnmarshalTo(per)
		if r.GetMatch().GetPathSeparatedPrefix() != path || !per.GetDisabled() || r.GetRoute().GetCluster() != xds.LushClusterName {
			t.Errorf("the %s route: %v", name, r)
		}
	}
	helper := byName["agent/helper"]
	helper.TypedPerFilterConfig[wellknown.HTTPExternalAuthorization].UnmarshalTo(per)
	if helper.GetRoute().GetCluster() != xds.LushClusterName || per.GetCheckSettings().GetContextExtensions()[mesh.ExtKind] != "agent" {
		t.Errorf("the helper's route: %v", helper)
	}
}

// Bad options are refused with the field that is wrong.
func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		o    xds.Options
		want string
	}{
		{xds.Options{ExtAuthz: "9191"}, "cluster lush_ext_authz"},
		{xds.Options{ExtAuthz: "unix://relative.sock"}, "unix:///absolute/path"},
		{xds.Options{Lush: "lush:99999"}, "cluster lush"},
		{xds.Options{Listen: "nowhere"}, "listener"},
		{xds.Options{JWT: []xds.JWTProvider{{Issuer: "i", JWKSURL: "file:///keys"}}}, "not an http(s) URL"},
	} {
		_, err := xds.New(tc.o, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}

// A sidecar's ADS stream, with go-control-plane's own client: it receives the build's
// configuration, acknowledges it, and receives the next one when a build with another server is
// deployed.
func TestADSPushesOnDeploy(t *testing.T) {
	srv, err := xds.New(xds.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	hc := healthpb.NewHealthClient(conn)
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health before a deploy: %v %v", r.GetStatus(), err)
	}

	m1, h1 := build(t, nil)
	if err := srv.Deploy(ctx, m1, h1); err != nil {
		t.Fatal(err)
	}
	c := client.NewADSClient(ctx, &corev3.Node{Id: "sidecar-1", Cluster: "lush-mesh"}, resource.ClusterType)
	if err := c.InitConnect(conn); err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		t.Helper()
		resp, err := c.Fetch()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range resp.Resources {
			cl := &clusterv3.Cluster{}
			if err := a.UnmarshalTo(cl); err != nil {
				t.Fatal(err)
			}
			out = append(out, cl.Name)
		}
		slices.Sort(out)
		if err := c.Ack(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := names()
	want := []string{"lush", "lush_ext_authz", "mcp_http_10_0_0_5_8080", "mcp_https_api_example_com"}
	if !slices.Equal(first, want) {
		t.Fatalf("first snapshot: clusters %v, want %v", first, want)
	}
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health after a deploy: %v %v", r.GetStatus(), err)
	}
	v1 := srv.Version()

	m2, h2 := build(t, func(dir string) {
		spec := filepath.Join(dir, "agents/helper/spec.yaml")
		data, _ := os.ReadFile(spec)
		os.WriteFile(spec, append(data, []byte("tools:\n  - server: mcp://search.example.org/mcp\n    access: read\n")...), 0o644)
		lush := filepath.Join(dir, "lush.yaml")
		data, _ = os.ReadFile(lush)
		os.WriteFile(lush, []byte(strings.Replace(string(data), "servers:\n", "servers:\n  mcp://search.example.org/mcp:\n    url: https://search.example.org:8443/mcp\n", 1)), 0o644)
	})
	if err := srv.Deploy(ctx, m2, h2); err != nil {
		t.Fatal(err)
	}
	second := names()
	if !slices.Contains(second, "mcp_https_search_example_org_8443") || len(second) != len(first)+1 {
		t.Errorf("after the deploy: clusters %v", second)
	}
	if srv.Version() == v1 || !strings.HasPrefix(srv.Version(), manifest.Short(h2)) {
		t.Errorf("version %s after %s", srv.Version(), v1)
	}
}
