package perf

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestHotPath is the measurement (`make bench-gateway`): it runs only with LUSH_PERF=1, since
// it takes a few minutes and its figures mean something only on a machine doing little else.
// LUSH_PERF_OUT names a file that receives the report too.
func TestHotPath(t *testing.T) {
	if os.Getenv("LUSH_PERF") != "1" {
		t.Skip("a measurement, not a test: run it with make bench-gateway (LUSH_PERF=1)")
	}
	rep := run(t, configFromEnv(t))
	var out io.Writer = os.Stdout
	if path := os.Getenv("LUSH_PERF_OUT"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		out = io.MultiWriter(os.Stdout, f)
	}
	rep.write(out, command())
}

// command is how this run was started, with the settings that were not the defaults.
func command() string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LUSH_PERF_") && !strings.HasPrefix(kv, "LUSH_PERF_OUT=") {
			env = append(env, kv)
		}
	}
	return strings.TrimSpace(strings.Join(env, " ") + " make bench-gateway")
}

// TestSmoke runs the whole harness with sub-second windows and few clients, so that it cannot
// rot: every process starts, every path answers, every figure is there. It asserts nothing
// about time.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lushctl and starts five processes")
	}
	cfg := config{duration: 200 * time.Millisecond, clients: []int{1, 4}, rate: 200, authzDuration: 200 * time.Millisecond,
		decisionDuration: 50 * time.Millisecond,
		decisionTimeout:  "1m"} // as test/projecttest's engines: a loaded CI machine must not turn the checks into denials
	rep := run(t, cfg)
	for _, n := range cfg.clients {
		for _, name := range []string{direct, bare, gw, gwArgs} {
			if r := rep.load[n][name]; r.calls == 0 || len(r.lat) != r.calls {
				t.Errorf("%d clients, %s: %d calls, %d latencies", n, name, r.calls, len(r.lat))
			}
		}
	}
	for _, name := range []string{noopSrv, lushEA, lushEAA} {
		if r := rep.authz[name]; r.calls == 0 {
			t.Errorf("ext_authz %s: no Checks", name)
		}
	}
	for i := range 2 {
		if rep.bundle[i].evals == 0 || rep.rbac[i].evals == 0 {
			t.Errorf("decision %d: %d bundle and %d RBAC evaluations", i, rep.bundle[i].evals, rep.rbac[i].evals)
		}
	}
	var b strings.Builder
	rep.write(&b, "go test ./test/perf -run Smoke")
	for _, row := range []string{"one decision", "gateway CPU per call", "gateway throughput", "reads the arguments", "added p50", "ext_authz at", "argument-reading policy"} {
		if !strings.Contains(b.String(), row) {
			t.Errorf("the report has no row %q:\n%s", row, b.String())
		}
	}
	t.Log(b.String())
}
