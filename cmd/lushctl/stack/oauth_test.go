package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/examples/authserver/authserver"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/test/authtest"
)

// TestOAuthProtectedResources: a process with agentd (lushctl run/serve) and auth.oauth against
// the real authorization server (Hydra) serves the RFC 9728 metadata of agentd's and the
// gateway's endpoints of the deployed agents only, answers 401 with the challenge naming each
// endpoint's own metadata, and accepts a client-credentials token at the endpoint it was issued
// for (agentd's researcher, the lush:// agent) and nowhere else.
func TestOAuthProtectedResources(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	base := "http://" + addr
	agentEndpoint := base + "/agents/researcher/mcp"
	as := authtest.Start(t, authtest.WithAllowedResources(agentEndpoint), authtest.WithScopes("mcp:tools"))
	h := start(t, harnessOpts{gw: func(c *gateway.Config) {
		c.Listen = addr
		c.Auth.OAuth = []identity.OAuthConfig{{Issuer: as.Issuer(), Scopes: []string{"mcp:tools"}}}
	}})
	if h.st.URL() != base {
		t.Fatalf("the stack listens at %s, not %s", h.st.URL(), base)
	}

	md := base + identity.MetadataPath
	for _, tt := range []struct {
		path, resource string
		status         int
	}{
		{"/agents/researcher/mcp", agentEndpoint, 200},
		{"/gateway/agents/researcher/mcp", base + "/gateway/agents/researcher/mcp", 200},
		{"", base, 200},
		{"/agents/nobody/mcp", "", 404},
		{"/agents/researcher/chat", "", 404},
	} {
		code, body := h.get(identity.MetadataPath+tt.path, "")
		var got identity.ResourceMetadata
		json.Unmarshal(body, &got)
		if code != tt.status || got.Resource != tt.resource || (code == 200 && (len(got.AuthorizationServers) != 1 || got.AuthorizationServers[0] != as.Issuer())) {
			t.Errorf("metadata of %q: %d %s", tt.path, code, body)
		}
	}

	for _, path := range []string{"/agents/researcher/mcp", "/gateway/agents/researcher/mcp", "/agents/researcher/chat", "/approvals"} {
		var resp *http.Response
		if path == "/approvals" {
			if resp, err = http.Get(base + path); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		} else {
			resp = oauthPost(t, base+path, "")
		}
		want := `Bearer realm="lush", resource_metadata="` + md + identity.ResourcePath(path) + `", scope="mcp:tools"`
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != want {
			t.Errorf("%s without a token: %d %q, want 401 %q", path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := as.CreateClient(ctx, authserver.Client{ID: "notes-bot", Secret: "notes-bot-secret-0123456789", GrantTypes: []string{"client_credentials"},
		ResponseTypes: []string{}, Scopes: []string{"mcp:tools"}, Audience: []string{agentEndpoint}}); err != nil {
		t.Fatal(err)
	}
	tok, err := as.ClientCredentialsToken(ctx, "notes-bot", "notes-bot-secret-0123456789", []string{agentEndpoint}, "mcp:tools")
	if err != nil {
		t.Fatal(err)
	}
	if resp := oauthPost(t, agentEndpoint, tok.AccessToken); resp.StatusCode != http.StatusOK {
		t.Errorf("the token at agentd's researcher endpoint: %d", resp.StatusCode)
	}
	for _, path := range []string{"/gateway/agents/researcher/mcp", "/agents/orchestrator/mcp"} {
		resp := oauthPost(t, base+path, tok.AccessToken)
		if c := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(c, `error="invalid_token"`) {
			t.Errorf("the researcher's token at %s: %d %q", path, resp.StatusCode, c)
		}
	}
	if strings.Contains(h.logs.String(), tok.AccessToken) {
		t.Error("the stack's log holds the access token")
	}
}

// oauthPost sends an MCP initialize to u with token ("" for none).
func oauthPost(t *testing.T, u, token string) *http.Response {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", fmt.Sprintf("Bearer %s", token))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}
