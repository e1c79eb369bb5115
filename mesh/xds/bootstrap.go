package xds

import (
	"bytes"
	"encoding/json"
	"fmt"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"
)

// XDSClusterName is the bootstrap's cluster of the xDS server.
const XDSClusterName = "lush_xds"

// BootstrapOptions describe a sidecar.
type BootstrapOptions struct {
	XDS     string // the xDS server (lushctl mesh xds): host:port or unix:///path (default 127.0.0.1:18000)
	NodeID  string // the sidecar's node id (default lush-sidecar)
	Cluster string // the sidecar's service cluster (default lush-mesh)
	Admin   string // Envoy's admin interface (default 127.0.0.1:9901)
}

// Bootstrap is a static Envoy bootstrap (YAML) for a sidecar that fetches its listeners, routes
// and clusters from the xDS server over ADS.
func Bootstrap(o BootstrapOptions) ([]byte, error) {
	if o.XDS == "" {
		o.XDS = "127.0.0.1:18000"
	}
	if o.NodeID == "" {
		o.NodeID = "lush-sidecar"
	}
	if o.Cluster == "" {
		o.Cluster = "lush-mesh"
	}
	if o.Admin == "" {
		o.Admin = "127.0.0.1:9901"
	}
	xds, err := cluster(XDSClusterName, o.XDS, false, true)
	if err != nil {
		return nil, fmt.Errorf("--xds: %w", err)
	}
	host, port, err := splitHostPort(o.Admin)
	if err != nil {
		return nil, fmt.Errorf("--admin: %w", err)
	}
	ads := &corev3.ConfigSource{ResourceApiVersion: corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
	b := &bootstrapv3.Bootstrap{
		Node:  &corev3.Node{Id: o.NodeID, Cluster: o.Cluster},
		Admin: &bootstrapv3.Admin{Address: socketAddress(host, port)},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{ApiType: corev3.ApiConfigSource_GRPC, TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: XDSClusterName}}}}},
			CdsConfig: ads,
			LdsConfig: ads,
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{xds}},
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("the generated bootstrap is invalid: %w", err)
	}
	body, err := toYAML(b)
	if err != nil {
		return nil, err
	}
	header := fmt.Sprintf(`# Envoy bootstrap of a Lush sidecar, written by lushctl mesh bootstrap (docs/mesh.md).
# Envoy fetches its listeners, routes and clusters over ADS from the xDS server
# (lushctl mesh xds) at %s; they send agent and MCP requests through Lush's ext_authz.
`, o.XDS)
	return append([]byte(header), body...), nil
}

// toYAML writes a message as YAML in its fields' order (the proto field names).
func toYAML(m proto.Message) ([]byte, error) {
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(js, &n); err != nil { // JSON is YAML: the node keeps the order
		return nil, err
	}
	block(&n)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// block turns the flow style JSON gave the nodes into block style, and JSON's quoted keys into
// plain ones.
func block(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		n.Style &^= yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		block(c)
	}
}

// JSON is a resource as indented JSON with the proto field names, the form golden files and
// `lushctl mesh xds --print` show.
func JSON(m proto.Message) ([]byte, error) {
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, js, "", "  "); err != nil { // protojson's own spacing varies on purpose
		return nil, err
	}
	return append(out.Bytes(), '\n'), nil
}
