package xds_test

import (
	"context"
	"os"
	"testing"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/mesh/xds"
)

// examples/mesh is complete and current: the project builds, its gateway config loads and is
// valid, the sidecars' configuration for it is valid, and envoy.yaml is what lushctl mesh
// bootstrap writes.
func TestMeshExample(t *testing.T) {
	const dir = "../../examples/mesh"
	tmp := t.TempDir()
	if err := os.CopyFS(tmp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	res, err := compiler.Build(context.Background(), tmp, compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("examples/mesh does not build: %v %v", err, res.Diagnostics)
	}
	cfg, err := gateway.LoadConfig(dir + "/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil || !cfg.ExtAuthz.Enabled() {
		t.Fatalf("examples/mesh/gateway.yaml: %v (ext_authz on: %v)", err, cfg.ExtAuthz.Enabled())
	}
	o := xds.Options{JWT: []xds.JWTProvider{{Issuer: cfg.Auth.JWT[0].Issuer, Audiences: cfg.Auth.JWT[0].Audiences, JWKSURL: cfg.Auth.JWT[0].JWKSURL}}}
	if _, err := xds.Snapshot(res.Manifest, res.Hash, o); err != nil {
		t.Fatal(err)
	}
	want, err := xds.Bootstrap(xds.BootstrapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dir + "/envoy.yaml")
	if err != nil || string(got) != string(want) {
		t.Errorf("examples/mesh/envoy.yaml is not what lushctl mesh bootstrap writes (%v): regenerate it with\n  lushctl mesh bootstrap -o examples/mesh/envoy.yaml", err)
	}
}
