package compiler

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/lush-agents/lush/compiler/skills"
	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/toolref"
	"github.com/lush-agents/lush/policies"
	"github.com/lush-agents/lush/policies/authz"
)

// BundleRoot is the only root of every Lush bundle: data.lush.project and packages lush.*.
const BundleRoot = "lush"

// SigningKey signs bundles in OPA's .signatures.json format.
type SigningKey struct {
	Key       string // PEM-encoded private key, or the shared secret for HS256
	Algorithm string // RS256 (default), RS384, RS512, ES256, ES384, ES512, HS256, …
	KeyID     string // recorded in the signature; verifiers look it up
}

// assemble builds the manifest, its hash, the policy data and the bundle.
func (b *build) assemble(res *Result) error {
	m := b.manifest()
	data, hash, err := manifest.Encode(m)
	if err != nil {
		return err
	}
	res.Manifest, res.ManifestJSON, res.Hash = m, data, hash

	bb := bundle.Bundle{
		Manifest: bundle.Manifest{
			Revision:    hash,
			Roots:       &[]string{BundleRoot},
			RegoVersion: new(1),
			Metadata:    map[string]any{"project": m.Project, "lush_manifest": hash},
		},
		Data: PolicyData(m),
	}
	for _, f := range policies.Library() {
		bb.Modules = append(bb.Modules, bundle.ModuleFile{URL: "/" + f.Path, Path: "/" + f.Path, Raw: f.Source, Parsed: b.policy.library[f.Path]})
	}
	for _, f := range b.policy.files {
		bb.Modules = append(bb.Modules, bundle.ModuleFile{URL: "/" + f.Path, Path: "/" + f.Path, Raw: f.Source, Parsed: b.policy.project[f.Path]})
	}
	if k := b.opts.signing; k != nil {
		alg := k.Algorithm
		if alg == "" {
			alg = "RS256"
		}
		if err := bb.GenerateSignature(bundle.NewSigningConfig(k.Key, alg, ""), k.KeyID, false); err != nil {
			return fmt.Errorf("sign bundle: %w", err)
		}
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).DisableFormat(true).Write(bb); err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	res.Bundle = buf.Bytes()

	// Load the bundle back as any OPA would, and compile it, so a build never hands out a
	// bundle that does not load.
	b.l.SetStep(diag.StepBundle)
	loaded, err := bundle.NewReader(bytes.NewReader(res.Bundle)).WithSkipBundleVerification(true).WithProcessAnnotations(true).Read()
	if err != nil {
		b.l.Errorf(diag.Pos{File: spec.PoliciesDir}, "bundle-invalid", "the assembled bundle does not load: %v", err)
		return nil
	}
	c := ast.NewCompiler()
	c.Compile(loaded.ParsedModules(""))
	if c.Failed() {
		b.regoErrors(c.Errors, spec.PoliciesDir)
	}
	if err := authz.CheckIndex(&loaded); err != nil {
		b.l.Errorf(diag.Pos{File: spec.PoliciesDir}, "bundle-invalid", "the assembled bundle's index disagrees with it: %v", err)
	}
	return nil
}

// manifest assembles the resolved, sorted manifest.
func (b *build) manifest() *manifest.Manifest {
	m := &manifest.Manifest{
		Schema:        manifest.Schema,
		Project:       b.cfg.Name.Value,
		PolicyLibrary: policies.Digest(),
		Authorization: manifest.Authorization{MaxCallDepth: b.maxDepth(), ApprovalRequiredFor: slices.Clone(DefaultApprovalRisks)},
	}
	if b.cfg.Authorization.ApprovalSet {
		m.Authorization.ApprovalRequiredFor = []string{}
		for _, r := range b.cfg.Authorization.ApprovalRequiredFor {
			m.Authorization.ApprovalRequiredFor = append(m.Authorization.ApprovalRequiredFor, r.Value)
		}
	}
	m.Authorization.ApprovalRequiredFor = nonNil(sortedUnique(m.Authorization.ApprovalRequiredFor))

	for _, sa := range b.cfg.ServiceAccounts {
		m.ServiceAccounts = append(m.ServiceAccounts, manifest.ServiceAccount{Name: sa.Name.Value, Description: sa.Description.Value})
	}
	slices.SortFunc(m.ServiceAccounts, func(a, b manifest.ServiceAccount) int { return strings.Compare(a.Name, b.Name) })

	usedSkills := map[string]*skills.Skill{}
	for _, name := range b.agentNames() {
		a := b.agents[name]
		ma := manifest.Agent{Name: name, Model: a.Model.Value, ModelTarget: b.targets[name], Description: a.Description.Value, Prompt: composePrompt(a.Description.Value, b.skills[name]),
			Skills: []string{}, Tools: []manifest.AllowedTool{}}
		for _, sk := range b.skills[name] {
			ma.Skills = append(ma.Skills, sk.Ref.String())
			usedSkills[sk.Ref.String()] = sk
		}
		for _, e := range a.Tools {
			at := manifest.AllowedTool{Ref: e.Ref.Value, Access: e.Access.Value}
			for _, nt := range e.Only {
				at.Only = append(at.Only, nt.Name.Value)
			}
			at.Only = sortedUnique(at.Only)
			for _, p := range e.Paths {
				at.Paths = append(at.Paths, p.Value)
			}
			at.Paths = sortedUnique(at.Paths)
			ma.Tools = append(ma.Tools, at)
		}
		slices.SortFunc(ma.Tools, func(a, b manifest.AllowedTool) int { return strings.Compare(a.Ref, b.Ref) })
		ma.ACL = sortedACL(a.ACL)
		m.Agents = append(m.Agents, ma)
	}

	for _, lp := range b.p.Loops {
		ml := manifest.Loop{Name: lp.Name.Value, Schedule: lp.Schedule.Value, Agent: lp.Agent.Value,
			RunAs: lp.RunAs.Value, Instruction: lp.Instruction.Value, ACL: sortedACL(lp.ACL),
			Concurrency: lp.Concurrency.Value, Overlap: lp.Overlap.Value,
			TimeoutMS: lp.Timeout.Value.Milliseconds(), PhaseMS: lp.Phase.Value.Milliseconds()}
		if lp.CatchUp.Set() {
			ms := lp.CatchUp.Value.Milliseconds()
			ml.CatchUpMS = &ms
		}
		m.Loops = append(m.Loops, ml)
	}
	slices.SortFunc(m.Loops, func(a, b manifest.Loop) int { return strings.Compare(a.Name, b.Name) })

	for _, ref := range b.toolRefs() {
		m.Tools = append(m.Tools, b.manifestTool(b.tools[ref]))
	}

	for _, tg := range b.cfg.ToolGrants {
		for _, g := range tg.Grants {
			mg := manifest.Grant{Tool: tg.Tool.Value, Principal: g.Principal.Value, Access: g.Access.Value}
			for _, o := range g.Only {
				mg.Only = append(mg.Only, o.Value)
			}
			mg.Only = sortedUnique(mg.Only)
			m.Grants = append(m.Grants, mg)
		}
	}
	slices.SortFunc(m.Grants, func(a, b manifest.Grant) int {
		return strings.Compare(a.Tool+"\x00"+a.Principal+"\x00"+a.Access+"\x00"+strings.Join(a.Only, ","),
			b.Tool+"\x00"+b.Principal+"\x00"+b.Access+"\x00"+strings.Join(b.Only, ","))
	})
	m.Grants = slices.CompactFunc(m.Grants, func(a, b manifest.Grant) bool {
		return a.Tool == b.Tool && a.Principal == b.Principal && a.Access == b.Access && slices.Equal(a.Only, b.Only)
	})

	for _, c := range b.cfg.Credentials {
		mc := manifest.Credential{Tool: c.Tool.Value, Principal: c.Principal.Value, Type: c.Type.Value, Header: c.Header.Value, Vault: c.Vault.Value,
			Flow: c.Flow.Value, Audience: c.Audience.Value, Resource: c.Resource.Value}
		for _, e := range c.Env {
			mc.Env = append(mc.Env, e.Value)
		}
		for _, s := range c.Scopes {
			mc.Scopes = append(mc.Scopes, s.Value)
		}
		m.Credentials = append(m.Credentials, mc)
	}
	slices.SortFunc(m.Credentials, func(a, b manifest.Credential) int {
		return strings.Compare(a.Tool+"\x00"+a.Principal, b.Tool+"\x00"+b.Principal)
	})

	for _, key := range sortedKeys(usedSkills) {
		sk := usedSkills[key]
		m.Skills = append(m.Skills, manifest.Skill{Ref: key, Name: sk.Name, Description: sk.Description, Digest: sk.Digest, Tools: sk.Tools})
		b.p.AddDigest(sk.Dir+"/", sk.Digest)
	}
	for _, f := range b.policy.files {
		m.Policies = append(m.Policies, f.Path)
	}
	for _, t := range m.Tools {
		if t.Local != nil {
			b.p.AddDigest(t.Local.Dir+"/", t.Local.Digest)
		}
	}
	for _, in := range b.p.Inputs() {
		m.Inputs = append(m.Inputs, manifest.Input{Path: in.Path, Digest: in.Digest})
	}
	m.InputHash = inputHash(m.Inputs)
	m.Roles = b.roles()
	m.RateLimits = b.rateLimits()
	m.Budgets = b.budgets()
	m.ArgumentReads = &manifest.ArgumentReads{All: true}
	if b.policy.compiled != nil {
		m.ArgumentReads = argumentReads(b.policy.compiled)
	}
	m.ServiceAccounts, m.Agents, m.Loops, m.Tools = nonNil(m.ServiceAccounts), nonNil(m.Agents), nonNil(m.Loops), nonNil(m.Tools)
	m.Grants, m.Credentials, m.Skills, m.Policies = nonNil(m.Grants), nonNil(m.Credentials), nonNil(m.Skills), nonNil(m.Policies)
	return m
}

// roles returns lush.yaml roles: for the manifest, each role's principals sorted and unique;
// nil when lush.yaml has no roles: (so the manifests of projects without roles do not change).
func (b *build) roles() map[string][]string {
	if len(b.cfg.Roles) == 0 {
		return nil
	}
	out := map[string][]string{}
	for _, r := range b.cfg.Roles {
		var ps []string
		for _, p := range r.Principals {
			ps = append(ps, p.Value)
		}
		out[r.Name.Value] = nonNil(sortedUnique(ps))
	}
	return out
}

// rateLimits returns lush.yaml rate_limits for the manifest, defaults applied, sorted and
// unique; nil when there are none (so the manifests of projects without limits do not change).
func (b *build) rateLimits() []manifest.RateLimit {
	var out []manifest.RateLimit
	for _, r := range b.cfg.RateLimits {
		out = append(out, manifest.RateLimit{Principal: r.Principal.Value, Tool: r.Tool.Value, Rate: r.Rate.Value, Burst: r.EffectiveBurst()})
	}
	slices.SortFunc(out, func(a, b manifest.RateLimit) int {
		return cmp.Or(strings.Compare(a.Principal, b.Principal), strings.Compare(a.Tool, b.Tool),
			strings.Compare(a.Rate, b.Rate), cmp.Compare(a.Burst, b.Burst))
	})
	return slices.Compact(out)
}

// nonNil makes an empty list encode as [] rather than null, for consumers in other languages.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (b *build) manifestTool(ti *toolInfo) manifest.Tool {
	var t manifest.Tool
	if ti.ref.Kind == toolref.MCP {
		t = *b.mcpTool(ti)
	} else {
		t = manifest.Tool{Ref: ti.ref.String(), Kind: string(ti.ref.Kind)}
	}
	if ti.ref.Kind == toolref.A2A {
		t.A2A = &manifest.A2A{URL: ti.ref.DefaultURL()}
	}
	if lt := ti.local; lt != nil {
		ml := &manifest.LocalTool{Dir: lt.spec.Dir, Description: lt.spec.Description.Value, InputSchema: lt.input, OutputSchema: lt.output, Digest: lt.digest, Skill: lt.skill}
		for _, c := range lt.spec.Command {
			ml.Command = append(ml.Command, c.Value)
		}
		if lt.spec.Timeout.Set() {
			t.TimeoutMS = lt.spec.Timeout.Value.Milliseconds()
		}
		t.Local = ml
	}
	t.Classes = map[string]manifest.Class{}
	for name, c := range ti.classes {
		t.Classes[name] = c.class
	}
	return t
}

// composePrompt builds an agent's system instruction: the description first, then each skill's
// instructions in the order the spec lists the skills (seed 001's fixed layering).
func composePrompt(description string, sks []*skills.Skill) string {
	var sb strings.Builder
	sb.WriteString(strings.TrimSpace(description))
	sb.WriteString("\n")
	if len(sks) > 0 {
		sb.WriteString("\n# Skills\n")
		for _, sk := range sks {
			fmt.Fprintf(&sb, "\n## %s\n\n%s\n", sk.Name, sk.Fragment)
		}
	}
	return sb.String()
}

func sortedACL(acl []spec.ACLEntry) []manifest.ACLEntry {
	out := make([]manifest.ACLEntry, 0, len(acl))
	for _, e := range acl {
		out = append(out, manifest.ACLEntry{Principal: e.Principal.Value, Role: e.Role.Value})
	}
	slices.SortFunc(out, func(a, b manifest.ACLEntry) int {
		return strings.Compare(a.Principal+"\x00"+a.Role, b.Principal+"\x00"+b.Role)
	})
	return slices.Compact(out)
}

func sortedUnique(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

func inputHash(inputs []manifest.Input) string {
	h := sha256.New()
	for _, in := range inputs {
		fmt.Fprintf(h, "%s\x00%s\n", in.Path, in.Digest)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// PolicyData projects a manifest onto the data document of the bundle (data.lush.project),
// indexed for the policy's O(1) lookups. docs/policy.md documents its shape.
func PolicyData(m *manifest.Manifest) map[string]any {
	agents := map[string]any{}
	for _, a := range m.Agents {
		tools := map[string]any{}
		for _, t := range a.Tools {
			entry := map[string]any{"access": t.Access}
			if len(t.Only) > 0 {
				entry["only"] = t.Only
			}
			tools[t.Ref] = entry
		}
		agents[a.Name] = map[string]any{"tools": tools, "acl": aclData(a.ACL)}
	}
	loops := map[string]any{}
	for _, lp := range m.Loops {
		loops[lp.Name] = map[string]any{"agent": lp.Agent, "run_as": lp.RunAs, "acl": aclData(lp.ACL)}
	}
	grants := map[string]map[string][]any{}
	for _, g := range m.Grants {
		if grants[g.Tool] == nil {
			grants[g.Tool] = map[string][]any{}
		}
		entry := map[string]any{"access": g.Access}
		if len(g.Only) > 0 {
			entry["only"] = g.Only
		}
		grants[g.Tool][g.Principal] = append(grants[g.Tool][g.Principal], entry)
	}
	classes := map[string]any{}
	for _, t := range m.Tools {
		c := map[string]any{}
		named := map[string]any{}
		for name, cl := range t.Classes {
			v := map[string]any{"access": cl.Access, "risk": cl.Risk}
			switch name {
			case "", "*":
				c["default"] = v
			default:
				named[name] = v
			}
		}
		if len(named) > 0 {
			c["tools"] = named
		}
		if len(c) > 0 {
			classes[t.Ref] = c
		}
	}
	sas := map[string]any{}
	for _, sa := range m.ServiceAccounts {
		sas[sa.Name] = true
	}
	roles := map[string]any{}
	for role, ps := range m.Roles {
		holders := map[string]any{}
		for _, p := range ps {
			holders[p] = true
		}
		roles[role] = holders
	}
	project := map[string]any{
		"name":             m.Project,
		"settings":         map[string]any{"max_depth": m.Authorization.MaxCallDepth, "approval_risks": m.Authorization.ApprovalRequiredFor},
		"service_accounts": sas,
		"agents":           agents,
		"loops":            loops,
		"grants":           grants,
		"classes":          classes,
		"roles":            roles,
	}
	if len(m.RateLimits) > 0 {
		limits := make([]any, 0, len(m.RateLimits))
		for _, r := range m.RateLimits {
			l := map[string]any{"rate": r.Rate, "burst": r.Burst, "label": r.String()}
			if r.Principal != "" {
				l["principal"] = r.Principal
			} else {
				l["tool"] = r.Tool
			}
			limits = append(limits, l)
		}
		project["rate_limits"] = limits
	}
	if len(m.Budgets) > 0 {
		project["budgets"] = budgetData(m.Budgets)
	}
	return map[string]any{BundleRoot: map[string]any{"project": project, "index": projectIndex(project)}}
}

// projectIndex is data.lush.index: what the decision's fast path looks up instead of
// evaluating the agent, capability, privilege and class rules (authz.Index), computed from
// the JSON form of data.lush.project, as the engine that loads the bundle recomputes it.
func projectIndex(project map[string]any) map[string]any {
	raw, err := json.Marshal(project)
	if err != nil {
		panic(fmt.Sprintf("encode project data: %v", err)) // plain maps, slices, strings and numbers
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		panic(fmt.Sprintf("decode project data: %v", err))
	}
	return authz.Index(generic)
}

func aclData(acl []manifest.ACLEntry) map[string]any {
	out := map[string]any{}
	for _, e := range acl {
		role, _ := out[e.Role].(map[string]any)
		if role == nil {
			role = map[string]any{}
			out[e.Role] = role
		}
		role[e.Principal] = true
	}
	return out
}
