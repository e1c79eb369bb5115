// Package xds configures Envoy sidecars for a build: it turns the build's mesh routes
// (mesh.Routes) into the listeners, routes and clusters of go-control-plane's snapshot cache,
// with Envoy's ext_authz filter pointing at Lush on every route that Lush must decide, and serves
// them over xDS (ADS and the per-type services), pushing a new snapshot on every deploy. It also
// writes the static bootstrap a sidecar starts from.
//
// Every resource it generates passes the protos' own ValidateAll before it is served.
package xds

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/mesh"
)

// Names of the generated resources.
const (
	ListenerName        = "lush_mcp"
	RouteConfigName     = "lush_routes"
	ExtAuthzClusterName = "lush_ext_authz"
	LushClusterName     = "lush" // lushctl serve: agentd and the gateway
	jwtPayloadKey       = "jwt_payload"
)

// Options say where things are. The zero value of a field takes its default.
type Options struct {
	Listen          string        // the sidecar's listener (default 127.0.0.1:10000)
	ExtAuthz        string        // Lush's ext_authz server: host:port or unix:///path (default 127.0.0.1:9191)
	Lush            string        // Lush's HTTP server (agentd, the gateway): host:port (default 127.0.0.1:8080)
	Timeout         time.Duration // of one Check (default 1s)
	MaxRequestBytes uint32        // request bodies sent with Check (default 1 MiB)
	JWT             []JWTProvider // verified by Envoy's jwt_authn filter; the payload reaches Lush as metadata
	TLS             *TLS          // downstream mTLS: peer certificates (SPIFFE ids) reach Lush
	// ExtAuthzTLS is the sidecar's mTLS to Lush's ext_authz (ext_authz.tls): its client
	// certificate, and the CA of Lush's server certificate.
	ExtAuthzTLS *TLS
}

// JWTProvider is an issuer whose tokens the sidecar verifies.
type JWTProvider struct {
	Issuer    string
	Audiences []string
	JWKSURL   string // http(s) URL of the issuer's keys, fetched by the sidecar
}

// TLS is the sidecar's downstream mTLS: files on the sidecar's host.
type TLS struct {
	CertFile, KeyFile, CAFile string
}

func (o Options) withDefaults() Options {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:10000"
	}
	if o.ExtAuthz == "" {
		o.ExtAuthz = "127.0.0.1:9191"
	}
	if o.Lush == "" {
		o.Lush = "127.0.0.1:8080"
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = 1 << 20
	}
	return o
}

// Snapshot is the build's configuration for every sidecar, versioned by the build's hash and
// the options. It is consistent (every route configuration a listener names is in it) and every
// resource passed ValidateAll.
func Snapshot(m *manifest.Manifest, hash string, o Options) (*cache.Snapshot, error) {
	o = o.withDefaults()
	res, err := Resources(m, o)
	if err != nil {
		return nil, err
	}
	snap, err := cache.NewSnapshot(Version(hash, o), res)
	if err != nil {
		return nil, fmt.Errorf("xds snapshot: %w", err)
	}
	if err := snap.Consistent(); err != nil {
		return nil, fmt.Errorf("xds snapshot: %w", err)
	}
	return snap, nil
}

// Version is the snapshot version of a build under options: the build's short hash and a digest
// of the options, so that a change of either pushes a new snapshot.
func Version(hash string, o Options) string {
	o = o.withDefaults()
	d := sha256.Sum256(fmt.Appendf(nil, "%#v", o))
	return manifest.Short(hash) + "-" + hex.EncodeToString(d[:4])
}

// Resources are the build's listeners, routes and clusters.
func Resources(m *manifest.Manifest, o Options) (map[resource.Type][]types.Resource, error) {
	o = o.withDefaults()
	tab := mesh.Routes(m)
	var errs []error
	clusters := map[string]*clusterv3.Cluster{}
	addCluster := func(c *clusterv3.Cluster, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		clusters[c.Name] = c
	}
	ea, err := cluster(ExtAuthzClusterName, o.ExtAuthz, false, true)
	if err == nil && o.ExtAuthzTLS != nil {
		err = withClientTLS(ea, o.ExtAuthzTLS)
	}
	addCluster(ea, err)
	addCluster(cluster(LushClusterName, o.Lush, false, false))

	vh := &routev3.VirtualHost{Name: "lush", Domains: []string{"*"}}
	for _, r := range tab.Routes {
		rts, err := routes(r, addCluster)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vh.Routes = append(vh.Routes, rts...)
	}
	routes := &routev3.RouteConfiguration{Name: RouteConfigName, VirtualHosts: []*routev3.VirtualHost{vh}}

	var jwtFilter *hcmv3.HttpFilter
	if len(o.JWT) > 0 {
		f, err := jwtAuthn(o.JWT, addCluster)
		if err != nil {
			errs = append(errs, err)
		}
		jwtFilter = f
	}
	lis, err := listener(o, jwtFilter)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	out := map[resource.Type][]types.Resource{
		resource.ListenerType: {lis},
		resource.RouteType:    {routes},
	}
	names := make([]string, 0, len(clusters))
	for n := range clusters {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out[resource.ClusterType] = append(out[resource.ClusterType], clusters[n])
	}
	for typ, list := range out {
		for _, r := range list {
			if err := validate(r); err != nil {
				return nil, fmt.Errorf("generated %s %q is invalid: %w", typ[strings.LastIndex(typ, ".")+1:], cache.GetResourceName(r), err)
			}
		}
	}
	return out, nil
}

func validate(r types.Resource) error {
	v, ok := r.(interface{ ValidateAll() error })
	if !ok {
		return fmt.Errorf("%T has no ValidateAll", r)
	}
	return v.ValidateAll()
}

// modernVersion matches the MCP-Protocol-Version of MCP 2026-07-28 and every later (date) version:
// the requests whose servers check the Mcp-Method and Mcp-Name headers against the body.
const modernVersion = `2026-07-(2[89]|3[01])|2026-(0[89]|1[0-2])-[0-9]{2}|20(2[7-9]|[3-9][0-9])-[0-9]{2}-[0-9]{2}`

// routes are the Envoy routes of a mesh route. The filter sends the request body
// (with_request_body). A server route whose calls need nothing from it (mesh.Route.Body false) is
// two: first, for MCP 2026 requests (by their MCP-Protocol-Version header), the route that turns
// body buffering off, as ext_authz decides those from their Mcp-Method and Mcp-Name headers; then,
// for the other versions, whose headers no server checks, the route that sends the body.
func routes(r mesh.Route, addCluster func(*clusterv3.Cluster, error)) ([]*routev3.Route, error) {
	rt, err := route(r, addCluster)
	if err != nil || r.Kind != mesh.KindServer || r.Body {
		return []*routev3.Route{rt}, err
	}
	headers, err := route(r, addCluster)
	if err != nil {
		return nil, err
	}
	headers.Name += "/mcp-2026"
	headers.Match.Headers = []*routev3.HeaderMatcher{{Name: "mcp-protocol-version", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: modernVersion}}}}}}
	per := &extauthzv3.ExtAuthzPerRoute{Override: &extauthzv3.ExtAuthzPerRoute_CheckSettings{
		CheckSettings: &extauthzv3.CheckSettings{ContextExtensions: r.ContextExtensions(), DisableRequestBodyBuffering: true}}}
	cfg, err := anypb.New(per)
	if err != nil {
		return nil, err
	}
	headers.TypedPerFilterConfig[wellknown.HTTPExternalAuthorization] = cfg
	return []*routev3.Route{headers, rt}, nil
}

// route is the Envoy route of a mesh route, and the cluster it needs.
func route(r mesh.Route, addCluster func(*clusterv3.Cluster, error)) (*routev3.Route, error) {
	per := &extauthzv3.ExtAuthzPerRoute{Override: &extauthzv3.ExtAuthzPerRoute_CheckSettings{
		CheckSettings: &extauthzv3.CheckSettings{ContextExtensions: r.ContextExtensions()}}}
	action := &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: LushClusterName},
		Timeout: durationpb.New(0)} // MCP answers can be event streams that last
	match := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: r.Path}}
	switch r.Kind {
	case mesh.KindServer:
		name := upstreamClusterName(r.URL)
		addCluster(cluster(name, hostPort(r.URL), r.URL.Scheme == "https", false))
		match = &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: r.Path}}
		action.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: name}
		action.PrefixRewrite = r.URL.EscapedPath()
		if action.PrefixRewrite == "" {
			action.PrefixRewrite = "/"
		}
		action.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: r.URL.Host}
	case mesh.KindGateway:
		// The Lush gateway authenticates and decides every message of these routes itself.
		per = &extauthzv3.ExtAuthzPerRoute{Override: &extauthzv3.ExtAuthzPerRoute_Disabled{Disabled: true}}
	case mesh.KindA2A:
		// agentd authenticates and decides every A2A method itself (an invocation, a task read, a
		// cancel): ext_authz would read them all as invocations. The path and everything under it.
		match = &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: r.Path}}
		per = &extauthzv3.ExtAuthzPerRoute{Override: &extauthzv3.ExtAuthzPerRoute_Disabled{Disabled: true}}
	}
	cfg, err := anypb.New(per)
	if err != nil {
		return nil, err
	}
	return &routev3.Route{Name: r.Name, Match: match, Action: &routev3.Route_Route{Route: action},
		TypedPerFilterConfig: map[string]*anypb.Any{wellknown.HTTPExternalAuthorization: cfg}}, nil
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

func upstreamClusterName(u *url.URL) string {
	return "mcp_" + u.Scheme + "_" + strings.Trim(nonName.ReplaceAllString(strings.ToLower(u.Host), "_"), "_")
}

// cluster is a cluster of one endpoint: host:port (a name is resolved by DNS, an IP is static),
// or unix:///path; with TLS for https upstreams, and HTTP/2 for gRPC.
func cluster(name, addr string, tls, http2 bool) (*clusterv3.Cluster, error) {
	c := &clusterv3.Cluster{Name: name, ConnectTimeout: durationpb.New(2 * time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}}
	var address *corev3.Address
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("cluster %s: %q: a Unix socket is unix:///absolute/path", name, addr)
		}
		address = &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: path}}}
	} else {
		host, port, err := splitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", name, err)
		}
		if net.ParseIP(host) == nil {
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}
		}
		address = socketAddress(host, port)
		if tls {
			ctx, err := anypb.New(&tlsv3.UpstreamTlsContext{Sni: host})
			if err != nil {
				return nil, err
			}
			c.TransportSocket = &corev3.TransportSocket{Name: wellknown.TransportSocketTLS,
				ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: ctx}}
		}
	}
	c.LoadAssignment = &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{
			Endpoint: &endpointv3.Endpoint{Address: address}}}}}}}
	if http2 {
		opts, err := anypb.New(&upstreamhttpv3.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
				Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}})
		if err != nil {
			return nil, err
		}
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}
	}
	return c, nil
}

// splitHostPort splits host:port.
func splitHostPort(addr string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port", addr)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || host == "" {
		return "", 0, fmt.Errorf("%q is not host:port (a host and a port from 1 to 65535)", addr)
	}
	return host, uint32(p), nil
}

// hostPort is a URL's host:port, with the scheme's port when the URL names none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
}

// accessLogFormat is the sidecar's access log: each request with Lush's decision.
const accessLogFormat = `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%" %RESPONSE_CODE% %RESPONSE_FLAGS% ` +
	`%DURATION%ms lush_decision=%DYNAMIC_METADATA(envoy.filters.http.ext_authz:decision_id)% ` +
	`outcome=%DYNAMIC_METADATA(envoy.filters.http.ext_authz:outcome)% tool=%DYNAMIC_METADATA(envoy.filters.http.ext_authz:tool)% ` +
	`rules=%DYNAMIC_METADATA(envoy.filters.http.ext_authz:rules)% route=%ROUTE_NAME% upstream=%UPSTREAM_HOST%` + "\n"

// listener is the sidecar's listener: the HTTP connection manager with jwt_authn (when
// providers are given), ext_authz and the router, routes from RDS over ADS.
func listener(o Options, jwt *hcmv3.HttpFilter) (*listenerv3.Listener, error) {
	host, port, err := splitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("listener: %w", err)
	}
	ea := &extauthzv3.ExtAuthz{
		Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: ExtAuthzClusterName}},
			Timeout:         durationpb.New(o.Timeout)}},
		TransportApiVersion:       corev3.ApiVersion_V3,
		FailureModeAllow:          false, // Lush unreachable: deny
		StatusOnError:             &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
		WithRequestBody:           &extauthzv3.BufferSettings{MaxRequestBytes: o.MaxRequestBytes, PackAsBytes: true},
		IncludePeerCertificate:    true,
		MetadataContextNamespaces: []string{"envoy.filters.http.jwt_authn"},
	}
	var filters []*hcmv3.HttpFilter
	if jwt != nil {
		filters = append(filters, jwt)
	}
	eaAny, err := anypb.New(ea)
	if err != nil {
		return nil, err
	}
	routerAny, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	filters = append(filters,
		&hcmv3.HttpFilter{Name: wellknown.HTTPExternalAuthorization, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: eaAny}},
		&hcmv3.HttpFilter{Name: wellknown.Router, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: routerAny}})
	logAny, err := anypb.New(&streamv3.StdoutAccessLog{AccessLogFormat: &streamv3.StdoutAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
		Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{
			Specifier: &corev3.DataSource_InlineString{InlineString: accessLogFormat}}}}}})
	if err != nil {
		return nil, err
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "lush_mcp",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: RouteConfigName,
			ConfigSource: &corev3.ConfigSource{ResourceApiVersion: corev3.ApiVersion_V3,
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}}},
		HttpFilters: filters,
		// Lush reads requests by their path: the sidecar routes and authorizes the normalized one.
		NormalizePath:                wrapperspb.Bool(true),
		MergeSlashes:                 true,
		PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT,
		AccessLog: []*accesslogv3.AccessLog{{Name: "envoy.access_loggers.stdout",
			ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: logAny}}},
	}
	hcmAny, err := anypb.New(hcm)
	if err != nil {
		return nil, err
	}
	chain := &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{Name: wellknown.HTTPConnectionManager,
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcmAny}}}}
	if o.TLS != nil {
		tls := &tlsv3.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(true), CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificates: []*tlsv3.TlsCertificate{{CertificateChain: file(o.TLS.CertFile), PrivateKey: file(o.TLS.KeyFile)}},
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa: file(o.TLS.CAFile)}}}}
		tlsAny, err := anypb.New(tls)
		if err != nil {
			return nil, err
		}
		chain.TransportSocket = &corev3.TransportSocket{Name: wellknown.TransportSocketTLS,
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsAny}}
	}
	return &listenerv3.Listener{Name: ListenerName, Address: socketAddress(host, port), FilterChains: []*listenerv3.FilterChain{chain}}, nil
}

// withClientTLS makes a cluster's connections mTLS: the sidecar's certificate, and the CA the
// server's certificate must chain to.
func withClientTLS(c *clusterv3.Cluster, t *TLS) error {
	ctx, err := anypb.New(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificates: []*tlsv3.TlsCertificate{{CertificateChain: file(t.CertFile), PrivateKey: file(t.KeyFile)}},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: file(t.CAFile)}}}})
	if err != nil {
		return err
	}
	c.TransportSocket = &corev3.TransportSocket{Name: wellknown.TransportSocketTLS,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: ctx}}
	return nil
}

func file(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}

// jwtAuthn is the jwt_authn filter: tokens of the providers are verified, and their payload put
// in the metadata Lush reads; requests without a token go on (Lush has other identities).
func jwtAuthn(ps []JWTProvider, addCluster func(*clusterv3.Cluster, error)) (*hcmv3.HttpFilter, error) {
	cfg := &jwtv3.JwtAuthentication{Providers: map[string]*jwtv3.JwtProvider{}}
	anyOf := &jwtv3.JwtRequirementOrList{}
	for i, p := range ps {
		u, err := url.Parse(p.JWKSURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("jwt provider %s: the JWKS URL %q is not an http(s) URL", p.Issuer, p.JWKSURL)
		}
		name := fmt.Sprintf("issuer_%d", i)
		jwks := "jwks_" + strconv.Itoa(i)
		addCluster(cluster(jwks, hostPort(u), u.Scheme == "https", false))
		cfg.Providers[name] = &jwtv3.JwtProvider{Issuer: p.Issuer, Audiences: p.Audiences, Forward: true, PayloadInMetadata: jwtPayloadKey,
			JwksSourceSpecifier: &jwtv3.JwtProvider_RemoteJwks{RemoteJwks: &jwtv3.RemoteJwks{
				HttpUri:       &corev3.HttpUri{Uri: p.JWKSURL, HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: jwks}, Timeout: durationpb.New(5 * time.Second)},
				CacheDuration: durationpb.New(10 * time.Minute)}}}
		anyOf.Requirements = append(anyOf.Requirements, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_ProviderName{ProviderName: name}})
	}
	anyOf.Requirements = append(anyOf.Requirements, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_AllowMissing{AllowMissing: &emptypb.Empty{}}})
	cfg.Rules = []*jwtv3.RequirementRule{{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		RequirementType: &jwtv3.RequirementRule_Requires{Requires: &jwtv3.JwtRequirement{
			RequiresType: &jwtv3.JwtRequirement_RequiresAny{RequiresAny: anyOf}}}}}
	a, err := anypb.New(cfg)
	if err != nil {
		return nil, err
	}
	return &hcmv3.HttpFilter{Name: "envoy.filters.http.jwt_authn", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}}, nil
}
