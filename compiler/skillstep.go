package compiler

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lush-agents/lush/compiler/skills"
	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/toolref"
)

// checkSkills resolves every agent's skills, verifies skills.lock, loads the local tools skills
// bring, and resolves tools/<name> references that the project itself does not define.
func (b *build) checkSkills() {
	dir := DefaultSkillsDir
	if b.cfg.SkillsDir.Set() {
		dir = b.cfg.SkillsDir.Value
	}
	res := skills.NewResolver(b.p.Dir, dir)
	b.skills = map[string][]*skills.Skill{}
	firstUse := map[skills.Ref]diag.Pos{}
	var used []*skills.Skill
	skillTools := map[string]*localTool{} // "<skill ref>/<tool>" -> tool
	for _, name := range b.agentNames() {
		a := b.agents[name]
		seen := map[string]diag.Pos{}
		for _, s := range a.Skills {
			ref, err := skills.ParseRef(s.Value)
			if err != nil {
				b.l.Errorf(s.Pos, "invalid-skill-ref", "%v", err)
				continue
			}
			if first, dup := seen[ref.Unversioned()]; dup {
				b.l.ErrorHint(s.Pos, "duplicate-skill", fmt.Sprintf("keep one; the other is at line %d", first.Line), "skill %s is listed twice", ref.Unversioned())
				continue
			}
			seen[ref.Unversioned()] = s.Pos
			_, known := firstUse[ref]
			if !known {
				firstUse[ref] = s.Pos
			}
			sk := res.Resolve(ref, s.Pos, b.l)
			if sk == nil {
				continue
			}
			if !known {
				used = append(used, sk)
				for _, tool := range sk.Tools {
					skillTools[ref.String()+"/"+tool] = b.loadSkillTool(sk, tool)
				}
			}
			b.skills[name] = append(b.skills[name], sk)
		}
	}
	lock, data := skills.ReadLock(b.p.Dir, b.l)
	if data != nil {
		b.p.AddInput(skills.LockFile, data)
	}
	lock.Verify(used, firstUse, b.l)
	b.resolveLocalRefs(skillTools)
}

// loadSkillTool reads <skill>/tools/<tool>/tool.yaml.
func (b *build) loadSkillTool(sk *skills.Skill, tool string) *localTool {
	dir := path.Join(sk.Dir, "tools", tool)
	file := path.Join(dir, spec.ToolFile)
	full := filepath.FromSlash(file)
	if !filepath.IsAbs(full) {
		full = filepath.Join(b.p.Dir, full)
	}
	data, err := os.ReadFile(full)
	if err != nil {
		b.l.Errorf(diag.Pos{File: file}, "tool-unreadable", "cannot read skill tool: %v", err)
		return nil
	}
	t := spec.ParseLocalTool(file, dir, tool, data, b.l)
	if t == nil {
		return nil
	}
	return b.checkLocalTool(t, sk.Ref.String(), b.p.Dir)
}

// resolveLocalRefs finds the tool behind every tools/<name> reference: the project's
// tools/<name>/, or one of the using agent's skills. A name both defines is ambiguous.
func (b *build) resolveLocalRefs(skillTools map[string]*localTool) {
	for _, ref := range b.toolRefs() {
		ti := b.tools[ref]
		if ti.ref.Kind != toolref.Local {
			continue
		}
		for _, u := range ti.uses {
			var offers []string
			for _, sk := range b.skills[u.agent] {
				if slices.Contains(sk.Tools, ti.ref.Name) {
					offers = append(offers, sk.Ref.String())
				}
			}
			project, inProject := b.local[ti.ref.Name]
			switch {
			case inProject && len(offers) > 0:
				b.l.Add(diag.Diagnostic{Severity: diag.Error, Step: diag.StepTools, Pos: u.entry.Ref.Pos, Code: "ambiguous-tool",
					Message:    fmt.Sprintf("%s is defined by the project (%s) and by skill %s", ti.ref, project.spec.Dir, offers[0]),
					Suggestion: "rename the project's tool"})
			case len(offers) > 1:
				b.l.Add(diag.Diagnostic{Severity: diag.Error, Step: diag.StepTools, Pos: u.entry.Ref.Pos, Code: "ambiguous-tool",
					Message:    fmt.Sprintf("%s is provided by several skills of agent %q: %s", ti.ref, u.agent, strings.Join(offers, ", ")),
					Suggestion: "drop one of the skills"})
			case len(offers) == 1:
				lt := skillTools[offers[0]+"/"+ti.ref.Name]
				if ti.local != nil && ti.local != lt {
					b.l.Add(diag.Diagnostic{Severity: diag.Error, Step: diag.StepTools, Pos: u.entry.Ref.Pos, Code: "ambiguous-tool",
						Message:    fmt.Sprintf("%s means different tools for different agents (skill %s here, %s elsewhere)", ti.ref, offers[0], describeLocal(ti.local)),
						Suggestion: "a tool reference names one tool in the whole project; use one version of the skill"})
					continue
				}
				ti.local = lt
				if lt != nil && lt.spec.Class != nil {
					b.addClass(ti, "", *lt.spec.Class)
				}
			case !inProject:
				var known []string
				for n := range b.local {
					known = append(known, "tools/"+n)
				}
				hint := diag.DidYouMean(ti.ref.String(), known)
				if hint == "" {
					hint = fmt.Sprintf("create tools/%s/tool.yaml, or add a skill that provides it", ti.ref.Name)
				}
				b.l.Add(diag.Diagnostic{Severity: diag.Error, Step: diag.StepTools, Pos: u.entry.Ref.Pos, Code: "unknown-local-tool",
					Message: fmt.Sprintf("local tool %s not found: no tools/%s/tool.yaml and no skill of agent %q provides it", ti.ref, ti.ref.Name, u.agent), Suggestion: hint})
			}
		}
	}
	// A skill's tools that the agent does not allowlist stay out of reach: say so.
	for _, name := range b.agentNames() {
		a := b.agents[name]
		for _, sk := range b.skills[name] {
			for _, tool := range sk.Tools {
				if !agentAllows(a, "tools/"+tool) {
					b.l.WarnHint(skillPos(a, sk), "skill-tool-not-allowed", fmt.Sprintf("add {name: tools/%s, access: …} to the agent's tools if it should use it", tool),
						"skill %s provides tools/%s, which agent %q does not allowlist", sk.Ref, tool, name)
				}
			}
		}
	}
}

func describeLocal(lt *localTool) string {
	if lt.skill != "" {
		return "skill " + lt.skill
	}
	return lt.spec.Dir
}

func agentAllows(a *spec.Agent, ref string) bool {
	for _, e := range a.Tools {
		if e.Ref.Value == ref {
			return true
		}
	}
	return false
}

func skillPos(a *spec.Agent, sk *skills.Skill) diag.Pos {
	for _, s := range a.Skills {
		if s.Value == sk.Ref.String() {
			return s.Pos
		}
	}
	return diag.Pos{File: a.File}
}

// UsedSkills resolves the skills the project's agents use, for writing skills.lock. Problems
// (unparsable specs, unknown skills) are returned as diagnostics.
func UsedSkills(dir string) ([]*skills.Skill, []diag.Diagnostic, error) {
	var l diag.List
	p, err := spec.Load(dir, &l)
	if err != nil {
		return nil, nil, err
	}
	l.SetStep(diag.StepSkills)
	skillsDir := DefaultSkillsDir
	if p.Config != nil && p.Config.SkillsDir.Set() {
		skillsDir = p.Config.SkillsDir.Value
	}
	res := skills.NewResolver(p.Dir, skillsDir)
	var used []*skills.Skill
	seen := map[skills.Ref]bool{}
	for _, a := range p.Agents {
		for _, s := range a.Skills {
			ref, err := skills.ParseRef(s.Value)
			if err != nil {
				l.Errorf(s.Pos, "invalid-skill-ref", "%v", err)
				continue
			}
			if sk := res.Resolve(ref, s.Pos, &l); sk != nil && !seen[ref] {
				seen[ref] = true
				used = append(used, sk)
			}
		}
	}
	return used, l.Sorted(), nil
}
