package identity

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/lush-agents/lush/internal/toolref"
)

// MetadataPath is where RFC 9728 protected resource metadata is served: the metadata of the
// resource <resource_url><path> is at <resource_url>/.well-known/oauth-protected-resource<path>.
const MetadataPath = "/.well-known/oauth-protected-resource"

// ResourcePath is the protected resource an HTTP request path belongs to, as a path below
// auth.resource_url. Each MCP endpoint is a resource of its own, named by its streamable HTTP
// URL: /agents/<name>/mcp (and /gateway/agents/<name>/mcp where agentd serves /agents/), whose
// legacy /sse and /message paths belong to it too. Every other path belongs to the server
// itself: "".
func ResourcePath(p string) string {
	rest, ok := strings.CutPrefix(p, "/gateway")
	if !ok {
		rest = p
	}
	name, ok := strings.CutPrefix(rest, "/agents/")
	if !ok {
		return ""
	}
	name, last, ok := strings.Cut(name, "/")
	if !ok || !toolref.ValidAgentName(name) || strings.Contains(last, "/") {
		return ""
	}
	switch last {
	case "mcp", "sse", "message":
		return strings.TrimSuffix(p, last) + "mcp"
	}
	return ""
}

// ResourceAgent is the agent whose MCP endpoint a resource path (ResourcePath) is, and whether
// it is the gateway's (/gateway/agents/<name>/mcp) rather than /agents/<name>/mcp.
func ResourceAgent(path string) (agent string, gatewayPrefix, ok bool) {
	rest, gatewayPrefix := strings.CutPrefix(path, "/gateway")
	name, ok := strings.CutPrefix(rest, "/agents/")
	if !ok {
		return "", false, false
	}
	name, ok = strings.CutSuffix(name, "/mcp")
	if !ok || !toolref.ValidAgentName(name) {
		return "", false, false
	}
	return name, gatewayPrefix, true
}

// OAuth reports whether the Authenticator accepts OAuth access tokens (auth.oauth).
func (a *Authenticator) OAuth() bool { return len(a.oauth) > 0 }

// ResourceURL is the identifier of the protected resource at path (ResourcePath).
func (a *Authenticator) ResourceURL(path string) string { return a.resourceURL + path }

// scopes are the scopes every configured authorization server requires, in order, unique.
func (a *Authenticator) scopes() []string {
	var out []string
	for _, o := range a.oauth {
		for _, s := range o.cfg.Scopes {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// ResourceMetadata is an RFC 9728 protected resource metadata document.
type ResourceMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	ScopesSupported        []string `json:"scopes_supported,omitempty"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

// Metadata is the protected resource metadata of the resource at path (ResourcePath), false
// when OAuth is not configured.
func (a *Authenticator) Metadata(path string) (ResourceMetadata, bool) {
	if !a.OAuth() {
		return ResourceMetadata{}, false
	}
	md := ResourceMetadata{Resource: a.ResourceURL(path), ScopesSupported: a.scopes(), BearerMethodsSupported: []string{"header"}, ResourceName: "Lush"}
	for _, o := range a.oauth {
		md.AuthorizationServers = append(md.AuthorizationServers, o.cfg.Issuer)
	}
	if agent, gw, ok := ResourceAgent(path); ok {
		md.ResourceName = "Lush agent " + agent
		if gw {
			md.ResourceName = "Lush gateway: the tools of agent " + agent
		}
	}
	return md, true
}

// Challenge is the WWW-Authenticate value (RFC 6750, RFC 9728) of a request to r refused with
// err: it names the resource's metadata and the scopes to ask for, and says why a presented
// token was refused (invalid_token, insufficient_scope). False when OAuth is not configured.
func (a *Authenticator) Challenge(r *http.Request, err error) (string, bool) {
	if !a.OAuth() {
		return "", false
	}
	path := ResourcePath(r.URL.Path)
	params := []string{`realm="lush"`}
	var ie *Error
	if errors.As(err, &ie) {
		switch ie.Code {
		case CodeInsufficientScope:
			params = append(params, `error="insufficient_scope"`)
		case CodeInvalidToken, CodeExpiredToken, CodeUnknownAPIKey, CodeForbiddenAgent:
			params = append(params, `error="invalid_token"`)
		case CodeInvalidRequest:
			params = append(params, `error="invalid_request"`)
		}
	}
	params = append(params, `resource_metadata="`+a.resourceURL+MetadataPath+path+`"`)
	if s := a.scopes(); len(s) > 0 {
		params = append(params, `scope="`+strings.Join(s, " ")+`"`)
	}
	return "Bearer " + strings.Join(params, ", "), true
}
