package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// The config file maps onto Config; unknown fields name their line, and bad values their field.
func TestLoadConfig(t *testing.T) {
	write := func(content string) string {
		p := filepath.Join(t.TempDir(), "gateway.yaml")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := gateway.LoadConfig(write(`listen: 127.0.0.1:9000
live_writes: [mcp://notes.internal/mcp]
ext_authz:
  listen: 127.0.0.1:9191
  socket: /run/lush/ext_authz.sock
  identity:
    jwt_metadata: {principal_kind: serviceaccount, groups_claim: roles}
    spiffe:
      - {prefix: "spiffe://example.org/ns/agents/sa/", principal: "serviceaccount:{name}", groups: [group:agents]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ExtAuthz.Listen != "127.0.0.1:9191" || cfg.ExtAuthz.Socket != "/run/lush/ext_authz.sock" || !cfg.ExtAuthz.Enabled() ||
		cfg.ExtAuthz.Identity.JWTMetadata.PrincipalKind != "serviceaccount" || cfg.ExtAuthz.Identity.SPIFFE[0].Groups[0] != "group:agents" ||
		!cfg.LiveWrites.Live("mcp://notes.internal/mcp") {
		t.Errorf("config %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}

	// limits.arguments: set fields are kept, unset ones are the defaults, and errors name the
	// setting.
	cfg, err = gateway.LoadConfig(write("limits:\n  arguments:\n    max_depth: 16\n    max_bytes: 65536\n"))
	if err != nil || cfg.Validate() != nil {
		t.Fatal(err, cfg.Validate())
	}
	if lim := cfg.ArgumentLimits(); lim.MaxDepth != 16 || lim.MaxNodes != jsonlimit.DefaultMaxNodes || lim.MaxBytes != 65536 ||
		lim.Setting != "gateway config limits.arguments" {
		t.Errorf("argument limits %+v", lim)
	}

	if _, err := gateway.LoadConfig(write("ext_authz:\n  listen: 127.0.0.1:9191\n  adress: x\n")); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("an unknown field: %v", err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"ext_authz:\n  listen: 9191\n", "ext_authz.listen"},
		{"ext_authz:\n  socket: ext_authz.sock\n", "ext_authz.socket"},
		{"ext_authz:\n  listen: 127.0.0.1:1\n  identity:\n    spiffe: [{prefix: \"https://x/\", principal: user:a}]\n", "ext_authz.identity.spiffe[0]"},
		{"limits:\n  arguments:\n    max_depth: -1\n", "limits.arguments.max_depth: -1 is not between 1 and 10000"},
		{"limits:\n  arguments:\n    max_depth: 20000\n", "limits.arguments.max_depth: 20000 is not between 1 and 10000"},
		{"limits:\n  arguments:\n    max_nodes: -1\n", "limits.arguments.max_nodes: -1 must be positive"},
		{"limits:\n  arguments:\n    max_bytes: -1\n", "limits.arguments.max_bytes: -1 must be positive"},
		{"limits:\n  arguments:\n    max_dept: 8\n", "line 3: field max_dept not found"},
		{"limits:\n  decision_timeout: -1s\n", "limits.decision_timeout: -1s is not between 0 (the default, 500ms) and 1m0s"},
		{"limits:\n  decision_timeout: 2m\n", "limits.decision_timeout: 2m0s is not between 0"},
	} {
		cfg, err := gateway.LoadConfig(write(tc.yaml))
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// limits.decision_timeout is the policy's deadline: with an impossible one every decision times
// out, and the gateway fails closed (the call is denied, and logged as an evaluation error).
func TestDecisionTimeoutApplies(t *testing.T) {
	h := start(t, gateway.Config{Limits: gateway.LimitsConfig{DecisionTimeout: time.Nanosecond}})
	if tools := toolNames(t, h.client("assistant", aliceKey)); len(tools) != 0 {
		t.Errorf("tools offered although every decision timed out: %v", tools)
	}
	recs := h.events(decisionlog.Filter{Principal: "user:alice", Action: "tools/list"})
	if len(recs) == 0 || recs[0].Event.Outcome != "error" || !strings.Contains(recs[0].Event.Error, "deadline") {
		t.Fatalf("decisions: %d, first %+v", len(recs), recs)
	}
}
