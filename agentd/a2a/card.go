// Package a2a serves Lush's agents as Agent2Agent (A2A) servers: per agent, an Agent Card at
// the A2A well-known path and the A2A JSON-RPC methods over HTTP. It sits beside agentd (which
// serves the same agents as chat and MCP endpoints) and runs each A2A message through
// agentd's one runner, Server.Invoke, as a chat is run.
package a2a

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/lush-agents/lush/internal/manifest"
)

// ProtocolVersion is the A2A protocol version the cards declare (a2a-go v0.3.3 speaks 0.3).
const ProtocolVersion = "0.3.0"

// Security scheme names in the cards.
const (
	SchemeBearer = "bearer" // "Authorization: Bearer <token>": a JWT, OAuth access token or delegation token
	SchemeAPIKey = "apiKey" // the X-API-Key header
	SchemeOAuth2 = "oauth2" // prefix of one OAuth 2.0 scheme per authorization server (auth.oauth): oauth2, oauth2-2, ...
	schemeOIDC   = "oidc"   // prefix of one OpenID Connect scheme per trusted issuer: oidc, oidc-2, ...
)

// ResourceMetadataPath is where Lush serves its RFC 9728 protected resource metadata (the
// A2A endpoints are the server's own resource: tokens for them name auth.resource_url).
const ResourceMetadataPath = "/.well-known/oauth-protected-resource"

// Limits on what a card carries, so a card stays small whatever the manifest holds.
const (
	maxSkills      = 256
	maxDescription = 2048
)

// CardOptions says where an agent is served and how callers authenticate.
type CardOptions struct {
	// BaseURL is the public URL of agentd's API (scheme and host, optionally a path prefix):
	// the agent's A2A endpoint is BaseURL/agents/{name}/a2a. Required.
	BaseURL string
	// Revision is the deployed build's hash: the card's version. Required.
	Revision string
	// APIKeys publishes the apiKey scheme (the X-API-Key header) when API keys are configured.
	APIKeys bool
	// Issuers are the OpenID Connect issuers whose tokens the gate accepts (identity config),
	// each published as an openIdConnect scheme; bearer is always published.
	Issuers []string
	// OAuth are the OAuth 2.0 authorization servers whose access tokens the gate accepts
	// (auth.oauth), each published as an oauth2 scheme.
	OAuth []OAuthServer
}

// OAuthServer is an authorization server of auth.oauth: its issuer and the scopes a token must
// carry.
type OAuthServer struct {
	Issuer string
	Scopes []string
}

// check checks the options but the revision (set per build).
func (o CardOptions) check() error {
	if !httpURL(o.BaseURL) {
		return fmt.Errorf("base_url: %q is not an http(s) URL with a host", o.BaseURL)
	}
	for i, iss := range o.Issuers {
		if !httpURL(iss) {
			return fmt.Errorf("issuers[%d]: %q is not an http(s) URL with a host", i, iss)
		}
	}
	for i, s := range o.OAuth {
		if !httpURL(s.Issuer) {
			return fmt.Errorf("oauth[%d].issuer: %q is not an http(s) URL with a host", i, s.Issuer)
		}
	}
	return nil
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// EndpointPath is the path of an agent's A2A JSON-RPC endpoint under agentd's API.
func EndpointPath(agent string) string { return "/agents/" + url.PathEscape(agent) + "/a2a" }

// CardPath is the path of an agent's Agent Card: the A2A well-known path under the agent's base
// path, /agents/{name}. It is served under the endpoint too (EndpointPath + the well-known
// path): clients differ in how they resolve the well-known path against the URL they are given.
func CardPath(agent string) string {
	return "/agents/" + url.PathEscape(agent) + "/.well-known/agent-card.json"
}

// Card is the Agent Card of agent a of manifest m: its name, its description from the spec,
// one skill per skill and per allowed tool, and the security schemes the gate accepts (any one
// of them suffices).
func Card(m *manifest.Manifest, a *manifest.Agent, o CardOptions) (*a2a.AgentCard, error) {
	if a == nil || a.Name == "" {
		return nil, errors.New("agent: required")
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Revision == "" {
		return nil, errors.New("revision: required (the deployed build's hash)")
	}
	schemes := a2a.NamedSecuritySchemes{
		SchemeBearer: a2a.HTTPAuthSecurityScheme{Scheme: "bearer", BearerFormat: "JWT",
			Description: "a JWT from a configured issuer, an OAuth access token for this resource, or a delegation token from agentd"},
	}
	security := []a2a.SecurityRequirements{{SchemeBearer: a2a.SecuritySchemeScopes{}}}
	if o.APIKeys {
		schemes[SchemeAPIKey] = a2a.APIKeySecurityScheme{In: a2a.APIKeySecuritySchemeInHeader, Name: "X-API-Key",
			Description: "an API key configured in the server's auth.api_keys"}
		security = append(security, a2a.SecurityRequirements{SchemeAPIKey: a2a.SecuritySchemeScopes{}})
	}
	for i, iss := range o.Issuers {
		name := a2a.SecuritySchemeName(schemeOIDC)
		if i > 0 {
			name = a2a.SecuritySchemeName(fmt.Sprintf("%s-%d", schemeOIDC, i+1))
		}
		schemes[name] = a2a.OpenIDConnectSecurityScheme{
			OpenIDConnectURL: strings.TrimSuffix(iss, "/") + "/.well-known/openid-configuration"}
		security = append(security, a2a.SecurityRequirements{name: a2a.SecuritySchemeScopes{}})
	}
	base := strings.TrimSuffix(o.BaseURL, "/")
	for i, srv := range o.OAuth {
		name := a2a.SecuritySchemeName(SchemeOAuth2)
		if i > 0 {
			name = a2a.SecuritySchemeName(fmt.Sprintf("%s-%d", SchemeOAuth2, i+1))
		}
		schemes[name] = a2a.OAuth2SecurityScheme{
			Description: fmt.Sprintf("an OAuth 2.0 access token of %s for the resource %s (protected resource metadata, RFC 9728: %s)",
				srv.Issuer, base, base+ResourceMetadataPath),
			Flows:             a2a.OAuthFlows{},
			Oauth2MetadataURL: authServerMetadataURL(srv.Issuer),
		}
		security = append(security, a2a.SecurityRequirements{name: a2a.SecuritySchemeScopes(slices.Clone(srv.Scopes))})
	}
	skills, err := skillsOf(m, a)
	if err != nil {
		return nil, err
	}
	endpoint := base + EndpointPath(a.Name)
	return &a2a.AgentCard{
		Name:               a.Name,
		Description:        bounded(a.Description, maxDescription),
		URL:                endpoint,
		PreferredTransport: a2a.TransportProtocolJSONRPC,
		ProtocolVersion:    ProtocolVersion,
		Version:            o.Revision,
		Capabilities:       a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes:  []string{"text/plain"},
		DefaultOutputModes: []string{"text/plain"},
		Skills:             skills,
		SecuritySchemes:    schemes,
		Security:           security,
		// An anonymous caller gets PublicCard; an authenticated one this card, also as the
		// answer to agent/getAuthenticatedExtendedCard.
		SupportsAuthenticatedExtendedCard: true,
	}, nil
}

// PublicCard is what anyone may read of a card: who the agent is, where and how to call it —
// its name, description, endpoint, version, capabilities and security schemes — without its
// skills and tools, which only an authenticated caller sees (the extended card).
func PublicCard(full *a2a.AgentCard) *a2a.AgentCard {
	pub := *full
	pub.Skills = []a2a.AgentSkill{}
	pub.Signatures = nil
	return &pub
}

// authServerMetadataURL is the RFC 8414 metadata URL of an issuer: the well-known path inserted
// between the host and the issuer's path.
func authServerMetadataURL(issuer string) string {
	u, err := url.Parse(issuer)
	if err != nil {
		return ""
	}
	u.Path, u.RawPath = "/.well-known/oauth-authorization-server"+strings.TrimSuffix(u.Path, "/"), ""
	return u.String()
}

// skillsOf derives an agent's A2A skills: its skills (as resolved in the manifest), then the
// tools it may call (tagged with their access class), in manifest order.
func skillsOf(m *manifest.Manifest, a *manifest.Agent) ([]a2a.AgentSkill, error) {
	skills := []a2a.AgentSkill{}
	for _, ref := range a.Skills {
		i := slices.IndexFunc(m.Skills, func(s manifest.Skill) bool { return s.Ref == ref })
		if i < 0 {
			return nil, fmt.Errorf("agent %s: skills: %q is not among the manifest's skills", a.Name, ref)
		}
		s := m.Skills[i]
		skills = append(skills, a2a.AgentSkill{ID: "skill:" + s.Ref, Name: s.Name, Description: bounded(s.Description, maxDescription),
			Tags: []string{"skill"}})
	}
	for _, t := range a.Tools {
		desc := "calls " + t.Ref
		if len(t.Only) > 0 {
			desc += " (" + strings.Join(t.Only, ", ") + ")"
		}
		skills = append(skills, a2a.AgentSkill{ID: "tool:" + t.Ref, Name: t.Ref, Description: bounded(desc, maxDescription),
			Tags: []string{"tool", t.Access}})
	}
	if len(skills) > maxSkills {
		return nil, fmt.Errorf("agent %s: %d skills and tools, more than an Agent Card carries (%d)", a.Name, len(skills), maxSkills)
	}
	return skills, nil
}

// bounded cuts s to n bytes at a rune boundary, marking the cut.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}
