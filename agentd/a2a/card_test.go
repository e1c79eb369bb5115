package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/policyhttp"
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

func TestCardOAuth(t *testing.T) {
	m := testManifest()
	a, _ := m.Agent("bare")
	for _, tc := range []struct {
		name, issuer, wantMetadata string
		scopes                     []string
	}{
		{name: "issuer with a path", issuer: "https://idp.example/tenant/", scopes: []string{"mcp:tools"},
			wantMetadata: "https://idp.example/.well-known/oauth-authorization-server/tenant"},
		{name: "issuer at the root", issuer: "http://127.0.0.1:4444", wantMetadata: "http://127.0.0.1:4444/.well-known/oauth-authorization-server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Card(m, a, CardOptions{BaseURL: "https://lush.example/", Revision: "r",
				OAuth: []OAuthServer{{Issuer: tc.issuer, Scopes: tc.scopes}, {Issuer: "https://second.example"}}})
			if err != nil {
				t.Fatal(err)
			}
			s, ok := c.SecuritySchemes[SchemeOAuth2].(a2a.OAuth2SecurityScheme)
			if !ok || s.Oauth2MetadataURL != tc.wantMetadata || !strings.Contains(s.Description, "https://lush.example/.well-known/oauth-protected-resource") {
				t.Fatalf("oauth2 scheme = %#v", c.SecuritySchemes[SchemeOAuth2])
			}
			if _, ok := c.SecuritySchemes["oauth2-2"].(a2a.OAuth2SecurityScheme); !ok {
				t.Errorf("no scheme for the second authorization server: %v", c.SecuritySchemes)
			}
			want := a2a.SecurityRequirements{SchemeOAuth2: a2a.SecuritySchemeScopes(tc.scopes)}
			if !slices.ContainsFunc(c.Security, func(r a2a.SecurityRequirements) bool { return reflect.DeepEqual(r, want) }) {
				t.Errorf("security = %v, want it to include %v", c.Security, want)
			}
			raw, _ := json.Marshal(c.SecuritySchemes[SchemeOAuth2])
			if !strings.Contains(string(raw), `"type":"oauth2"`) || !strings.Contains(string(raw), `"flows":{}`) {
				t.Errorf("JSON = %s", raw)
			}
		})
	}
	if _, err := Card(m, a, CardOptions{BaseURL: "https://lush.example", Revision: "r", OAuth: []OAuthServer{{Issuer: "idp"}}}); err == nil ||
		!strings.Contains(err.Error(), "oauth[0].issuer") {
		t.Errorf("err = %v, want one naming oauth[0].issuer", err)
	}
}

// devAuth authenticates every request as one principal, as dev mode does.
type devAuth struct{}

func (devAuth) Authenticate(*http.Request) (identity.Caller, error) {
	return identity.Caller{ID: "user:dev"}, nil
}

// TestPublicAndExtendedCard: an anonymous caller reads the public card (no skills); an
// authenticated one the full card, also through agent/getAuthenticatedExtendedCard; bad
// credentials are refused; an agent that is not deployed is not found either way.
func TestPublicAndExtendedCard(t *testing.T) {
	srv, _ := serve(t)
	get := func(t *testing.T, url, authorization string) (int, *a2a.AgentCard) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var card a2a.AgentCard
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&card); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, &card
	}
	for _, tc := range []struct {
		name, agent, authorization string
		status, skills             int // skills: -1 for the full card's
	}{
		{name: "anonymous", agent: "triage", status: http.StatusOK, skills: 0},
		{name: "authenticated", agent: "triage", authorization: "Bearer user:alice", status: http.StatusOK, skills: -1},
		{name: "bad credentials", agent: "triage", authorization: "Basic eDp5", status: http.StatusUnauthorized},
		{name: "anonymous, unknown agent", agent: "nobody", status: http.StatusNotFound},
		{name: "authenticated, unknown agent", agent: "nobody", authorization: "Bearer user:alice", status: http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, card := get(t, srv.URL+CardPath(tc.agent), tc.authorization)
			if status != tc.status {
				t.Fatalf("status = %d, want %d", status, tc.status)
			}
			if status != http.StatusOK {
				return
			}
			if card.Name != tc.agent || card.URL != srv.URL+EndpointPath(tc.agent) || !card.SupportsAuthenticatedExtendedCard ||
				card.SecuritySchemes[SchemeBearer] == nil || len(card.Security) == 0 || card.Version != "rev1" || !card.Capabilities.Streaming {
				t.Errorf("card lacks what anyone may read: %+v", card)
			}
			if tc.skills == 0 && (card.Skills == nil || len(card.Skills) != 0) {
				t.Errorf("public card skills = %v, want an empty list", card.Skills)
			}
			if tc.skills == -1 && len(card.Skills) == 0 {
				t.Error("the full card has no skills")
			}
		})
	}

	// An A2A client that got the public card asks for the extended one (it is authenticated).
	pub, err := agentcard.NewResolver(http.DefaultClient).Resolve(t.Context(), srv.URL+"/agents/triage")
	if err != nil || len(pub.Skills) != 0 {
		t.Fatalf("public card: %v, %v", pub, err)
	}
	cl, err := a2aclient.NewFromCard(t.Context(), pub, a2aclient.WithJSONRPCTransport(&http.Client{Transport: bearer{"user:alice"}}))
	if err != nil {
		t.Fatal(err)
	}
	full, err := cl.GetAgentCard(t.Context())
	if err != nil || full.Name != "triage" || len(full.Skills) == 0 {
		t.Fatalf("extended card: %+v, %v", full, err)
	}
	// Without credentials the JSON-RPC endpoint, extended card included, stays closed.
	anon, err := a2aclient.NewFromCard(t.Context(), pub, a2aclient.WithJSONRPCTransport(http.DefaultClient))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.GetAgentCard(t.Context()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("anonymous extended card: err = %v, want 401", err)
	}

	// A gate that authenticates requests without credentials (dev mode, a trusted proxy) serves
	// them the full card.
	mux := http.NewServeMux()
	dev := httptest.NewServer(mux)
	t.Cleanup(dev.Close)
	s, err := New(&fakeAgents{builds: builds{testManifest(), "rev1"}}, &policyhttp.Gate{Auth: devAuth{}}, CardOptions{BaseURL: dev.URL})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/", s.Handler())
	if status, card := get(t, dev.URL+CardPath("triage"), ""); status != http.StatusOK || len(card.Skills) == 0 {
		t.Fatalf("dev mode: status %d, skills %v; want the full card", status, card.Skills)
	}
}
