package compiler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/manifest"
)

// TestRateLimits: lush.yaml rate_limits compile, defaults applied and sorted, into the manifest
// and into data.lush.project.rate_limits; their principals are checked like the others.
func TestRateLimits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	copyTree(t, quickstart, dir, false)
	appendYAML(t, dir, "lush.yaml", `rate_limits:
  - tool: mcp://notes.example.com/mcp
    rate: 100/m
  - principal: group:contractors
    rate: 5/s
    burst: 10
  - principal: serviceaccount:digest-bot
    rate: 30/h
`)
	res, err := compiler.Build(ctx, dir, compiler.Offline(true))
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("build failed:\n%s", render(res.Diagnostics))
	}
	want := []manifest.RateLimit{
		{Tool: "mcp://notes.example.com/mcp", Rate: "100/m", Burst: 2},
		{Principal: "group:contractors", Rate: "5/s", Burst: 10},
		{Principal: "serviceaccount:digest-bot", Rate: "30/h", Burst: 1},
	}
	if fmt.Sprint(res.Manifest.RateLimits) != fmt.Sprint(want) {
		t.Errorf("manifest rate limits = %+v, want %+v", res.Manifest.RateLimits, want)
	}
	if !strings.Contains(string(res.ManifestJSON), `"rate_limits": [`) {
		t.Errorf("the manifest JSON has no rate_limits:\n%s", res.ManifestJSON)
	}
	if _, err := manifest.Decode(res.ManifestJSON, res.Hash); err != nil {
		t.Errorf("decode: %v", err)
	}
	data := compiler.PolicyData(res.Manifest)["lush"].(map[string]any)["project"].(map[string]any)["rate_limits"].([]any)
	if len(data) != 3 || fmt.Sprint(data[1]) != "map[burst:10 label:group:contractors 5/s burst 10 principal:group:contractors rate:5/s]" {
		t.Errorf("data.lush.project.rate_limits = %v", data)
	}

	// Without rate_limits, neither the manifest nor the data has them.
	plain := t.TempDir()
	copyTree(t, quickstart, plain, false)
	res, err = compiler.Build(ctx, plain, compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("build: %v", err)
	}
	if strings.Contains(string(res.ManifestJSON), "rate_limits") {
		t.Error("a manifest without limits mentions rate_limits")
	}
	if _, ok := compiler.PolicyData(res.Manifest)["lush"].(map[string]any)["project"].(map[string]any)["rate_limits"]; ok {
		t.Error("data without limits has rate_limits")
	}
}

func TestRateLimitUndeclaredServiceAccount(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, quickstart, dir, false)
	appendYAML(t, dir, "lush.yaml", "rate_limits:\n  - principal: serviceaccount:ghost\n    rate: 1/s\n")
	res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() || !strings.Contains(render(res.Diagnostics), `rate_limits names service account "ghost", which lush.yaml does not declare`) {
		t.Errorf("diagnostics:\n%s", render(res.Diagnostics))
	}
}
