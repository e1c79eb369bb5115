package gateway

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/policies/authz"
)

// Skills (the MCP skills extension, SEP-2640, docs/gateway.md#skills). A server declaring the
// extension serves skills: folders of files read as resources (skill://<path>/SKILL.md and the
// files beside it), enumerated by skills/list and described one by one by skills/get. The gateway
// declares the extension to an agent's clients when a server of the agent does, and passes its
// methods through as the reads they are, decided by the one decision function like the other
// resource methods: skills/list as resources/list of every server the caller may list (merged),
// skills/get and resources/directory/read as resources/read of the server that serves the skill.
// A skill of a server the caller may not read is answered as an unknown one.

// SkillsExtension is the name of the skills extension in capabilities.extensions.
const SkillsExtension = "io.modelcontextprotocol/skills"

// skillsCapability is the extension's settings the gateway declares for an agent: {} when some
// server of the agent declares the extension, with directoryRead when one of them serves
// resources/directory/read; nil when none does.
func (g *Gateway) skillsCapability(agent string) map[string]any {
	s := g.state.Load()
	if s == nil {
		return nil
	}
	a, ok := s.manifest.Agent(agent)
	if !ok {
		return nil
	}
	var out map[string]any
	for _, at := range a.Tools {
		lists, up := g.pool.Lists(at.Ref)
		if !up {
			continue
		}
		settings, ok := lists.Capabilities.Extensions[SkillsExtension]
		if !ok {
			continue
		}
		if out == nil {
			out = map[string]any{}
		}
		if directoryRead(settings) {
			out["directoryRead"] = true
		}
	}
	return out
}

// addSkillsCapability adds the skills extension to the capabilities caps when skillsCapability
// declares it.
func (g *Gateway) addSkillsCapability(caps map[string]any, agent string) {
	settings := g.skillsCapability(agent)
	if settings == nil {
		return
	}
	ext, _ := caps["extensions"].(map[string]any)
	if ext == nil {
		ext = map[string]any{}
		caps["extensions"] = ext
	}
	ext[SkillsExtension] = settings
}

// directoryRead reports whether a server's skills settings declare resources/directory/read.
func directoryRead(settings any) bool {
	m, _ := settings.(map[string]any)
	on, _ := m["directoryRead"].(bool)
	return on
}

// servesSkills reports whether a server declares the skills extension.
func servesSkills(srv *upstream.Server) bool {
	_, ok := srv.Lists().Capabilities.Extensions[SkillsExtension]
	return ok
}

// servesDirectories reports whether a server declares resources/directory/read.
func servesDirectories(srv *upstream.Server) bool {
	return directoryRead(srv.Lists().Capabilities.Extensions[SkillsExtension])
}

// listSkills answers skills/list: the skills of every server of the agent that serves them and
// whose resources the caller may list, merged into one page.
func (c *call) listSkills(ctx context.Context) (any, error) {
	skills := []json.RawMessage{}
	var refs []string
	for _, srv := range c.allowedContent(ctx, authz.ActionResourcesList) {
		if !servesSkills(srv) {
			continue
		}
		list, err := srv.ListAll(ctx, "skills/list", "skills")
		if err != nil {
			continue // a server that is down offers nothing; the others still answer
		}
		skills = append(skills, list...)
		refs = append(refs, srv.Ref())
	}
	return c.listHints(map[string]any{"skills": skills}, "skills/list", refs), nil
}

// readSkill answers skills/get and resources/directory/read (method): decided as resources/read
// of the server that serves the URI, and forwarded to it. A URI no server the caller may read
// serves is invalid params, as the extension answers an unknown skill.
func (c *call) readSkill(ctx context.Context, method string) (any, error) {
	uri := stringParam(params(c.req), "uri")
	if uri == "" {
		return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, `%s needs params {"uri": "<uri>"}`, method)
	}
	serves := servesSkills
	if method == "resources/directory/read" {
		serves = servesDirectories
	}
	var servers []*upstream.Server
	for _, srv := range c.allowedContent(ctx, authz.ActionResourcesRead) {
		if serves(srv) {
			servers = append(servers, srv)
		}
	}
	srv, ok := skillOwner(ctx, servers, uri)
	if !ok {
		return nil, &mcphttp.Error{Code: mcphttp.CodeInvalidParams,
			Message: "unknown skill or directory (or not readable by you through agent " + c.agent + ")", Data: map[string]string{"uri": uri}}
	}
	res, err := forward(ctx, srv, method, c.req.Params)
	if err != nil {
		return nil, err
	}
	return c.readHints(res), nil
}

// skillOwner finds the server of a skill's URI (its SKILL.md, or a directory of it) among
// servers: the one that lists a resource at or under it, else the only one, else the one whose
// skills/list has a skill at or under it.
func skillOwner(ctx context.Context, servers []*upstream.Server, uri string) (*upstream.Server, bool) {
	for _, srv := range servers {
		for _, r := range srv.Lists().Resources {
			if within(objectName(r, "uri"), uri) {
				return srv, true
			}
		}
	}
	if len(servers) == 1 {
		return servers[0], true
	}
	for _, srv := range servers {
		list, err := srv.ListAll(ctx, "skills/list", "skills")
		if err != nil {
			continue
		}
		for _, s := range list {
			if within(objectName(s, "uri"), uri) {
				return srv, true
			}
		}
	}
	return nil, false
}

// within reports whether the resource URI is uri itself or lies under it (uri a directory).
func within(resource, uri string) bool {
	return resource == uri || strings.HasPrefix(resource, strings.TrimSuffix(uri, "/")+"/")
}
