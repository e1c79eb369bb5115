package gateway

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/toolref"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/vault"
)

// catalog is what one agent's endpoint offers before per-caller filtering: the tools and prompts
// of the agent's allowlist, under names that do not collide, and the servers it may read
// resources from.
type catalog struct {
	tools   []*exposed
	byTool  map[string]*exposed
	prompts []*exposed
	byName  map[string]*exposed // prompts
	content []string            // MCP servers allowlisted without `only` (resources, prompts)
}

// exposed is a tool or prompt of an upstream under the name the agent's endpoint uses.
type exposed struct {
	Name     string          // the name clients see
	Ref      string          // the tool reference
	Upstream string          // its name at the upstream ("" for single tools)
	Raw      json.RawMessage // the upstream's object with the name replaced
	Local    *manifest.Tool  // set for local tools
	HasOut   bool            // the tool declares an outputSchema
	Agent    string          // set for lush://<agent> tools: the agent the tool invokes
	Builtin  string          // set for builtin/<name> tools: the name
	A2A      string          // set for a2a:// tools: the agent's base URL
	remote   *a2aTarget      // set for a2a:// tools: the parsed reference and the call's timeout
	Paths    []string        // file tools: the project-relative paths the agent's allowlist gives them

	schemas schemas // compiled on first use (tools only)
}

// buildCatalog assembles an agent's catalog from the manifest and the upstreams' current lists.
// Tools keep their own names unless two of the agent's servers offer the same one; then each is
// prefixed with its server's alias: "<alias>__<name>".
func buildCatalog(a *manifest.Agent, m *manifest.Manifest, pool *upstream.Pool) *catalog {
	c := &catalog{byTool: map[string]*exposed{}, byName: map[string]*exposed{}}
	var tools, prompts []*exposed
	for _, at := range a.Tools {
		t, ok := m.Tool(at.Ref)
		if !ok {
			continue
		}
		switch {
		case t.Local != nil:
			tools = append(tools, localTool(t))
		case t.Kind == "builtin":
			if e := builtinTool(t, at); e != nil {
				tools = append(tools, e)
			}
		case t.Kind == "agent":
			if e := agentTool(t, m); e != nil {
				tools = append(tools, e)
			}
		case t.A2A != nil:
			tools = append(tools, a2aTool(t))
		case t.Stdio != nil || t.Remote != nil:
			lists, ok := pool.Lists(t.Ref)
			if !ok && vault.Needs(m.Credentials, t.Ref) {
				// Reached only with a credential, and no caller's connection has been up yet:
				// offer the tools lush.yaml names, so that a call can say what is missing.
				lists.Tools = declaredTools(t)
			}
			for _, raw := range lists.Tools {
				name := objectName(raw, "name")
				if name == "" || (len(at.Only) > 0 && !slices.Contains(at.Only, name)) {
					continue
				}
				tools = append(tools, &exposed{Name: name, Ref: t.Ref, Upstream: name, Raw: raw, HasOut: hasField(raw, "outputSchema")})
			}
			if len(at.Only) == 0 {
				c.content = append(c.content, t.Ref)
				for _, raw := range lists.Prompts {
					if name := objectName(raw, "name"); name != "" {
						prompts = append(prompts, &exposed{Name: name, Ref: t.Ref, Upstream: name, Raw: raw})
					}
				}
			}
		}
	}
	c.tools = uniqueNames(tools)
	c.prompts = uniqueNames(prompts)
	for _, e := range c.tools {
		c.byTool[e.Name] = e
	}
	for _, e := range c.prompts {
		c.byName[e.Name] = e
	}
	return c
}

// declaredTools describes the tools tool_classes names for a server, for when the server itself
// cannot be asked: a generic schema, and a description that says why.
func declaredTools(t *manifest.Tool) []json.RawMessage {
	var out []json.RawMessage
	for _, name := range slices.Sorted(maps.Keys(t.Classes)) {
		if name == "" || name == "*" {
			continue
		}
		raw, _ := json.Marshal(map[string]any{"name": name, "inputSchema": map[string]any{"type": "object"},
			"description": fmt.Sprintf("A tool of %s. Its own description and schema appear once a credential for the server is configured.", t.Ref)})
		out = append(out, raw)
	}
	return out
}

// localTool describes a tools/<name> tool as an MCP tool.
func localTool(t *manifest.Tool) *exposed {
	name := strings.TrimPrefix(t.Ref, "tools/")
	obj := map[string]any{"name": name, "description": t.Local.Description, "inputSchema": json.RawMessage(t.Local.InputSchema)}
	if len(t.Local.InputSchema) == 0 {
		obj["inputSchema"] = map[string]any{"type": "object"}
	}
	if len(t.Local.OutputSchema) > 0 {
		obj["outputSchema"] = json.RawMessage(t.Local.OutputSchema)
	}
	raw, _ := json.Marshal(obj)
	return &exposed{Name: name, Ref: t.Ref, Raw: raw, Local: t, HasOut: len(t.Local.OutputSchema) > 0}
}

// uniqueNames renames colliding entries to "<alias>__<name>", sorts by name, and rewrites each
// raw object's name.
func uniqueNames(list []*exposed) []*exposed {
	count := map[string]int{}
	for _, e := range list {
		count[e.Name]++
	}
	aliases := map[string]string{} // ref -> alias, unique
	used := map[string]bool{}
	for _, e := range list {
		if count[e.Name] < 2 {
			continue
		}
		a, ok := aliases[e.Ref]
		if !ok {
			a = alias(e.Ref)
			for i := 2; used[a]; i++ {
				a = fmt.Sprintf("%s%d", alias(e.Ref), i)
			}
			aliases[e.Ref], used[a] = a, true
		}
		e.Name = a + "__" + e.Name
	}
	slices.SortFunc(list, func(a, b *exposed) int { return strings.Compare(a.Name, b.Name) })
	for _, e := range list {
		if e.Name != e.Upstream {
			e.Raw = withName(e.Raw, e.Name)
		}
	}
	return list
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// alias is a short name for a server, for prefixes: the #instance, or the package, command,
// host or path it is named by, without the usual "mcp"/"server" decorations.
func alias(ref string) string {
	r, err := toolref.Parse(ref)
	if err != nil {
		return "tool"
	}
	var a string
	switch {
	case r.Instance != "":
		a = r.Instance
	case r.Stdio():
		pkg := r.Package
		if at := strings.LastIndex(pkg, "@"); at > 0 {
			pkg = pkg[:at]
		}
		a = path.Base(pkg)
		for _, p := range []string{"mcp-server-", "server-", "mcp-"} {
			a = strings.TrimPrefix(a, p)
		}
		a = strings.TrimSuffix(strings.TrimSuffix(a, "-mcp"), "-server")
	case r.Remote() || r.Kind == toolref.A2A:
		a = strings.SplitN(r.Host, ".", 2)[0]
		if b := path.Base(r.Path); b != "/" && b != "mcp" && b != "." {
			a = b
		}
	default:
		a = r.Name
	}
	a = strings.Trim(nonName.ReplaceAllString(a, "_"), "_")
	if a == "" {
		return "tool"
	}
	return a
}

// serverRef is the MCP server an exposed entry comes from, "" for local and built-in tools and
// agents.
func (e *exposed) serverRef() string {
	if e.Local != nil || e.Agent != "" || e.Builtin != "" {
		return ""
	}
	return e.Ref
}

func objectName(raw json.RawMessage, field string) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return ""
	}
	var s string
	json.Unmarshal(obj[field], &s)
	return s
}

func hasField(raw json.RawMessage, field string) bool {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return false
	}
	v, ok := obj[field]
	return ok && string(v) != "null"
}

// withName returns the object with its "name" replaced, every other field untouched.
func withName(raw json.RawMessage, name string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return raw
	}
	obj["name"], _ = json.Marshal(name)
	out, err := json.Marshal(obj)
	if err != nil {
		return raw
	}
	return out
}
