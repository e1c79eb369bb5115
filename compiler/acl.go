package compiler

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/principal"
	"github.com/lush-agents/lush/internal/toolref"
	"github.com/lush-agents/lush/vault"
)

// checkACL validates the authorization graph: principal formats, declared service accounts,
// loops that can actually run, grants and credentials against the allowlists.
func (b *build) checkACL() {
	declared := map[string]diag.Pos{}
	for _, sa := range b.cfg.ServiceAccounts {
		if first, dup := declared[sa.Name.Value]; dup {
			b.l.ErrorHint(sa.Name.Pos, "duplicate-service-account", fmt.Sprintf("remove one; the first is at line %d", first.Line), "service account %q is declared twice", sa.Name.Value)
			continue
		}
		declared[sa.Name.Value] = sa.Name.Pos
	}
	used := map[string]bool{}
	// principal parses p and checks that a service account it names is declared.
	check := func(s spec.Scalar[string], what string) (principal.Principal, bool) {
		p, err := principal.Parse(s.Value)
		if perr, ok := err.(*principal.Error); ok {
			b.l.ErrorHint(s.Pos, "invalid-principal", perr.Hint, "%s: %s", what, perr.Problem)
			return p, false
		}
		if p.Kind == principal.ServiceAccount {
			used[p.Name] = true
			if _, ok := declared[p.Name]; !ok {
				b.l.ErrorHint(s.Pos, "undeclared-service-account", b.saHint(p.Name, declared),
					"%s names service account %q, which lush.yaml does not declare", what, p.Name)
				return p, false
			}
		}
		return p, true
	}

	for _, name := range b.agentNames() {
		a := b.agents[name]
		if len(a.ACL) == 0 {
			b.l.WarnHint(a.Name.Pos, "empty-acl", "add acl: entries with role: execute", "agent %q has no acl: nobody can invoke it", name)
		}
		for _, e := range a.ACL {
			check(e.Principal, "acl")
		}
	}
	for _, lp := range b.p.Loops {
		for _, e := range lp.ACL {
			check(e.Principal, "acl")
		}
		if !lp.RunAs.Set() {
			continue
		}
		p, ok := check(lp.RunAs, "run_as")
		if !ok {
			continue
		}
		if p.Kind != principal.ServiceAccount {
			b.l.ErrorHint(lp.RunAs.Pos, "run-as-not-service-account", "loops run as a service account declared in lush.yaml: run_as: serviceaccount:<name>",
				"run_as %q is not a service account", lp.RunAs.Value)
			continue
		}
		if a := b.agents[lp.Agent.Value]; a != nil && !hasRole(a.ACL, lp.RunAs.Value, "execute") {
			b.l.ErrorHint(lp.RunAs.Pos, "run-as-cannot-execute", fmt.Sprintf("add {principal: %s, role: execute} to the acl of %s", lp.RunAs.Value, a.File),
				"loop %q runs as %s, which may not execute agent %q: every firing would be denied", lp.Name.Value, lp.RunAs.Value, a.Name.Value)
		}
	}
	b.checkGrants(check)
	b.checkCredentials(check)
	b.checkRoles(check)
	for _, r := range b.cfg.RateLimits {
		if r.Principal.Set() {
			check(r.Principal, "rate_limits")
		}
	}
	b.checkBudgets(check)
	for _, sa := range b.cfg.ServiceAccounts {
		if !used[sa.Name.Value] {
			b.l.WarnHint(sa.Name.Pos, "unused-service-account", "use it as a loop's run_as, in an acl or a grant, or remove it",
				"service account %q is declared but never used", sa.Name.Value)
		}
	}
}

// checkRoles checks the principals of lush.yaml roles: (the role names were checked when
// parsing) and warns about a principal listed twice under one role.
func (b *build) checkRoles(check func(spec.Scalar[string], string) (principal.Principal, bool)) {
	for _, r := range b.cfg.Roles {
		seen := map[string]diag.Pos{}
		for _, p := range r.Principals {
			if first, dup := seen[p.Value]; dup {
				b.l.WarnHint(p.Pos, "duplicate-role-member", fmt.Sprintf("remove it; the first is at line %d", first.Line),
					"%s is listed twice under roles.%s", p.Value, r.Name.Value)
				continue
			}
			seen[p.Value] = p.Pos
			check(p, "roles."+r.Name.Value)
		}
	}
}

func (b *build) saHint(name string, declared map[string]diag.Pos) string {
	if c := diag.DidYouMean(name, sortedKeys(declared)); c != "" {
		return c
	}
	return fmt.Sprintf("declare it in lush.yaml: service_accounts: [{name: %s}]", name)
}

// hasRole reports whether acl gives p (or group:everyone) role.
func hasRole(acl []spec.ACLEntry, p, role string) bool {
	for _, e := range acl {
		if (e.Principal.Value == p || e.Principal.Value == principal.Everyone) && e.Role.Value == role {
			return true
		}
	}
	return false
}

func (b *build) checkGrants(check func(spec.Scalar[string], string) (principal.Principal, bool)) {
	type key struct{ tool, principal, access, only string }
	seen := map[key]diag.Pos{}
	for _, tg := range b.cfg.ToolGrants {
		ref, _ := toolref.Parse(tg.Tool.Value)
		ti := b.tools[tg.Tool.Value]
		if ti == nil {
			b.l.WarnHint(tg.Tool.Pos, "orphaned-grant", b.refHint(tg.Tool.Value, "add the tool to an agent's tools, or remove the grant"),
				"tool_grants names %s, which no agent's tools allowlist includes: the grant can never be used", tg.Tool.Value)
		}
		for _, g := range tg.Grants {
			check(g.Principal, "grant")
			if len(g.Only) > 0 && ref.SingleTool() {
				b.l.ErrorHint(g.Only[0].Pos, "narrowing-single-tool", "remove tools: from this grant", "%s is a single tool; only MCP server grants can name tools", ref)
			}
			only := ""
			for _, o := range g.Only {
				only += o.Value + ","
			}
			k := key{tg.Tool.Value, g.Principal.Value, g.Access.Value, only}
			if first, dup := seen[k]; dup {
				b.l.WarnHint(g.Pos, "duplicate-grant", fmt.Sprintf("remove it; the same grant is at line %d", first.Line), "duplicate grant")
			}
			seen[k] = g.Pos
			if ti == nil {
				continue
			}
			if g.Access.Value == "write" && !anyWriter(ti) {
				b.l.WarnHint(g.Access.Pos, "write-grant-unused", "grant read, or give an agent access: write to the tool",
					"%s gets write on %s, but no agent may use it at write access", g.Principal.Value, tg.Tool.Value)
			}
			for _, o := range g.Only {
				if !anyAllowsName(ti, o.Value) {
					b.l.WarnHint(o.Pos, "orphaned-grant", "", "no agent's allowlist includes tool %q of %s", o.Value, tg.Tool.Value)
				}
			}
		}
	}
}

func anyWriter(ti *toolInfo) bool {
	return slices.ContainsFunc(ti.uses, func(u toolUse) bool { return u.entry.Access.Value == "write" })
}

func anyAllowsName(ti *toolInfo, name string) bool {
	return slices.ContainsFunc(ti.uses, func(u toolUse) bool { return admits(u.entry, name) })
}

// admits reports whether an allowlist entry covers tool name: it names no tools, or names this one.
func admits(e *spec.ToolEntry, name string) bool {
	return len(e.Only) == 0 || slices.ContainsFunc(e.Only, func(nt spec.NamedTool) bool { return nt.Name.Value == name })
}

func (b *build) checkCredentials(check func(spec.Scalar[string], string) (principal.Principal, bool)) {
	seen := map[string]diag.Pos{}
	for _, c := range b.cfg.Credentials {
		check(c.Principal, "mcp_credentials")
		k := c.Tool.Value + "\x00" + c.Principal.Value
		if first, dup := seen[k]; dup {
			b.l.ErrorHint(c.Pos, "duplicate-credential", fmt.Sprintf("keep one; the other is at line %d", first.Line), "credential for %s on %s is declared twice", c.Principal.Value, c.Tool.Value)
		}
		seen[k] = c.Pos
		if c.Vault.Set() {
			if err := vault.CheckTemplate(c.Vault.Value); err != nil {
				b.l.ErrorHint(c.Vault.Pos, "credential-vault-path", "variables: "+strings.Join(vault.TemplateVars, ", "), "%v", err)
			}
		}
		ref, _ := toolref.Parse(c.Tool.Value)
		switch {
		case ref.Kind != toolref.MCP && ref.Kind != toolref.A2A:
			b.l.ErrorHint(c.Tool.Pos, "credential-not-mcp", "remove it: only MCP servers and A2A agents receive credentials", "%s is not an MCP server or an A2A agent", c.Tool.Value)
		case b.tools[c.Tool.Value] == nil:
			b.l.WarnHint(c.Tool.Pos, "unused-credential", b.refHint(c.Tool.Value, "remove it"), "mcp_credentials configures %s, which no agent uses", c.Tool.Value)
		case ref.Stdio() && c.Type.Value != "env":
			b.l.ErrorHint(c.Type.Pos, "credential-type", "use type: env with env: [VARIABLE, …]", "%s is a stdio server: it receives credentials as environment variables", c.Tool.Value)
		case (ref.Remote() || ref.Kind == toolref.A2A) && c.Type.Value == "env":
			b.l.ErrorHint(c.Type.Pos, "credential-type", "use bearer, oauth, api_key or basic", "%s is a remote server: it receives credentials in HTTP headers", c.Tool.Value)
		}
	}
}
