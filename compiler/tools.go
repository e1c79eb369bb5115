package compiler

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/toolref"
)

// builtinClasses are the fixed classes of Lush's built-in tools. A project may raise a built-in
// tool's risk in tool_classes but not change its access.
var builtinClasses = map[string]manifest.Class{
	"shell":      {Access: "write", Risk: "destructive"},
	"file_read":  {Access: "read", Risk: "read"},
	"file_list":  {Access: "read", Risk: "read"},
	"file_write": {Access: "write", Risk: "write"},
}

// agentToolClass is the default class of lush://<agent>: invoking an agent is a read; the
// agent's own tool calls are authorized one by one with the caller's principal.
var agentToolClass = manifest.Class{Access: "read", Risk: "read"}

// toolInfo gathers what the build knows about one tool reference.
type toolInfo struct {
	ref     toolref.Ref
	first   diag.Pos // the first allowlist entry naming it
	uses    []toolUse
	server  *spec.Server
	classes map[string]classDecl // tool name ("" single tool, "*" server default) -> class
	local   *localTool
}

type toolUse struct {
	agent string
	entry *spec.ToolEntry
}

type classDecl struct {
	class manifest.Class
	pos   diag.Pos // zero for built-in defaults
}

// localTool is a tools/<name> tool of the project or of a skill.
type localTool struct {
	spec   *spec.LocalTool
	skill  string // the providing skill's reference; "" for project tools
	digest string
	input  json.RawMessage
	output json.RawMessage
	ok     bool
}

func (b *build) checkTools() {
	b.tools = map[string]*toolInfo{}
	b.local = map[string]*localTool{}
	for _, t := range b.p.Tools {
		b.local[path.Base(t.Dir)] = b.checkLocalTool(t, "", b.p.Dir)
	}

	for _, name := range b.agentNames() {
		a := b.agents[name]
		seen := map[string]diag.Pos{}
		for i := range a.Tools {
			e := &a.Tools[i]
			ref, err := toolref.Parse(e.Ref.Value)
			if err != nil {
				continue // reported while parsing
			}
			if first, dup := seen[ref.String()]; dup {
				b.l.ErrorHint(e.Ref.Pos, "duplicate-tool", fmt.Sprintf("merge it with the entry at line %d", first.Line), "%s is listed twice in the allowlist", ref)
				continue
			}
			seen[ref.String()] = e.Ref.Pos
			ti := b.tools[ref.String()]
			if ti == nil {
				ti = &toolInfo{ref: ref, first: e.Ref.Pos, classes: map[string]classDecl{}}
				b.tools[ref.String()] = ti
			}
			ti.uses = append(ti.uses, toolUse{agent: name, entry: e})
		}
	}

	b.attachServers()
	b.collectClasses()
	for _, ref := range b.toolRefs() {
		ti := b.tools[ref]
		if ti.ref.Kind == toolref.Local {
			if lt, ok := b.local[ti.ref.Name]; ok {
				ti.local = lt
			} // else: resolved against skills in the skills step
		}
	}
	for _, name := range sortedKeys(b.local) {
		if lt := b.local[name]; b.tools["tools/"+name] == nil {
			b.l.WarnHint(diag.Pos{File: lt.spec.File}, "unused-tool", "add it to an agent's tools: with name: tools/"+name+", or delete it",
				"local tool tools/%s is not used by any agent", name)
		}
	}
	if !b.opts.offline {
		b.checkReachability()
	}
}

func (b *build) toolRefs() []string { return sortedKeys(b.tools) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkLocalTool validates a tool.yaml: its command exists and is executable, its schemas
// compile, and digests its directory. root is the directory spec paths are relative to.
func (b *build) checkLocalTool(t *spec.LocalTool, skill, root string) *localTool {
	lt := &localTool{spec: t, skill: skill, ok: true}
	dir := filepath.Join(root, filepath.FromSlash(t.Dir))
	if filepath.IsAbs(t.Dir) {
		dir = t.Dir
	}
	if len(t.Command) == 0 {
		lt.ok = false
	} else {
		cmd := t.Command[0]
		switch {
		case strings.Contains(cmd.Value, "/"):
			full := filepath.Join(dir, filepath.FromSlash(cmd.Value))
			rel := path.Clean(path.Join(t.Dir, cmd.Value))
			st, err := os.Stat(full)
			switch {
			case filepath.IsAbs(cmd.Value) || !strings.HasPrefix(rel, path.Clean(t.Dir)+"/"):
				b.l.ErrorHint(cmd.Pos, "tool-command-outside", "put the executable in "+t.Dir, "command %q is outside the tool's directory", cmd.Value)
				lt.ok = false
			case err != nil:
				b.l.ErrorHint(cmd.Pos, "tool-command-missing", "create "+rel+" or fix command:", "command %q does not exist (%s)", cmd.Value, rel)
				lt.ok = false
			case st.IsDir() || st.Mode()&0o111 == 0:
				b.l.ErrorHint(cmd.Pos, "tool-command-not-executable", "run: chmod +x "+rel, "command %q is not executable", cmd.Value)
				lt.ok = false
			}
		default:
			if _, err := exec.LookPath(cmd.Value); err != nil {
				b.l.ErrorHint(cmd.Pos, "tool-command-missing", "install it, or use a path inside the tool's directory such as ./run", "command %q is not on PATH", cmd.Value)
				lt.ok = false
			}
		}
	}
	if d, err := spec.DigestDir(dir); err != nil {
		b.l.Errorf(diag.Pos{File: t.File}, "tool-unreadable", "cannot read the tool's directory: %v", err)
		lt.ok = false
	} else {
		lt.digest = d
	}
	lt.input = b.compileSchema(t.InputSchema, t.SchemaPos, "input_schema", true)
	lt.output = b.compileSchema(t.OutputSchema, t.OutSchemaPos, "output_schema", false)
	return lt
}

// compileSchema checks that a tool schema is a valid JSON Schema for an object and returns its
// canonical JSON. A missing input schema is the empty object schema.
func (b *build) compileSchema(schema any, pos diag.Pos, what string, required bool) json.RawMessage {
	if schema == nil {
		if required {
			return json.RawMessage(`{"type":"object"}`)
		}
		return nil
	}
	obj, ok := schema.(map[string]any)
	if !ok || obj["type"] != "object" {
		hint := "start the schema with type: object and describe the arguments under properties:"
		if !required {
			hint = "start the schema with type: object and describe the result's fields under properties:"
		}
		b.l.ErrorHint(pos, "invalid-schema", hint, "%s must be a JSON Schema with type: object (MCP requires it)", what)
		return nil
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("lush://"+what, schema); err != nil {
		b.l.Errorf(pos, "invalid-schema", "%s is not a valid JSON Schema: %v", what, err)
		return nil
	}
	if _, err := c.Compile("lush://" + what); err != nil {
		b.l.Errorf(pos, "invalid-schema", "%s is not a valid JSON Schema: %s", what, firstLine(err.Error()))
		return nil
	}
	data, err := json.Marshal(schema) // map keys are sorted: canonical
	if err != nil {
		b.l.Errorf(pos, "invalid-schema", "%s cannot be encoded as JSON: %v", what, err)
		return nil
	}
	return data
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[:i]) + " " + strings.TrimSpace(strings.ReplaceAll(s[i+1:], "\n", " "))
	}
	return s
}

// attachServers links lush.yaml servers: entries to the tools that use them.
func (b *build) attachServers() {
	seen := map[string]diag.Pos{}
	for i := range b.cfg.Servers {
		s := &b.cfg.Servers[i]
		if first, dup := seen[s.Ref.Value]; dup {
			b.l.ErrorHint(s.Ref.Pos, "duplicate-server", fmt.Sprintf("merge it with line %d", first.Line), "server %s is configured twice", s.Ref.Value)
			continue
		}
		seen[s.Ref.Value] = s.Ref.Pos
		ti := b.tools[s.Ref.Value]
		if ti == nil {
			b.l.WarnHint(s.Ref.Pos, "unused-server", b.refHint(s.Ref.Value, "remove the entry"), "server %s is configured but no agent uses it", s.Ref.Value)
			continue
		}
		ti.server = s
	}
}

// refHint suggests the closest tool reference that agents do use.
func (b *build) refHint(ref, otherwise string) string {
	if c := diag.DidYouMean(ref, b.toolRefs()); c != "" {
		return c
	}
	return otherwise
}

// collectClasses merges every classification of every tool: built-in defaults, tool.yaml,
// named tools in allowlists and lush.yaml tool_classes. Two places that disagree are an error.
func (b *build) collectClasses() {
	for _, ref := range b.toolRefs() {
		ti := b.tools[ref]
		switch ti.ref.Kind {
		case toolref.Builtin:
			ti.classes[""] = classDecl{class: builtinClasses[ti.ref.Name]}
		case toolref.Agent:
			ti.classes[""] = classDecl{class: agentToolClass}
		case toolref.Local:
			if lt, ok := b.local[ti.ref.Name]; ok && lt.spec.Class != nil {
				b.addClass(ti, "", *lt.spec.Class)
			}
		}
		for _, u := range ti.uses {
			for _, nt := range u.entry.Only {
				if nt.Class != nil {
					b.addClass(ti, nt.Name.Value, *nt.Class)
				}
			}
		}
	}
	for _, tc := range b.cfg.ToolClasses {
		ti := b.tools[tc.Ref.Value]
		if ti == nil {
			b.l.WarnHint(tc.Ref.Pos, "unused-class", b.refHint(tc.Ref.Value, "remove it"), "tool_classes classifies %s, which no agent uses", tc.Ref.Value)
			continue
		}
		b.addClass(ti, tc.Tool.Value, tc.Class)
	}
}

func (b *build) addClass(ti *toolInfo, name string, c spec.Class) {
	nc := manifest.Class{Access: c.Access.Value, Risk: c.Risk.Value}
	what := ti.ref.String()
	if name != "" {
		what += " tool " + name
	}
	prev, ok := ti.classes[name]
	switch {
	case !ok:
		ti.classes[name] = classDecl{class: nc, pos: c.Pos}
	case prev.pos.File == "" && ti.ref.Kind == toolref.Builtin:
		if nc.Access != prev.class.Access {
			b.l.ErrorHint(c.Pos, "builtin-class", "classify only its risk", "%s has access %s; a project cannot change a built-in tool's access", what, prev.class.Access)
			return
		}
		ti.classes[name] = classDecl{class: nc, pos: c.Pos}
	case prev.pos.File == "":
		ti.classes[name] = classDecl{class: nc, pos: c.Pos} // overrides the lush:// default
	case prev.class != nc:
		b.l.ErrorHint(c.Pos, "conflicting-class", fmt.Sprintf("classify it in one place; the other is %s", prev.pos),
			"%s is classified {access: %s, risk: %s} here but {access: %s, risk: %s} elsewhere", what, nc.Access, nc.Risk, prev.class.Access, prev.class.Risk)
	}
}

// classOf returns a tool's class, or write/write when it has none (unknown tools are writes).
func (ti *toolInfo) classOf(name string) (manifest.Class, bool) {
	if c, ok := ti.classes[name]; ok {
		return c.class, true
	}
	if c, ok := ti.classes["*"]; ok && name != "" {
		return c.class, true
	}
	return manifest.Class{Access: "write", Risk: "write"}, false
}

// checkClassUse runs once every class is known (skills bring classes of their tools).
func (b *build) checkClassUse() {
	for _, ref := range b.toolRefs() {
		b.checkNarrowedClasses(b.tools[ref])
	}
}

// checkNarrowedClasses warns about named tools that their agent can never call because they are
// writes behind a read-only entry.
func (b *build) checkNarrowedClasses(ti *toolInfo) {
	if ti.ref.Kind == toolref.Local && ti.local == nil {
		return // the tool does not exist: that error says enough
	}
	for _, u := range ti.uses {
		if u.entry.Access.Value != "read" {
			continue
		}
		names := []string{""}
		if len(u.entry.Only) > 0 {
			names = names[:0]
			for _, nt := range u.entry.Only {
				names = append(names, nt.Name.Value)
			}
		} else if !ti.ref.SingleTool() {
			continue // all tools of a server: which are writes is known only to the server
		}
		for i, n := range names {
			c, known := ti.classOf(n)
			if c.Access != "write" {
				continue
			}
			pos := u.entry.Access.Pos
			if len(u.entry.Only) > 0 {
				pos = u.entry.Only[i].Name.Pos
			}
			why := "it is classified write"
			if !known {
				why = "it has no class, so it counts as write"
			}
			label := ti.ref.String()
			if n != "" {
				label += " tool " + n
			}
			b.l.WarnHint(pos, "unreachable-tool", "give the entry access: write, or classify the tool as read in lush.yaml tool_classes",
				"agent %q can never call %s: %s and the entry allows only read", u.agent, label, why)
		}
	}
}

// mcpTool is the manifest view of an MCP tool reference: how to reach it.
func (b *build) mcpTool(ti *toolInfo) *manifest.Tool {
	t := &manifest.Tool{Ref: ti.ref.String(), Kind: string(ti.ref.Kind)}
	if ti.server != nil && ti.server.Timeout.Set() {
		t.TimeoutMS = ti.server.Timeout.Value.Milliseconds()
	}
	if ti.ref.Stdio() {
		st := &manifest.Stdio{Launcher: ti.ref.Launcher, Package: ti.ref.Package}
		if ti.server != nil {
			for _, a := range ti.server.Args {
				st.Args = append(st.Args, a.Value)
			}
			for _, e := range ti.server.Env {
				st.Env = append(st.Env, manifest.EnvVar{Name: e.Name.Value, Value: e.Value.Value})
			}
		}
		t.Stdio = st
		return t
	}
	rm := &manifest.Remote{URL: ti.ref.DefaultURL(), Transport: "streamable-http"}
	if ti.server != nil {
		if ti.server.URL.Set() {
			rm.URL = ti.server.URL.Value
		}
		if ti.server.Transport.Set() {
			rm.Transport = ti.server.Transport.Value
		}
	}
	t.Remote = rm
	return t
}
