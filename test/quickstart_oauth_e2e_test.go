package test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"
)

// TestQuickstartGatewayIsAProtectedResource starts the quickstart's gateway as the README does
// (`lushctl gateway --config examples/quickstart/gateway.yaml examples/quickstart`, here on a free
// port), with its authorization server (the demo's, http://127.0.0.1:4444) not running: the
// protected resource metadata of an agent's endpoint names that server and the scope, an
// unauthenticated call's 401 names the metadata, and the API keys work next to OAuth.
func TestQuickstartGatewayIsAProtectedResource(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "quickstart")
	if err := os.CopyFS(dir, os.DirFS("../examples/quickstart")); err != nil {
		t.Fatal(err)
	}
	_ = os.RemoveAll(filepath.Join(dir, ".lush"))
	base, _ := startGateway(t, dir, "--config", filepath.Join(dir, "gateway.yaml"))
	resource := base + "/agents/researcher/mcp"
	metadata := base + "/.well-known/oauth-protected-resource/agents/researcher/mcp"

	resp, err := http.Get(metadata)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		Scopes               []string `json:"scopes_supported"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &prm) != nil {
		t.Fatalf("GET %s: %d %s", metadata, resp.StatusCode, body)
	}
	if prm.Resource != resource || !slices.Equal(prm.AuthorizationServers, []string{"http://127.0.0.1:4444"}) || !slices.Equal(prm.Scopes, []string{"mcp:tools"}) {
		t.Errorf("metadata %s: want resource %s, the demo's authorization server and scope mcp:tools", body, resource)
	}

	resp, err = http.Post(resource, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	challenge := resp.Header.Get("WWW-Authenticate")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(challenge, `resource_metadata="`+metadata+`"`) || !strings.Contains(challenge, `scope="mcp:tools"`) {
		t.Errorf("unauthenticated call: %d, WWW-Authenticate %q; want 401 naming %s and the scope", resp.StatusCode, challenge, metadata)
	}

	// bob's API key (a published demo key) works while the authorization server is down.
	c := goClient(t, resource, transport.WithHTTPHeaders(map[string]string{"X-API-Key": "demo-bob-key-not-a-secret"}))
	if text, isErr := call(t, c, "search_files", map[string]any{"path": filepath.Join(dir, "data"), "pattern": "q3"}); isErr {
		t.Errorf("bob's search with his API key: %s", text)
	}
}
