package perf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// argPolicyMessage is the argument policy's reason for a denial.
const argPolicyMessage = "echo may not name a path under /etc/"

// The gateway's one API key: alice, in group:eng, which may read the echo server.
const apiKey = "perf-alice-key-0123456789"

// The project the gateway serves: one agent (bench) with the echo server's tools, echo a read,
// live writes off (irrelevant: echo is a read). argPolicy adds a project policy that reads every
// call's arguments (it denies echoing a path under /etc/), so that each call with new arguments
// misses the decision cache. decisionTimeout, when not "", is the gateway's
// limits.decision_timeout (the default, 500 ms, is what users run).
func writeProject(t testing.TB, upstream string, argPolicy bool, decisionTimeout string) string {
	t.Helper()
	files := map[string]string{
		"lush.yaml": `project: perf
servers:
  mcp://echo.internal/mcp:
    url: ` + upstream + `
tool_classes:
  mcp://echo.internal/mcp:
    echo: read
tool_grants:
  - tool: mcp://echo.internal/mcp
    grants:
      - {principal: group:eng, access: read}
`,
		"agents/bench/spec.yaml": `name: bench
model: gemini-2.5-flash
description: Echoes.
tools:
  - server: mcp://echo.internal/mcp
    access: read
acl:
  - principal: group:eng
    role: execute
`,
		"gateway.yaml": "auth:\n  api_keys:\n" +
			"    - {name: alice, sha256: " + sha256hex(apiKey) + ", principal: user:alice, groups: [group:eng]}\n",
	}
	if decisionTimeout != "" {
		files["gateway.yaml"] += "limits:\n  decision_timeout: " + decisionTimeout + "\n"
	}
	if argPolicy {
		files["policies/paths.rego"] = `# METADATA
# title: No system paths
package lush.policies.paths

# METADATA
# custom:
#   id: perf.paths.etc
deny contains {"rule": rego.metadata.rule().custom.id, "message": "` + argPolicyMessage + `"} if {
	input.action == "tools/call"
	startswith(input.arguments.text, "/etc/")
}
`
	}
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// buildLushctl builds the real lushctl (no race detector: it is what users run) into a
// temporary directory.
func buildLushctl(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lushctl")
	args := []string{"build", "-o", bin}
	if overlay := profileOverlay(t); overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	if out, err := exec.Command("go", append(args, "../../cmd/lushctl")...).CombinedOutput(); err != nil {
		t.Fatalf("build lushctl: %v\n%s", err, out)
	}
	return bin
}

// gatewayProc is a running `lushctl gateway`: its MCP base URL and its ext_authz address.
type gatewayProc struct {
	*proc
	url      string // http://127.0.0.1:port
	extAuthz string // 127.0.0.1:port
	profile  string // the directory of its profiles; "" when not profiled
}

var extAuthzLine = regexp.MustCompile(`ext_authz \(Envoy, gRPC\): (127\.0\.0\.1:\d+)`)

// startGateway runs `lushctl gateway` over the project in dir, as its own process, listening on
// loopback for MCP and for ext_authz, its decision log in a temporary directory. It is ready
// when it has written its address and named its ext_authz address, and has said that the
// decision cache is on (log level info: the gateway logs nothing per call at that level).
// profile, when not "", is the directory of its profiles (LUSH_PERF_PROFILE).
func startGateway(t testing.TB, lushctl, dir, profile string) *gatewayProc {
	t.Helper()
	tmp := t.TempDir()
	ready := filepath.Join(tmp, "ready")
	cmd := exec.Command(lushctl, "gateway", "--config", filepath.Join(dir, "gateway.yaml"),
		"--listen", "127.0.0.1:0", "--ready-file", ready, "--ext-authz", "127.0.0.1:0",
		"--decision-log", filepath.Join(tmp, "decisions.db"), "--log-level", "info", dir)
	cmd.Env = append(os.Environ(), "TRACE_BACKEND=none", "LUSH_BUILD=", "LUSH_TOKEN=", "LUSH_URL=", "LUSH_PERF_PROFILE_DIR="+profile)
	p := start(t, "lushctl gateway", cmd)
	deadline := time.Now().Add(120 * time.Second)
	for {
		addr, err := os.ReadFile(ready)
		out := p.out.String()
		if strings.Contains(out, "decision_cache=off") {
			t.Fatalf("lushctl gateway deployed its build with the decision cache off: the figures would not be the cached path's:\n%s", out)
		}
		m := extAuthzLine.FindStringSubmatch(out)
		if err == nil && len(addr) > 0 && m != nil && strings.Contains(out, "decision_cache=on") {
			a := strings.TrimSpace(string(addr))
			if !strings.HasPrefix(a, "http") {
				a = "http://" + a
			}
			return &gatewayProc{proc: p, url: a, extAuthz: m[1], profile: profile}
		}
		select {
		case <-p.done:
			t.Fatalf("lushctl gateway exited before it was ready:\n%s", p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("lushctl gateway was not ready after 2 minutes:\n%s", p.out.String())
		}
	}
}

func (g *gatewayProc) String() string {
	return fmt.Sprintf("gateway %s (ext_authz %s)", g.url, g.extAuthz)
}
