package test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOneCompositionRoot: lushctl gateway and lushctl run build their processes through the same
// code (cmd/lushctl/stack), so every enforcement point of either process logs its decisions with
// the same labels: the instance (the host name), the version and the environment. The approvals
// and budgets APIs of lushctl gateway once logged no instance id.
func TestOneCompositionRoot(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Fatalf("host name: %q %v", host, err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"gateway", []string{"gateway"}},
		{"run", []string{"run", "--provider", "scripted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := approvalProject(t, "1m")
			logPath := filepath.Join(t.TempDir(), "decisions.db")
			ready := filepath.Join(t.TempDir(), "ready")
			args := append(tc.args, "--config", filepath.Join(dir, "gateway.yaml"), "--listen", "127.0.0.1:0", "--ready-file", ready,
				"--decision-log", logPath, "--environment", "staging", dir)
			p := startProc(t, nil, lushctlBin, args...)
			base := readyURL(t, p, ready)
			for _, path := range []string{"/approvals", "/budgets"} {
				for _, key := range []string{"sam-key-01234567890", "alice-key-0123456789"} {
					req, _ := http.NewRequest("GET", base+path, nil)
					req.Header.Set("X-API-Key", key)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.Header.Get("X-Lush-Decision-Id") == "" {
						t.Errorf("GET %s: %s without a decision id", path, resp.Status)
					}
				}
			}
			if code := p.stop(t); code != 0 {
				t.Fatalf("lushctl %s exited %d:\n%s", tc.name, code, p.out.String())
			}
			points := map[string]int{}
			for _, r := range readDecisions(t, logPath) {
				ev := r.Event
				points[ev.Point]++
				if ev.Labels["id"] != host || ev.Labels["version"] == "" || ev.Labels["environment"] != "staging" || ev.Environment != "staging" {
					t.Errorf("%s decision %s (%s) is labelled %v, environment %q; want id %q, a version, environment staging",
						ev.Point, ev.DecisionID, ev.Action, ev.Labels, ev.Environment, host)
				}
			}
			if points["approvals-api"] != 2 || points["budgets-api"] != 2 {
				t.Errorf("decisions by enforcement point: %v; want 2 of approvals-api and of budgets-api", points)
			}
		})
	}
}

// readyURL waits for a process started with --ready-file to write its address there.
func readyURL(t *testing.T, p *proc, ready string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if addr, err := os.ReadFile(ready); err == nil && len(addr) > 0 {
			return "http://" + strings.TrimSpace(string(addr))
		}
		select {
		case <-p.done:
			t.Fatalf("process exited before serving:\n%s", p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("process did not serve within a minute:\n%s", p.out.String())
	return ""
}
