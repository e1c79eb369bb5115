package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/lush-agents/lush/gateway"
)

// /health names the MCP version the gateway speaks with each upstream server (both of the test
// project's, on mcp-go, speak 2026-07-28).
func TestHealthNamesUpstreamProtocols(t *testing.T) {
	h := start(t, gateway.Config{})
	resp, err := http.Get(h.srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var health struct {
		Upstreams map[string]struct {
			Up       bool
			Protocol string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&health); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"mcp://tests.internal/mcp", "mcp://stdio/bin/server"} {
		if u := health.Upstreams[ref]; !u.Up || u.Protocol != "2026-07-28" {
			t.Errorf("%s: %+v (all: %+v)", ref, u, health.Upstreams)
		}
	}
}
