package a2a

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"github.com/lush-agents/lush/internal/manifest"
)

func testManifest() *manifest.Manifest {
	return &manifest.Manifest{
		Agents: []manifest.Agent{
			{Name: "triage", Description: "Sorts incoming issues.", Skills: []string{"skills/labels"},
				Tools: []manifest.AllowedTool{
					{Ref: "mcp://github", Access: "read", Only: []string{"get_issue", "list_issues"}},
					{Ref: "lush://fixer", Access: "write"},
				}},
			{Name: "bare", Description: strings.Repeat("é", maxDescription)},
			{Name: "broken", Skills: []string{"skills/missing"}},
		},
		Skills: []manifest.Skill{{Ref: "skills/labels", Name: "labels", Description: "Applies the project's labels."}},
	}
}

func TestCard(t *testing.T) {
	m := testManifest()
	for _, tc := range []struct {
		name    string
		agent   string
		opts    CardOptions
		wantErr string
		check   func(t *testing.T, c *a2a.AgentCard)
	}{
		{name: "skills and tools", agent: "triage", opts: CardOptions{BaseURL: "https://lush.example/api/", Revision: "abc"},
			check: func(t *testing.T, c *a2a.AgentCard) {
				if c.Name != "triage" || c.Description != "Sorts incoming issues." || c.Version != "abc" {
					t.Errorf("name, description, version = %q, %q, %q", c.Name, c.Description, c.Version)
				}
				if c.URL != "https://lush.example/api/agents/triage/a2a" || c.PreferredTransport != a2a.TransportProtocolJSONRPC {
					t.Errorf("url, transport = %q, %q", c.URL, c.PreferredTransport)
				}
				if !c.Capabilities.Streaming {
					t.Error("streaming is not declared")
				}
				var ids []string
				for _, s := range c.Skills {
					ids = append(ids, s.ID+"|"+strings.Join(s.Tags, ","))
				}
				want := "skill:skills/labels|skill tool:mcp://github|tool,read tool:lush://fixer|tool,write"
				if got := strings.Join(ids, " "); got != want {
					t.Errorf("skills = %s, want %s", got, want)
				}
				if c.Skills[0].Description != "Applies the project's labels." || c.Skills[1].Description != "calls mcp://github (get_issue, list_issues)" {
					t.Errorf("skill descriptions = %q, %q", c.Skills[0].Description, c.Skills[1].Description)
				}
				if _, ok := c.SecuritySchemes[SchemeBearer].(a2a.HTTPAuthSecurityScheme); !ok || len(c.SecuritySchemes) != 1 || len(c.Security) != 1 {
					t.Errorf("security = %v, %v; want bearer only", c.SecuritySchemes, c.Security)
				}
			}},
		{name: "issuers", agent: "bare", opts: CardOptions{BaseURL: "http://127.0.0.1:8080", Revision: "r", APIKeys: true, Issuers: []string{"https://idp.example/", "https://other.example"}},
			check: func(t *testing.T, c *a2a.AgentCard) {
				if len(c.Skills) != 0 || c.Skills == nil {
					t.Errorf("skills = %#v, want empty and not null", c.Skills)
				}
				if len(c.Description) > maxDescription+len("…") || !strings.HasSuffix(c.Description, "…") {
					t.Errorf("description of %d bytes is not cut", len(c.Description))
				}
				oidc, ok := c.SecuritySchemes["oidc-2"].(a2a.OpenIDConnectSecurityScheme)
				key, _ := c.SecuritySchemes[SchemeAPIKey].(a2a.APIKeySecurityScheme)
				if key.Name != "X-API-Key" || key.In != a2a.APIKeySecuritySchemeInHeader {
					t.Errorf("apiKey scheme = %+v", key)
				}
				if !ok || oidc.OpenIDConnectURL != "https://other.example/.well-known/openid-configuration" || len(c.Security) != 4 {
					t.Errorf("security = %v, %v", c.SecuritySchemes, c.Security)
				}
			}},
		{name: "no base url", agent: "triage", opts: CardOptions{Revision: "r"}, wantErr: "base_url"},
		{name: "relative base url", agent: "triage", opts: CardOptions{BaseURL: "/api", Revision: "r"}, wantErr: "base_url"},
		{name: "no revision", agent: "triage", opts: CardOptions{BaseURL: "http://h"}, wantErr: "revision"},
		{name: "bad issuer", agent: "triage", opts: CardOptions{BaseURL: "http://h", Revision: "r", Issuers: []string{"idp"}}, wantErr: "issuers[0]"},
		{name: "unknown skill", agent: "broken", opts: CardOptions{BaseURL: "http://h", Revision: "r"}, wantErr: `skills: "skills/missing"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := m.Agent(tc.agent)
			c, err := Card(m, a, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

type builds struct {
	m    *manifest.Manifest
	hash string
}

func (b builds) Deployed() (*manifest.Manifest, string, bool) { return b.m, b.hash, b.m != nil }

// TestCardHandler reads the card the way an A2A client does, with a2a-go's resolver.
func TestCardHandler(t *testing.T) {
	for _, tc := range []struct {
		name   string
		b      builds
		agent  string
		status int // 0: the card resolves
	}{
		{name: "served", b: builds{testManifest(), "rev1"}, agent: "triage"},
		{name: "unknown agent", b: builds{testManifest(), "rev1"}, agent: "nobody", status: http.StatusNotFound},
		{name: "no build", agent: "triage", status: http.StatusServiceUnavailable},
		{name: "bad manifest", b: builds{testManifest(), "rev1"}, agent: "broken", status: http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			srv := httptest.NewServer(mux)
			defer srv.Close()
			mux.Handle("GET /agents/{agent}/a2a/.well-known/agent-card.json", CardHandler(tc.b, CardOptions{BaseURL: srv.URL}))
			card, err := agentcard.NewResolver(srv.Client()).Resolve(context.Background(), srv.URL+EndpointPath(tc.agent))
			if tc.status != 0 {
				var bad *agentcard.ErrStatusNotOK
				if !errors.As(err, &bad) || bad.StatusCode != tc.status {
					t.Fatalf("err = %v, want status %d", err, tc.status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if card.Name != tc.agent || card.Version != tc.b.hash || card.URL != srv.URL+EndpointPath(tc.agent) || len(card.Skills) != 3 {
				t.Errorf("card = %+v", card)
			}
		})
	}
}
