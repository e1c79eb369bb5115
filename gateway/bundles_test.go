package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/bundlesource"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// rewrite reads a bundle, lets edit change it, and writes it again (unsigned).
func rewrite(t *testing.T, raw []byte, edit func(*bundle.Bundle)) []byte {
	t.Helper()
	b, err := bundle.NewReader(bytes.NewReader(raw)).WithSkipBundleVerification(true).Read()
	if err != nil {
		t.Fatal(err)
	}
	edit(&b)
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type healthDoc struct {
	Status    string            `json:"status"`
	Ready     bool              `json:"ready"`
	Revision  string            `json:"revision"`
	LastError *gateway.Problem  `json:"last_error"`
	Upstreams map[string]any    `json:"upstreams"`
	Extra     map[string]string `json:"-"`
}

func (h *harness) health() healthDoc {
	h.t.Helper()
	resp, err := http.Get(h.srv.URL + "/health")
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc healthDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		h.t.Fatal(err)
	}
	return doc
}

// TestDeployBundle: a build deployed from its bundle alone (the manifest inside it) switches the
// gateway, logs one build/switch event naming both builds, and sets lush_build_info; bundles
// without a manifest, with another build's manifest, that do not read or do not compile are
// refused with their reason (counted, logged, shown by /health) while the last good build keeps
// deciding calls.
func TestDeployBundle(t *testing.T) {
	h := start(t, gateway.Config{})
	alice := h.client("assistant", aliceKey)
	first := h.gw.Revision()
	ctx := context.Background()

	// The next build takes alice's read grant away: calls show which build decided them.
	raw, err := os.ReadFile(h.dir + "/lush.yaml")
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(raw), "      - {principal: group:eng, access: read}\n      - {principal: user:alice, access: write", "      - {principal: user:alice, access: write", 1)
	if err := os.WriteFile(h.dir+"/lush.yaml", []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := compiler.Build(ctx, h.dir, compiler.Offline(true))
	if err != nil || !next.OK() {
		t.Fatalf("build: %v %v", err, next.Diagnostics)
	}
	if err := h.gw.DeployBundle(ctx, next.Bundle, "http://bundles.test/app.tar.gz"); err != nil {
		t.Fatal(err)
	}
	if h.gw.Revision() != next.Hash || h.gw.Manifest().Project != next.Manifest.Project {
		t.Fatalf("revision %s after DeployBundle, want %s", h.gw.Revision(), next.Hash)
	}
	if res := callTool(t, alice, "tests__echo", map[string]any{"text": "x"}); !res.IsError || !strings.Contains(text(res), "holds no grant") {
		t.Fatalf("after the switch alice's call is decided by the old build: %s", text(res))
	}
	if got := testutil.ToFloat64(h.metrics.BuildInfo.WithLabelValues(next.Hash)); got != 1 {
		t.Errorf("lush_build_info{revision=new} = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(h.metrics.BuildInfo); got != 1 {
		t.Errorf("lush_build_info has %d series, want only the build served", got)
	}
	switches := h.events(decisionlog.Filter{Action: enforce.ActionBuildSwitch})
	if len(switches) != 1 {
		t.Fatalf("%d build/switch events, want 1", len(switches))
	}
	ev := switches[0].Event
	var in map[string]string
	json.Unmarshal(ev.Input, &in)
	if ev.Revision != next.Hash || in["from"] != first || in["to"] != next.Hash || in["source"] != "http://bundles.test/app.tar.gz" ||
		ev.Principal != enforce.PrincipalSystem || ev.Point != enforce.PointBuild || ev.Labels["id"] == "" {
		t.Errorf("build/switch event: revision %s input %v principal %s point %s labels %v", ev.Revision, in, ev.Principal, ev.Point, ev.Labels)
	}
	// Deploying the build served again is no switch.
	if err := h.gw.DeployBundle(ctx, next.Bundle, "again"); err != nil {
		t.Fatal(err)
	}
	if n := len(h.events(decisionlog.Filter{Action: enforce.ActionBuildSwitch})); n != 1 {
		t.Errorf("%d build/switch events after deploying the same build again, want 1", n)
	}

	// The first build again (a bundle of another revision than the one served), to break.
	if err := os.WriteFile(h.dir+"/lush.yaml", raw, 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := compiler.Build(ctx, h.dir, compiler.Offline(true))
	if err != nil || again.Hash != first {
		t.Fatalf("rebuild of the first build: %v, hash %s, want %s", err, again.Hash, first)
	}
	tests := []struct {
		name   string
		bundle []byte
		reason string
	}{
		{"no manifest", rewrite(t, next.Bundle, func(b *bundle.Bundle) {
			delete(b.Data["lush"].(map[string]any), "build")
		}), bundlesource.ReasonManifestMissing},
		{"another build's manifest", rewrite(t, next.Bundle, func(b *bundle.Bundle) {
			b.Manifest.Revision = first // the manifest inside is next's
		}), bundlesource.ReasonManifestMismatch},
		{"not a bundle", []byte("not a bundle"), bundlesource.ReasonUnreadable},
		{"does not compile", rewrite(t, again.Bundle, func(b *bundle.Bundle) {
			b.Modules = append(b.Modules, bundle.ModuleFile{URL: "/lush/bad.rego", Path: "/lush/bad.rego",
				Raw: []byte("package lush.bad\n\nx := y\n")})
		}), bundlesource.ReasonCompile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testutil.ToFloat64(h.metrics.BundleRefused.WithLabelValues(tt.reason))
			err := h.gw.DeployBundle(ctx, tt.bundle, "test")
			if bundlesource.RefusalReason(err) != tt.reason {
				t.Fatalf("DeployBundle = %v, want a refusal for %s", err, tt.reason)
			}
			if h.gw.Revision() != next.Hash {
				t.Fatal("a refused bundle changed the build")
			}
			if got := testutil.ToFloat64(h.metrics.BundleRefused.WithLabelValues(tt.reason)); got != before+1 {
				t.Errorf("lush_bundle_refused_total{reason=%s} = %v, want %v", tt.reason, got, before+1)
			}
			doc := h.health()
			if !doc.Ready || doc.Revision != next.Hash || doc.LastError == nil || doc.LastError.Reason != tt.reason ||
				tt.reason != bundlesource.ReasonUnreadable && doc.LastError.Build == "" {
				t.Errorf("/health = %+v, want ready on the last good build with last_error %s", doc, tt.reason)
			}
			if !strings.Contains(h.logs.String(), "reason="+tt.reason) {
				t.Errorf("the refusal is not logged with its reason %s", tt.reason)
			}
			if res := callTool(t, alice, "tests__echo", map[string]any{"text": "y"}); !res.IsError || !strings.Contains(text(res), "holds no grant") {
				t.Errorf("after a refused bundle alice's call is not decided by the last good build: %s", text(res))
			}
		})
	}
}
