// Package mesh describes a build as a service mesh sees it: the HTTP routes an Envoy sidecar
// serves for the agents' tools and for calls between agents, and what each route means to the
// policy. The xDS server (mesh/xds) generates Envoy configuration from these routes and the
// ext_authz server (mesh/extauthz) reads requests by them, so the two always agree.
//
// The routes of a build:
//
//	/agents/<agent>/tools/<slug>/mcp   a remote MCP server (streamable HTTP) in <agent>'s allowlist,
//	                                   called directly through the sidecar; ext_authz decides every
//	                                   message
//	/agents/<name>/a2a, /agents/<name>/a2a/..., /agents/<name>/.well-known/...
//	                                   agent <name> over A2A at agentd (the JSON-RPC endpoint and
//	                                   the Agent Card): agentd decides each A2A method itself
//	                                   (agent/invoke, tasks/read, tasks/cancel), so the sidecar does
//	                                   not ask ext_authz, which would read a task read as an invocation
//	/agents/<name>/...                 agent <name> at agentd (chat, chat/stream, mcp, status):
//	                                   ext_authz decides agent/invoke
//	/gateway/agents/<agent>/...        the Lush gateway, for the tools that run inside Lush (stdio
//	                                   servers, local tools, legacy SSE servers); the gateway decides
//	                                   those itself, so the sidecar does not ask ext_authz again
//
// It also says which requests ext_authz can decide without their body (ArgumentsNeeded,
// Route.Body): the xDS server turns body buffering off on those routes.
package mesh

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/toolref"
)

// Kind is what a route leads to.
type Kind string

// The kinds of route.
const (
	KindServer  Kind = "mcp"     // a remote MCP server, called through the sidecar
	KindAgent   Kind = "agent"   // an agent's endpoints at agentd
	KindGateway Kind = "gateway" // the Lush gateway, which decides the calls itself
	KindA2A     Kind = "a2a"     // an agent's A2A endpoint and Agent Card at agentd, which decides each method itself
)

// Context extension keys: the xDS server sets them on every route's ext_authz settings, and the
// ext_authz server reads a request by them before it falls back to its path.
const (
	ExtKind  = "lush.kind"  // a Kind
	ExtAgent = "lush.agent" // KindServer: whose allowlist applies; KindAgent: the agent called
	ExtTool  = "lush.tool"  // KindServer: the server's tool reference
)

// Route is one route of a build.
type Route struct {
	Name  string // stable and unique in a build: the xDS route name
	Kind  Kind
	Path  string // KindServer: the exact path; KindAgent, KindGateway: a prefix ending in "/"; KindA2A: a path and everything under it
	Agent string // KindServer, KindGateway: whose tools; KindAgent: the agent called
	Tool  string // KindServer: the tool reference of the server
	// URL is where a KindServer route goes: the server's streamable HTTP endpoint.
	URL *url.URL
	// Body: ext_authz needs the request body to decide the route's requests (the xDS server
	// asks the sidecar to send it). False for a KindServer route whose tools/calls are decided
	// the same whatever their arguments (ArgumentsNeeded): MCP 2026 requests to it are decided
	// from their Mcp-Method and Mcp-Name headers. Always true for KindAgent routes; false for
	// KindGateway and KindA2A routes, which ext_authz does not decide.
	Body bool
}

// ContextExtensions are the ext_authz context extensions of the route.
func (r Route) ContextExtensions() map[string]string {
	ext := map[string]string{ExtKind: string(r.Kind), ExtAgent: r.Agent}
	if r.Tool != "" {
		ext[ExtTool] = r.Tool
	}
	return ext
}

// Table is the routes of one build, in the order a sidecar matches them (most specific first).
type Table struct {
	Routes []Route
	exact  map[string]int // KindServer path -> index
	agents map[string]bool
}

// Routes returns the routes of m: one per remote streamable-HTTP server in each agent's
// allowlist, one per agent for the tools that run inside Lush, two per agent for its A2A endpoint
// and Agent Card, and one per agent for the rest of agentd.
func Routes(m *manifest.Manifest) *Table {
	t := &Table{exact: map[string]int{}, agents: map[string]bool{}}
	for _, a := range m.Agents {
		t.agents[a.Name] = true
		inside := false
		used := map[string]bool{}
		refs := make([]string, 0, len(a.Tools))
		for _, at := range a.Tools {
			refs = append(refs, at.Ref)
		}
		slices.Sort(refs)
		for _, ref := range refs {
			u := remoteURL(m, ref)
			if u == nil {
				if r, err := toolref.Parse(ref); err == nil && r.Kind != toolref.Agent {
					inside = true // lush:// tools are calls of /agents/<name>/mcp, routed below
				}
				continue
			}
			s := slug(ref, used)
			t.exact["/agents/"+a.Name+"/tools/"+s+"/mcp"] = len(t.Routes)
			t.Routes = append(t.Routes, Route{Name: a.Name + "/tools/" + s, Kind: KindServer,
				Path: "/agents/" + a.Name + "/tools/" + s + "/mcp", Agent: a.Name, Tool: ref, URL: u, Body: serverNeedsBody(m, &a, ref)})
		}
		if inside {
			t.Routes = append(t.Routes, Route{Name: "gateway/" + a.Name, Kind: KindGateway,
				Path: "/gateway/agents/" + a.Name + "/", Agent: a.Name})
		}
	}
	for _, a := range m.Agents {
		t.Routes = append(t.Routes, a2aRoutes(a.Name)...)
	}
	for _, a := range m.Agents {
		t.Routes = append(t.Routes, Route{Name: "agent/" + a.Name, Kind: KindAgent, Path: "/agents/" + a.Name + "/", Agent: a.Name, Body: true})
	}
	return t
}

// a2aRoutes are the routes of an agent's A2A endpoint (/agents/<name>/a2a and below it, where
// a2a-go clients also look for the card) and of its Agent Card at the agent's base URL.
func a2aRoutes(agent string) []Route {
	return []Route{
		{Name: "a2a/" + agent, Kind: KindA2A, Path: "/agents/" + agent + "/a2a", Agent: agent},
		{Name: "a2a-card/" + agent, Kind: KindA2A, Path: "/agents/" + agent + "/.well-known", Agent: agent},
	}
}

// Match returns the route a request path takes (the query string removed), or false.
func (t *Table) Match(p string) (Route, bool) {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if c := path.Clean(p); c != p && c+"/" != p {
		return Route{}, false // dot segments or doubled slashes: a sidecar normalizes paths before it routes
	}
	if i, ok := t.exact[p]; ok {
		return t.Routes[i], true
	}
	if rest, ok := strings.CutPrefix(p, "/gateway/agents/"); ok {
		name, _, _ := strings.Cut(rest, "/")
		if t.agents[name] {
			return Route{Name: "gateway/" + name, Kind: KindGateway, Path: "/gateway/agents/" + name + "/", Agent: name}, true
		}
		return Route{}, false
	}
	if rest, ok := strings.CutPrefix(p, "/agents/"); ok {
		name, sub, _ := strings.Cut(rest, "/")
		if !t.agents[name] || strings.HasPrefix(sub, "tools/") {
			return Route{}, false
		}
		for _, r := range a2aRoutes(name) {
			if under, ok := strings.CutPrefix(p, r.Path); ok && (under == "" || under[0] == '/') {
				return r, true
			}
		}
		return Route{Name: "agent/" + name, Kind: KindAgent, Path: "/agents/" + name + "/", Agent: name, Body: true}, true
	}
	return Route{}, false
}

// Server returns the KindServer route of agent's server ref.
func (t *Table) Server(agent, ref string) (Route, bool) {
	for _, r := range t.Routes {
		if r.Kind == KindServer && r.Agent == agent && r.Tool == ref {
			return r, true
		}
	}
	return Route{}, false
}

// HasAgent reports whether the build has the agent.
func (t *Table) HasAgent(name string) bool { return t.agents[name] }

// remoteURL is the streamable HTTP endpoint of a remote MCP server, or nil for every other tool.
func remoteURL(m *manifest.Manifest, ref string) *url.URL {
	tool, ok := m.Tool(ref)
	if !ok || tool.Kind != "mcp" || tool.Remote == nil || tool.Remote.Transport == "sse" {
		return nil
	}
	u, err := url.Parse(tool.Remote.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil
	}
	return u
}

var nonSlug = regexp.MustCompile(`[^a-z0-9]+`)

// slug is a path segment for a server: its #instance, or its host's first label and its path's
// last element; when that is taken in the agent, a digest of the reference is added.
func slug(ref string, used map[string]bool) string {
	s := "server"
	if r, err := toolref.Parse(ref); err == nil {
		s = r.Instance
		if s == "" {
			s = strings.SplitN(r.Host, ".", 2)[0]
			if b := path.Base(r.Path); b != "/" && b != "." && b != "mcp" {
				s += "-" + b
			}
		}
	}
	s = strings.Trim(nonSlug.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if s == "" {
		s = "server"
	}
	if used[s] {
		d := sha256.Sum256([]byte(ref))
		s = fmt.Sprintf("%s-%s", s, hex.EncodeToString(d[:])[:8])
	}
	used[s] = true
	return s
}
