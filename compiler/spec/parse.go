package spec

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/principal"
	"github.com/lush-agents/lush/internal/schedule"
	"github.com/lush-agents/lush/internal/toolref"
)

// maxCallTimeout bounds a per-call timeout written in a spec.
const maxCallTimeout = time.Hour

var (
	agentFields      = []string{"name", "model", "description", "tools", "skills", "acl"}
	toolEntryFields  = []string{"server", "name", "access", "tools", "paths"}
	namedToolFields  = []string{"name", "access", "risk"}
	classFields      = []string{"access", "risk"}
	aclFields        = []string{"principal", "role"}
	loopFields       = []string{"name", "schedule", "agent", "run_as", "instruction", "acl", "concurrency", "overlap", "timeout", "catch_up", "phase"}
	projectFields    = []string{"project", "models", "skills_dir", "service_accounts", "servers", "tool_classes", "tool_grants", "mcp_credentials", "authorization", "roles", "rate_limits", "budgets"}
	serviceAcctField = []string{"name", "description"}
	serverFields     = []string{"url", "transport", "args", "env", "timeout"}
	toolGrantFields  = []string{"tool", "grants"}
	grantFields      = []string{"principal", "access", "tools"}
	credentialFields = []string{"type", "header", "env", "vault", "flow", "scopes", "audience", "resource"}
	authzFields      = []string{"max_call_depth", "approval_required_for"}
	rateLimitFields  = []string{"principal", "tool", "rate", "burst"}
	localToolFields  = []string{"name", "description", "command", "input_schema", "output_schema", "access", "risk", "timeout"}

	envName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	oauthScope = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]+$`) // RFC 6749 scope-token
	headerName = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`)
)

// ParseAgent parses agents/<dir>/spec.yaml. file is the project-relative path used in
// diagnostics. It returns nil only when the file is not a YAML mapping at all.
func ParseAgent(file, dir string, data []byte, l *diag.List) *Agent {
	d := &decoder{file: file, l: l}
	root := d.document(data)
	if root == nil {
		return nil
	}
	a := &Agent{File: file, Dir: dir}
	ok := d.fields(root, "agent spec", agentFields, []string{"name", "model", "description"}, func(key string, v *yaml.Node) {
		switch key {
		case "name":
			a.Name = d.name(v, "agent", dir, "the directory to agents/%s", "its directory agents/%s")
		case "model":
			a.Model, _ = d.str(v, "model")
		case "description":
			a.Description, _ = d.str(v, "description")
		case "skills":
			a.Skills = d.strs(v, "skills")
		case "tools":
			d.seq(v, "tools", func(item *yaml.Node) {
				if e, ok := d.toolEntry(item); ok {
					a.Tools = append(a.Tools, e)
				}
			})
		case "acl":
			a.ACL = d.acl(v, AgentRoles)
		}
	})
	if !ok {
		return nil
	}
	return a
}

// name decodes the name of an agent or loop, which must be a valid name and match the file it is
// in (want); rename and where are formats for the suggestion and the message.
func (d *decoder) name(n *yaml.Node, kind, want, rename, where string) Scalar[string] {
	s, ok := d.str(n, "name")
	switch {
	case !ok:
	case !toolref.ValidAgentName(s.Value):
		d.l.ErrorHint(s.Pos, "invalid-name", "use lower-case letters, digits and '-', starting with a letter (at most 63)", "%s name %q is not valid", kind, s.Value)
	case s.Value != want:
		d.l.ErrorHint(s.Pos, "name-mismatch", fmt.Sprintf("rename "+rename+" or set name: %s", s.Value, want),
			"%s name %q does not match "+where, kind, s.Value, want)
	}
	return s
}

func (d *decoder) toolEntry(n *yaml.Node) (ToolEntry, bool) {
	e := ToolEntry{Pos: d.at(n)}
	var key string
	var only, paths *yaml.Node
	ok := d.fields(n, "tools entry", toolEntryFields, []string{"access"}, func(k string, v *yaml.Node) {
		switch k {
		case "server", "name":
			if key != "" {
				d.l.ErrorHint(d.at(v), "conflicting-fields", "write server: for MCP servers and lush:// agents, name: for tools/ and builtin/ tools",
					"a tools entry has both server: and name:")
				return
			}
			key = k
			e.Ref, _ = d.str(v, k)
		case "access":
			e.Access, _ = d.enum(v, "access", AccessLevels)
		case "tools":
			only = v
		case "paths":
			paths = v
		}
	})
	if !ok {
		return e, false
	}
	if key == "" {
		d.l.ErrorHint(e.Pos, "missing-field", "add server: mcp://… or lush://<agent>, or name: tools/<name> or builtin/<name>", "tools entry names no tool")
		return e, false
	}
	if !e.Ref.Set() {
		return e, false
	}
	ref, err := toolref.Parse(e.Ref.Value)
	if err != nil {
		d.l.Errorf(e.Ref.Pos, "invalid-tool-ref", "%v", err)
		return e, false
	}
	switch {
	case key == "server" && (ref.Kind == toolref.Local || ref.Kind == toolref.Builtin):
		d.l.ErrorHint(e.Ref.Pos, "wrong-key", "write name: "+ref.String(), "%s is not a server", ref)
	case key == "name" && (ref.Kind == toolref.MCP || ref.Kind == toolref.Agent || ref.Kind == toolref.A2A):
		d.l.ErrorHint(e.Ref.Pos, "wrong-key", "write server: "+ref.String(), "%s is a server: list it with server:", ref)
	}
	if only != nil {
		if ref.SingleTool() {
			d.l.ErrorHint(d.at(only), "narrowing-single-tool", "remove tools: from this entry", "%s is a single tool; only MCP servers can be narrowed to named tools", ref)
		} else {
			d.seq(only, "tools", func(item *yaml.Node) {
				if t, ok := d.namedTool(item); ok {
					e.Only = append(e.Only, t)
				}
			})
		}
	}
	d.toolPaths(&e, ref, paths)
	return e, true
}

// toolPaths decodes the paths: of a file tool's entry, which file tools require and other tools
// may not have. Each path is normalized with CleanPath.
func (d *decoder) toolPaths(e *ToolEntry, ref toolref.Ref, n *yaml.Node) {
	if !IsFileTool(ref.String()) {
		if n != nil {
			d.l.ErrorHint(d.at(n), "paths-not-file-tool", "remove paths: from this entry; it applies to "+strings.Join(FileTools, ", "),
				"paths: applies to the file tools only, not %s", ref)
		}
		return
	}
	verb := strings.TrimPrefix(ref.Name, "file_")
	if n == nil {
		d.l.ErrorHint(e.Ref.Pos, "missing-paths", "add paths: such as [data], or [.] for the whole project",
			"%s needs paths: the directories it may %s, relative to the project", ref, verb)
		return
	}
	e.PathsPos = d.at(n)
	items := 0
	ok := d.seq(n, "paths", func(item *yaml.Node) {
		items++
		s, ok := d.str(item, "each item of paths")
		if !ok {
			return
		}
		c, err := CleanPath(s.Value)
		if err != nil {
			var pe *PathError
			if errors.As(err, &pe) {
				d.l.ErrorHint(s.Pos, "invalid-path", pe.Hint, "%s", pe.Msg)
			} else {
				d.l.Errorf(s.Pos, "invalid-path", "%v", err)
			}
			return
		}
		e.Paths = append(e.Paths, Scalar[string]{Value: c, Pos: s.Pos})
	})
	if ok && items == 0 {
		d.l.ErrorHint(e.PathsPos, "missing-paths", "list the directories it may "+verb+", such as [data], or [.] for the whole project",
			"paths: of %s is empty", ref)
	}
}

func (d *decoder) namedTool(n *yaml.Node) (NamedTool, bool) {
	r := d.resolve(n)
	if r == nil {
		return NamedTool{}, false
	}
	if r.Kind == yaml.ScalarNode {
		s, ok := d.str(r, "tool name")
		return NamedTool{Name: s, Pos: s.Pos}, ok && d.checkMCPToolName(s)
	}
	t := NamedTool{Pos: d.at(r)}
	var access, risk *yaml.Node
	ok := d.fields(r, "named tool", namedToolFields, []string{"name"}, func(k string, v *yaml.Node) {
		switch k {
		case "name":
			t.Name, _ = d.str(v, "name")
		case "access":
			access = v
		case "risk":
			risk = v
		}
	})
	if access != nil || risk != nil {
		t.Class = d.classFrom(t.Pos, access, risk)
	}
	return t, ok && t.Name.Set() && d.checkMCPToolName(t.Name)
}

// checkMCPToolName accepts the tool names MCP allows (1–128 of letters, digits, _ - . /).
func (d *decoder) checkMCPToolName(s Scalar[string]) bool {
	if !ValidMCPToolName(s.Value) {
		d.l.Errorf(s.Pos, "invalid-tool-name", "%q is not an MCP tool name (1 to 128 letters, digits, '_', '-', '.' or '/'); '*' is only allowed in tool_classes", s.Value)
		return false
	}
	return true
}

var mcpToolName = regexp.MustCompile(`^[A-Za-z0-9_./-]{1,128}$`)

// ValidMCPToolName reports whether name is a tool name MCP allows.
func ValidMCPToolName(name string) bool { return mcpToolName.MatchString(name) }

// class decodes a classification: "read", "write", or {access: …, risk: …}.
func (d *decoder) class(n *yaml.Node) *Class {
	r := d.resolve(n)
	if r == nil {
		return nil
	}
	if r.Kind == yaml.ScalarNode {
		s, ok := d.str(r, "class")
		if !ok {
			return nil
		}
		switch s.Value {
		case "read", "write":
			return &Class{Access: s, Risk: s, Pos: s.Pos}
		case "network", "destructive":
			d.l.ErrorHint(s.Pos, "invalid-value", fmt.Sprintf("write {access: write, risk: %s} (or access: read)", s.Value),
				"%q is a risk class, not an access level", s.Value)
		default:
			d.l.ErrorHint(s.Pos, "invalid-value", "write read, write, or {access: …, risk: …}", "class %q is not valid", s.Value)
		}
		return nil
	}
	var access, risk *yaml.Node
	if !d.fields(r, "class", classFields, nil, func(k string, v *yaml.Node) {
		if k == "access" {
			access = v
		} else {
			risk = v
		}
	}) {
		return nil
	}
	if access == nil && risk == nil {
		d.l.Errorf(d.at(r), "missing-field", "class needs access:, risk:, or both")
		return nil
	}
	return d.classFrom(d.at(r), access, risk)
}

// classFrom builds a class from optional access and risk nodes. A missing risk equals the
// access; a missing access is read for risk read and write otherwise.
func (d *decoder) classFrom(pos diag.Pos, access, risk *yaml.Node) *Class {
	c := &Class{Pos: pos}
	ok := true
	if access != nil {
		c.Access, ok = d.enum(access, "access", AccessLevels)
	}
	if risk != nil {
		var rok bool
		c.Risk, rok = d.enum(risk, "risk", RiskClasses)
		ok = ok && rok
	}
	if !ok {
		return nil
	}
	switch {
	case access == nil && c.Risk.Value == "read":
		c.Access = Scalar[string]{Value: "read", Pos: c.Risk.Pos}
	case access == nil:
		c.Access = Scalar[string]{Value: "write", Pos: c.Risk.Pos}
	case risk == nil:
		c.Risk = c.Access
	case c.Access.Value == "write" && c.Risk.Value == "read":
		d.l.ErrorHint(c.Risk.Pos, "inconsistent-class", "a write tool's risk is write, network or destructive", "a tool with access write cannot have risk read")
		return nil
	}
	return c
}

func (d *decoder) acl(n *yaml.Node, roles []string) []ACLEntry {
	var out []ACLEntry
	d.seq(n, "acl", func(item *yaml.Node) {
		e := ACLEntry{Pos: d.at(item)}
		if d.fields(item, "acl entry", aclFields, aclFields, func(k string, v *yaml.Node) {
			if k == "principal" {
				e.Principal, _ = d.str(v, "principal")
			} else {
				e.Role, _ = d.enum(v, "role", roles)
			}
		}) && e.Principal.Set() && e.Role.Set() {
			out = append(out, e)
		}
	})
	return out
}

// ParseLoop parses loops/<name>.yaml; name is the file's base name without .yaml.
func ParseLoop(file, name string, data []byte, l *diag.List) *Loop {
	d := &decoder{file: file, l: l}
	root := d.document(data)
	if root == nil {
		return nil
	}
	lp := &Loop{File: file}
	var sched *schedule.Schedule
	ok := d.fields(root, "loop spec", loopFields, []string{"name", "schedule", "agent", "run_as", "instruction"}, func(k string, v *yaml.Node) {
		switch k {
		case "name":
			lp.Name = d.name(v, "loop", name, "the file to loops/%s.yaml", "its file loops/%s.yaml")
		case "schedule":
			if s, ok := d.str(v, "schedule"); ok {
				lp.Schedule = s
				sched = d.checkSchedule(s)
			}
		case "agent":
			if s, ok := d.str(v, "agent"); ok {
				lp.Agent = s
				if strings.HasPrefix(s.Value, "lush://") {
					l.ErrorHint(s.Pos, "invalid-value", "write the agent's name: agent: "+strings.TrimPrefix(s.Value, "lush://"), "agent is a name, not a lush:// reference")
				}
			}
		case "run_as":
			lp.RunAs, _ = d.str(v, "run_as")
		case "instruction":
			lp.Instruction, _ = d.str(v, "instruction")
		case "acl":
			lp.ACL = d.acl(v, LoopRoles)
		case "concurrency":
			lp.Concurrency = d.concurrency(v)
		case "overlap":
			lp.Overlap, _ = d.enum(v, "overlap", OverlapModes)
		case "timeout":
			lp.Timeout, _ = d.loopDuration(v, "timeout", true, MaxLoopTimeout,
				"write how long one firing may run, such as 90s, 10m or 1h30m")
		case "catch_up":
			lp.CatchUp, _ = d.loopDuration(v, "catch_up", false, 0,
				"write how old a missed firing may be and still run, such as 1h, or 0s to never run missed firings")
		case "phase":
			lp.Phase, _ = d.loopDuration(v, "phase", false, 0,
				`write the offset of the firings within the interval, such as 1m for schedule: "@every 3m"`)
		}
	})
	if !ok {
		return nil
	}
	if lp.Phase.Set() && sched != nil {
		d.checkPhase(lp.Phase, sched)
	}
	return lp
}

// checkSchedule reports an invalid schedule and returns the parsed one, or nil.
func (d *decoder) checkSchedule(s Scalar[string]) *schedule.Schedule {
	sched, err := schedule.Parse(s.Value)
	if err != nil {
		d.l.ErrorHint(s.Pos, "invalid-schedule", `write 5 fields (minute hour day-of-month month day-of-week) such as "0 9 * * *", or @hourly, @daily, @every 15m`,
			"schedule %q is not valid: %v", s.Value, err)
		return nil
	}
	return sched
}

// checkPhase reports a phase that the loop's schedule cannot take: phase applies to @every
// schedules only, is a whole number of seconds and is shorter than the interval.
func (d *decoder) checkPhase(p Scalar[time.Duration], sched *schedule.Schedule) {
	every, ok := sched.Every()
	switch {
	case !ok:
		d.l.ErrorHint(p.Pos, "invalid-field", `remove phase:, or use an interval schedule such as schedule: "@every 15m"`,
			"phase applies only to @every schedules, not to %q", sched.String())
	case p.Value >= every:
		d.l.ErrorHint(p.Pos, "invalid-value", fmt.Sprintf("write a phase from 0s up to (not including) %s", schedule.FormatDuration(every)),
			"phase %s is not shorter than the interval of %q", schedule.FormatDuration(p.Value), sched.String())
	case p.Value%time.Second != 0:
		d.l.ErrorHint(p.Pos, "invalid-value", "write e.g. "+schedule.FormatDuration(p.Value.Truncate(time.Second)),
			"phase %s is not a whole number of seconds", p.Value)
	default:
		if _, err := sched.WithPhase(p.Value); err != nil {
			d.l.Errorf(p.Pos, "invalid-value", "%v", err)
		}
	}
}

// concurrency decodes a loop's concurrency, a whole number from 1 to MaxLoopConcurrency.
func (d *decoder) concurrency(n *yaml.Node) Scalar[int] {
	hint := fmt.Sprintf("write how many firings of this loop may run at once, from 1 (the default) to %d", MaxLoopConcurrency)
	r := d.resolve(n)
	if r == nil {
		return Scalar[int]{}
	}
	if r.Kind != yaml.ScalarNode || (r.Tag != "!!int" && r.Tag != "!!float") {
		d.l.ErrorHint(d.at(r), "wrong-type", hint, "concurrency must be a whole number, not %s", kindName(r))
		return Scalar[int]{}
	}
	v, err := strconv.ParseInt(r.Value, 0, 64)
	if r.Tag != "!!int" || err != nil || v < 1 || v > MaxLoopConcurrency {
		d.l.ErrorHint(d.at(r), "invalid-value", hint, "concurrency %s is not a whole number from 1 to %d", r.Value, MaxLoopConcurrency)
		return Scalar[int]{}
	}
	return Scalar[int]{Value: int(v), Pos: d.at(r)}
}

// loopDuration decodes a Go duration such as "90s" or "10m" that is a whole number of
// milliseconds (the unit of the manifest), more than 0 if positive is set and at least 0
// otherwise, and at most max if max > 0. hint says what to write instead of an invalid value.
func (d *decoder) loopDuration(n *yaml.Node, what string, positive bool, max time.Duration, hint string) (Scalar[time.Duration], bool) {
	if r := d.resolve(n); r == nil {
		return Scalar[time.Duration]{}, false
	} else if r.Kind == yaml.ScalarNode && (r.Tag == "!!int" || r.Tag == "!!float") {
		d.l.ErrorHint(d.at(r), "wrong-type", fmt.Sprintf("write it with a unit, such as %ss or %sm", r.Value, r.Value),
			"%s must be a duration, not a number", what)
		return Scalar[time.Duration]{}, false
	}
	s, ok := d.str(n, what)
	if !ok {
		return Scalar[time.Duration]{}, false
	}
	v, err := time.ParseDuration(s.Value)
	switch {
	case err != nil:
		d.l.ErrorHint(s.Pos, "invalid-value", hint, "%s %q is not a duration", what, s.Value)
	case positive && v <= 0:
		d.l.ErrorHint(s.Pos, "invalid-value", hint, "%s %q must be longer than 0s", what, s.Value)
	case v < 0:
		d.l.ErrorHint(s.Pos, "invalid-value", hint, "%s %q must not be negative", what, s.Value)
	case max > 0 && v > max:
		d.l.ErrorHint(s.Pos, "invalid-value", "write at most "+schedule.FormatDuration(max), "%s %q is longer than %s", what, s.Value, schedule.FormatDuration(max))
	case v%time.Millisecond != 0:
		d.l.ErrorHint(s.Pos, "invalid-value", "write e.g. "+schedule.FormatDuration(v.Truncate(time.Millisecond)), "%s %q is not a whole number of milliseconds", what, s.Value)
	default:
		return Scalar[time.Duration]{Value: v, Pos: s.Pos}, true
	}
	return Scalar[time.Duration]{}, false
}

// ParseProjectConfig parses lush.yaml.
func ParseProjectConfig(file string, data []byte, l *diag.List) *ProjectConfig {
	d := &decoder{file: file, l: l}
	root := d.document(data)
	if root == nil {
		return nil
	}
	p := &ProjectConfig{File: file, Pos: d.at(root)}
	ok := d.fields(root, "lush.yaml", projectFields, []string{"project"}, func(k string, v *yaml.Node) {
		switch k {
		case "project":
			if s, ok := d.str(v, "project"); ok {
				p.Name = s
				if !toolref.ValidAgentName(s.Value) {
					l.ErrorHint(s.Pos, "invalid-name", "use lower-case letters, digits and '-', starting with a letter", "project name %q is not valid", s.Value)
				}
			}
		case "models":
			d.models(v, p)
		case "skills_dir":
			p.SkillsDir, _ = d.str(v, "skills_dir")
		case "service_accounts":
			d.seq(v, "service_accounts", func(item *yaml.Node) {
				if sa, ok := d.serviceAccount(item); ok {
					p.ServiceAccounts = append(p.ServiceAccounts, sa)
				}
			})
		case "servers":
			d.keyedByRef(v, "servers", func(ref Scalar[string], r toolref.Ref, body *yaml.Node) {
				if s, ok := d.server(ref, r, body); ok {
					p.Servers = append(p.Servers, s)
				}
			})
		case "tool_classes":
			d.keyedByRef(v, "tool_classes", func(ref Scalar[string], r toolref.Ref, body *yaml.Node) {
				p.ToolClasses = append(p.ToolClasses, d.toolClasses(ref, r, body)...)
			})
		case "tool_grants":
			d.seq(v, "tool_grants", func(item *yaml.Node) {
				if g, ok := d.toolGrant(item); ok {
					p.ToolGrants = append(p.ToolGrants, g)
				}
			})
		case "mcp_credentials":
			d.keyedByRef(v, "mcp_credentials", func(ref Scalar[string], _ toolref.Ref, body *yaml.Node) {
				p.Credentials = append(p.Credentials, d.credentials(ref, body)...)
			})
		case "authorization":
			d.fields(v, "authorization", authzFields, nil, func(k string, v *yaml.Node) {
				switch k {
				case "max_call_depth":
					p.Authorization.MaxCallDepth, _ = d.integer(v, "max_call_depth", 1, 64)
				case "approval_required_for":
					p.Authorization.ApprovalSet = true
					d.seq(v, "approval_required_for", func(item *yaml.Node) {
						if s, ok := d.enum(item, "risk class", RiskClasses); ok {
							p.Authorization.ApprovalRequiredFor = append(p.Authorization.ApprovalRequiredFor, s)
						}
					})
				}
			})
		case "roles":
			p.Roles = d.roles(v)
		case "rate_limits":
			d.seq(v, "rate_limits", func(item *yaml.Node) {
				if r, ok := d.rateLimit(item); ok {
					p.RateLimits = append(p.RateLimits, r)
				}
			})
		case "budgets":
			d.seq(v, "budgets", func(item *yaml.Node) {
				if b, ok := d.budget(item); ok {
					p.Budgets = append(p.Budgets, b)
				}
			})
		}
	})
	if !ok {
		return nil
	}
	return p
}

// roles decodes lush.yaml roles: a mapping from a project role to the list of principals that
// hold it, such as audit: [group:auditors, user:carol].
func (d *decoder) roles(n *yaml.Node) []Role {
	ps, ok := d.pairs(n, "roles")
	if !ok {
		return nil
	}
	var out []Role
	for _, p := range ps {
		name := Scalar[string]{Value: p.key, Pos: d.at(p.k)}
		if !slices.Contains(ProjectRoles, p.key) {
			hint := "the roles are " + strings.Join(ProjectRoles[:len(ProjectRoles)-1], ", ") + " and " + ProjectRoles[len(ProjectRoles)-1]
			if c := diag.DidYouMean(p.key, ProjectRoles); c != "" {
				hint = c + " (" + hint + ")"
			}
			d.l.ErrorHint(name.Pos, "unknown-role", hint, "unknown role %q in roles", p.key)
			continue
		}
		what := "roles." + p.key
		if v := d.resolve(p.v); v != nil && v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
			d.l.ErrorHint(d.at(v), "wrong-type", fmt.Sprintf("write a list of principals: %s: [%s]", p.key, v.Value),
				"%s must be a list of principals, not a string", what)
			continue
		}
		out = append(out, Role{Name: name, Principals: d.strs(p.v, what)})
	}
	return out
}

// rateLimit decodes one entry of rate_limits.
func (d *decoder) rateLimit(n *yaml.Node) (RateLimit, bool) {
	r := RateLimit{Pos: d.at(n)}
	burstOK := true
	ok := d.fields(n, "rate limit", rateLimitFields, []string{"rate"}, func(k string, v *yaml.Node) {
		switch k {
		case "principal":
			if s, ok := d.str(v, "principal"); ok {
				if _, err := principal.Parse(s.Value); err != nil {
					hint := "write user:<id>, group:<name> or serviceaccount:<name>"
					if perr, ok := err.(*principal.Error); ok {
						if perr.Hint != "" {
							hint = perr.Hint
						}
						d.l.ErrorHint(s.Pos, "invalid-principal", hint, "rate_limits: %s", perr.Problem)
					} else {
						d.l.ErrorHint(s.Pos, "invalid-principal", hint, "rate_limits: %v", err)
					}
				} else {
					r.Principal = s
				}
			}
		case "tool":
			if s, ok := d.str(v, "tool"); ok {
				if _, err := toolref.Parse(s.Value); err != nil {
					d.l.Errorf(s.Pos, "invalid-tool-ref", "%v", err)
				} else {
					r.Tool = s
				}
			}
		case "rate":
			hint := "write requests per second, minute or hour: 5/s, 100/m or 1000/h"
			if rn := d.resolve(v); rn != nil && rn.Kind == yaml.ScalarNode && rn.Tag == "!!int" {
				d.l.ErrorHint(d.at(rn), "wrong-type", fmt.Sprintf("write it with a unit, such as %s/s or %s/m", rn.Value, rn.Value),
					"rate %s has no unit", rn.Value)
				return
			}
			if s, ok := d.str(v, "rate"); ok {
				if count, per, ok := manifest.ParseRate(s.Value); ok {
					r.Rate, r.Count, r.Per = s, count, per
				} else {
					d.l.ErrorHint(s.Pos, "invalid-value", hint, "rate %q is not a whole number from 1 to %d per s, m or h", s.Value, manifest.MaxRateCount)
				}
			}
		case "burst":
			r.Burst, burstOK = d.integer(v, "burst", 1, manifest.MaxBurst)
		}
	})
	if !ok || !burstOK {
		return r, false
	}
	switch {
	case r.Principal.Set() && r.Tool.Set():
		d.l.ErrorHint(r.Tool.Pos, "conflicting-fields", "write one entry per principal and one per tool",
			"a rate limit applies to a principal or to a tool, not both")
		return r, false
	case !r.Principal.Set() && !r.Tool.Set():
		if !d.hasKey(n, "principal") && !d.hasKey(n, "tool") {
			d.l.ErrorHint(r.Pos, "missing-field", "add principal: user:<id>, group:<name> or serviceaccount:<name>, or tool: <tool reference>",
				"rate limit names neither a principal nor a tool")
		}
		return r, false
	}
	return r, r.Rate.Set()
}

// hasKey reports whether the mapping n has key k.
func (d *decoder) hasKey(n *yaml.Node, k string) bool {
	n = d.resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == k {
			return true
		}
	}
	return false
}

func (d *decoder) serviceAccount(n *yaml.Node) (ServiceAccount, bool) {
	sa := ServiceAccount{Pos: d.at(n)}
	if r := d.resolve(n); r != nil && r.Kind == yaml.ScalarNode {
		sa.Name, _ = d.str(r, "service account name")
	} else if !d.fields(n, "service account", serviceAcctField, []string{"name"}, func(k string, v *yaml.Node) {
		if k == "name" {
			sa.Name, _ = d.str(v, "name")
		} else {
			sa.Description, _ = d.str(v, "description")
		}
	}) {
		return sa, false
	}
	if !sa.Name.Set() {
		return sa, false
	}
	if strings.HasPrefix(sa.Name.Value, "serviceaccount:") {
		d.l.ErrorHint(sa.Name.Pos, "invalid-name", "write name: "+strings.TrimPrefix(sa.Name.Value, "serviceaccount:"), "declare the service account by its name, without the serviceaccount: prefix")
		return sa, false
	}
	if !principal.ValidServiceAccountName(sa.Name.Value) {
		d.l.ErrorHint(sa.Name.Pos, "invalid-name", "use lower-case letters, digits, '-', '_' and '.', starting with a letter or digit (at most 63)", "service account name %q is not valid", sa.Name.Value)
		return sa, false
	}
	return sa, true
}

// keyedByRef walks a mapping whose keys are tool references.
func (d *decoder) keyedByRef(n *yaml.Node, what string, fn func(ref Scalar[string], r toolref.Ref, body *yaml.Node)) {
	ps, ok := d.pairs(n, what)
	if !ok {
		return
	}
	for _, p := range ps {
		ref := Scalar[string]{Value: p.key, Pos: d.at(p.k)}
		r, err := toolref.Parse(p.key)
		if err != nil {
			d.l.Errorf(ref.Pos, "invalid-tool-ref", "%v", err)
			continue
		}
		fn(ref, r, p.v)
	}
}

func (d *decoder) server(ref Scalar[string], r toolref.Ref, n *yaml.Node) (Server, bool) {
	s := Server{Ref: ref, Pos: ref.Pos}
	if r.Kind != toolref.MCP {
		d.l.ErrorHint(ref.Pos, "not-a-server", "servers: configures mcp:// servers only; remove this entry", "%s is not an MCP server", ref.Value)
		return s, false
	}
	ok := d.fields(n, "server "+ref.Value, serverFields, nil, func(k string, v *yaml.Node) {
		switch k {
		case "url":
			if u, ok := d.str(v, "url"); ok {
				s.URL = u
				if !strings.HasPrefix(u.Value, "http://") && !strings.HasPrefix(u.Value, "https://") {
					d.l.ErrorHint(u.Pos, "invalid-value", "write an http:// or https:// URL", "url %q is not an HTTP URL", u.Value)
				}
			}
		case "transport":
			s.Transport, _ = d.enum(v, "transport", Transports)
		case "args":
			s.Args = d.strs(v, "args")
		case "env":
			ps, _ := d.pairs(v, "env")
			for _, p := range ps {
				name := Scalar[string]{Value: p.key, Pos: d.at(p.k)}
				if !envName.MatchString(p.key) {
					d.l.Errorf(name.Pos, "invalid-value", "%q is not an environment variable name", p.key)
					continue
				}
				if val, ok := d.str(p.v, "env "+p.key); ok {
					s.Env = append(s.Env, EnvVar{Name: name, Value: val})
				}
			}
		case "timeout":
			s.Timeout, _ = d.duration(v, "timeout", maxCallTimeout)
		}
	})
	if r.Stdio() && (s.URL.Set() || s.Transport.Set()) {
		d.l.ErrorHint(ref.Pos, "stdio-server-url", "remove url: and transport:; they apply to remote servers", "%s is a local stdio server", ref.Value)
	}
	if r.Remote() && (len(s.Args) > 0 || len(s.Env) > 0) {
		d.l.ErrorHint(ref.Pos, "remote-server-args", "remove args: and env:; they apply to stdio servers started by Lush", "%s is a remote server", ref.Value)
	}
	return s, ok
}

func (d *decoder) toolClasses(ref Scalar[string], r toolref.Ref, n *yaml.Node) []ToolClass {
	if r.SingleTool() {
		if c := d.class(n); c != nil {
			return []ToolClass{{Ref: ref, Class: *c}}
		}
		return nil
	}
	if rn := d.resolve(n); rn != nil && rn.Kind == yaml.ScalarNode {
		d.l.ErrorHint(d.at(rn), "wrong-type", fmt.Sprintf(`write "*": %s to classify every tool of the server`, rn.Value),
			"an MCP server's classes are a mapping from tool name to class")
		return nil
	}
	ps, ok := d.pairs(n, "tool_classes of "+ref.Value)
	if !ok {
		return nil
	}
	var out []ToolClass
	for _, p := range ps {
		name := Scalar[string]{Value: p.key, Pos: d.at(p.k)}
		if p.key != "*" && !d.checkMCPToolName(name) {
			continue
		}
		if c := d.class(p.v); c != nil {
			out = append(out, ToolClass{Ref: ref, Tool: name, Class: *c})
		}
	}
	return out
}

func (d *decoder) toolGrant(n *yaml.Node) (ToolGrant, bool) {
	g := ToolGrant{Pos: d.at(n)}
	ok := d.fields(n, "tool grant", toolGrantFields, toolGrantFields, func(k string, v *yaml.Node) {
		switch k {
		case "tool":
			if s, ok := d.str(v, "tool"); ok {
				if _, err := toolref.Parse(s.Value); err != nil {
					d.l.Errorf(s.Pos, "invalid-tool-ref", "%v", err)
				} else {
					g.Tool = s
				}
			}
		case "grants":
			d.seq(v, "grants", func(item *yaml.Node) {
				gr := Grant{Pos: d.at(item)}
				if d.fields(item, "grant", grantFields, []string{"principal", "access"}, func(k string, v *yaml.Node) {
					switch k {
					case "principal":
						gr.Principal, _ = d.str(v, "principal")
					case "access":
						gr.Access, _ = d.enum(v, "access", AccessLevels)
					case "tools":
						for _, s := range d.strs(v, "tools") {
							if d.checkMCPToolName(s) {
								gr.Only = append(gr.Only, s)
							}
						}
					}
				}) && gr.Principal.Set() && gr.Access.Set() {
					g.Grants = append(g.Grants, gr)
				}
			})
		}
	})
	return g, ok && g.Tool.Set()
}

func (d *decoder) credentials(ref Scalar[string], n *yaml.Node) []Credential {
	ps, ok := d.pairs(n, "mcp_credentials of "+ref.Value)
	if !ok {
		return nil
	}
	var out []Credential
	for _, p := range ps {
		c := Credential{Tool: ref, Principal: Scalar[string]{Value: p.key, Pos: d.at(p.k)}, Pos: d.at(p.k)}
		if !d.fields(p.v, "credential", credentialFields, []string{"type"}, func(k string, v *yaml.Node) {
			switch k {
			case "type":
				c.Type, _ = d.enum(v, "type", CredentialTypes)
			case "header":
				if s, ok := d.str(v, "header"); ok {
					c.Header = s
					if !headerName.MatchString(s.Value) {
						d.l.Errorf(s.Pos, "invalid-value", "%q is not an HTTP header name", s.Value)
					}
				}
			case "env":
				for _, s := range d.strs(v, "env") {
					if envName.MatchString(s.Value) {
						c.Env = append(c.Env, s)
					} else {
						d.l.Errorf(s.Pos, "invalid-value", "%q is not an environment variable name", s.Value)
					}
				}
			case "vault":
				c.Vault, _ = d.str(v, "vault")
			case "flow":
				c.Flow, _ = d.enum(v, "flow", OAuthFlows)
			case "scopes":
				for _, s := range d.strs(v, "scopes") {
					if oauthScope.MatchString(s.Value) {
						c.Scopes = append(c.Scopes, s)
					} else {
						d.l.ErrorHint(s.Pos, "invalid-value", "write one scope per item, such as crm.read", "scope %q is not an OAuth scope (printable ASCII without spaces, quotes or backslashes)", s.Value)
					}
				}
			case "audience":
				c.Audience, _ = d.str(v, "audience")
				if c.Audience.Set() && strings.TrimSpace(c.Audience.Value) == "" {
					d.l.ErrorHint(c.Audience.Pos, "invalid-value", "remove it to use the server's URL, or name the audience the upstream expects", "audience is empty")
				}
			case "resource":
				if s, ok := d.str(v, "resource"); ok {
					c.Resource = s
					if u, err := url.Parse(s.Value); err != nil || !u.IsAbs() || u.Fragment != "" || (u.Scheme != "https" && u.Scheme != "http") {
						d.l.ErrorHint(s.Pos, "invalid-value", "write the upstream's absolute URL, such as https://crm.example.com/mcp (RFC 8707)", "resource %q is not an absolute http(s) URL without a fragment", s.Value)
					}
				}
			}
		}) || !c.Type.Set() {
			continue
		}
		d.checkOAuth(&c)
		switch {
		case c.Header.Set() && c.Type.Value != "api_key":
			d.l.ErrorHint(c.Header.Pos, "invalid-field", "remove header:, or use type: api_key", "header: applies to type api_key only")
		case len(c.Env) > 0 && c.Type.Value != "env":
			d.l.ErrorHint(c.Pos, "invalid-field", "remove env:, or use type: env", "env: applies to type env only")
		case c.Type.Value == "env" && len(c.Env) == 0:
			d.l.ErrorHint(c.Type.Pos, "missing-field", "add env: [VARIABLE_NAME, …]", "type env needs the names of the variables it sets")
		}
		out = append(out, c)
	}
	return out
}

// checkOAuth checks the fields of an OAuth credential's flow: flow only with type oauth;
// scopes, audience and resource only with a flow (a stored static token has none); client
// credentials only for service accounts (the token is the gateway's own, not a user's); a Vault
// path only where something is stored (a static token or an authorization-code grant).
func (d *decoder) checkOAuth(c *Credential) {
	if !c.Flow.Set() {
		if c.Type.Value == "oauth" {
			for _, f := range []struct {
				set  bool
				pos  diag.Pos
				name string
			}{{len(c.Scopes) > 0, c.Pos, "scopes"}, {c.Audience.Set(), c.Audience.Pos, "audience"}, {c.Resource.Set(), c.Resource.Pos, "resource"}} {
				if f.set {
					d.l.ErrorHint(f.pos, "invalid-field", "add flow: token_exchange, authorization_code or client_credentials, or remove "+f.name+":",
						"%s: applies to an oauth credential with a flow; without one the token is stored as it is", f.name)
				}
			}
		}
		return
	}
	if c.Type.Value != "oauth" {
		d.l.ErrorHint(c.Flow.Pos, "invalid-field", "use type: oauth, or remove flow:", "flow: applies to type oauth only")
		return
	}
	switch c.Flow.Value {
	case "client_credentials":
		if !strings.HasPrefix(c.Principal.Value, "serviceaccount:") {
			d.l.ErrorHint(c.Flow.Pos, "credential-flow", "use flow: token_exchange or authorization_code for users and groups, or declare it for a serviceaccount:",
				"flow client_credentials gets the gateway's own token, which names no user: it is for service accounts, not %s", c.Principal.Value)
		}
		fallthrough
	case "token_exchange":
		if c.Vault.Set() {
			d.l.ErrorHint(c.Vault.Pos, "invalid-field", "remove vault:; the gateway's client secrets are in its config (credentials.oauth)",
				"vault: names where a stored credential is; flow %s stores none", c.Flow.Value)
		}
	}
}

// ParseLocalTool parses tools/<name>/tool.yaml.
func ParseLocalTool(file, dir, name string, data []byte, l *diag.List) *LocalTool {
	d := &decoder{file: file, l: l}
	root := d.document(data)
	if root == nil {
		return nil
	}
	t := &LocalTool{File: file, Dir: dir}
	var access, risk *yaml.Node
	ok := d.fields(root, "tool.yaml", localToolFields, []string{"description", "command"}, func(k string, v *yaml.Node) {
		switch k {
		case "name":
			if s, ok := d.str(v, "name"); ok {
				t.Name = s
				if s.Value != name {
					l.ErrorHint(s.Pos, "name-mismatch", "remove name: or make it match the directory", "tool name %q does not match its directory %s", s.Value, dir)
				}
			}
		case "description":
			t.Description, _ = d.str(v, "description")
		case "command":
			if r := d.resolve(v); r != nil && r.Kind == yaml.ScalarNode {
				if s, ok := d.str(r, "command"); ok {
					t.Command = []Scalar[string]{s}
				}
			} else {
				t.Command = d.strs(v, "command")
			}
		case "input_schema":
			t.SchemaPos = d.at(v)
			t.InputSchema, _ = d.toJSON(v, "input_schema")
		case "output_schema":
			t.OutSchemaPos = d.at(v)
			t.OutputSchema, _ = d.toJSON(v, "output_schema")
		case "access":
			access = v
		case "risk":
			risk = v
		case "timeout":
			t.Timeout, _ = d.duration(v, "timeout", maxCallTimeout)
		}
	})
	if !ok {
		return nil
	}
	if access != nil || risk != nil {
		at := access
		if at == nil {
			at = risk
		}
		t.Class = d.classFrom(d.at(at), access, risk)
	}
	if t.Name.Value == "" {
		t.Name = Scalar[string]{Value: name, Pos: diag.Pos{File: file}}
	}
	return t
}
