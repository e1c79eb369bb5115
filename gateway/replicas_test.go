package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// alternating sends each request to the next of several servers.
type alternating struct {
	targets []*url.URL
	n       atomic.Int64
	seen    []atomic.Int64
}

func (a *alternating) RoundTrip(r *http.Request) (*http.Response, error) {
	i := int(a.n.Add(1)-1) % len(a.targets)
	a.seen[i].Add(1)
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = a.targets[i].Scheme, a.targets[i].Host, a.targets[i].Host
	return http.DefaultTransport.RoundTrip(r)
}

// TestTwoReplicasServeOneClient: session ids are signed with a key the replicas share, so a
// client may reach either replica with any request, without sticky sessions.
func TestTwoReplicasServeOneClient(t *testing.T) {
	h := start(t, gateway.Config{})
	keyFile := filepath.Join(t.TempDir(), "session.key")
	if err := os.WriteFile(keyFile, []byte("a-shared-session-key-of-at-least-32-bytes!!"), 0o600); err != nil {
		t.Fatal(err)
	}
	var servers []*url.URL
	for range 2 {
		ctx := context.Background()
		auth, err := identity.New(ctx, identity.Config{APIKeys: []identity.APIKeyConfig{{Name: "alice", SHA256: sha(aliceKey), Principal: "user:alice", Groups: []string{"group:eng"}}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { auth.Close() })
		log, err := decisionlog.Open(ctx, filepath.Join(t.TempDir(), "d.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { log.Close() })
		gw, err := gateway.New(gateway.Config{SessionKeyFile: keyFile}, gateway.Options{ProjectDir: h.dir, Policy: enforce.NewPolicy(enforce.Config{Log: log}), Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gw.Close)
		(&harness{t: t, gw: gw}).deploy(h.dir)
		if err := gw.WaitUpstreams(ctx); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(gw.Handler())
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		servers = append(servers, u)
	}
	rt := &alternating{targets: servers, seen: make([]atomic.Int64, 2)}
	c, err := client.NewStreamableHttpClient(servers[0].String()+"/agents/assistant/mcp",
		transport.WithHTTPBasicClient(&http.Client{Transport: rt}), transport.WithHTTPHeaders(map[string]string{"X-API-Key": aliceKey}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if len(toolNames(t, c)) == 0 {
			t.Fatalf("request %d: no tools", i)
		}
		if res := callTool(t, c, "tests__echo", map[string]any{"text": "r"}); res.IsError {
			t.Fatalf("request %d: %s", i, text(res))
		}
	}
	if rt.seen[0].Load() < 5 || rt.seen[1].Load() < 5 {
		t.Errorf("requests per replica: %d, %d", rt.seen[0].Load(), rt.seen[1].Load())
	}
}

func TestLegacySSETransport(t *testing.T) {
	h := start(t, gateway.Config{})
	c, err := client.NewSSEMCPClient(h.srv.URL+"/agents/assistant/sse", transport.WithHeaders(map[string]string{"X-API-Key": aliceKey}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2024-11-05"}}); err != nil {
		t.Fatal(err)
	}
	if res := callTool(t, c, "tests__echo", map[string]any{"text": "over sse"}); res.IsError || text(res) != "over sse" {
		t.Fatalf("echo over SSE = %+v", res)
	}
	bob, _ := client.NewSSEMCPClient(h.srv.URL+"/agents/assistant/sse", transport.WithHeaders(map[string]string{"X-API-Key": bobKey}))
	if err := bob.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	bob.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2024-11-05"}})
	if res := callTool(t, bob, "tests__echo", map[string]any{"text": "x"}); !res.IsError {
		t.Error("bob's call over SSE was not denied")
	}
}
