package authz

import (
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// RuleInfo describes a rule id that decisions name (in their reasons, approvals and rules): what
// its METADATA says and where in the bundle's policy it is written.
type RuleInfo struct {
	ID          string `json:"id"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	// File and Line locate the rule in the bundle (the base library's files under lush/, the
	// project's own as the build packed them). A rule id written by several rules (a partial set
	// with more than one body, say) is located at its first.
	File    string `json:"file"`
	Line    int    `json:"line"`
	Package string `json:"package"`
}

// Rules returns what the bundle says about every rule id its policy can name, by id: rules with
// METADATA custom.id (their title and description), and rules without it that build a reason
// object {"rule": "<id>", …} literally (located, undescribed). The map is the engine's own: do not
// change it.
func (e *Engine) Rules() map[string]RuleInfo { return e.rules }

// ruleCatalog reads the rule ids of comp's modules.
func ruleCatalog(comp *ast.Compiler) map[string]RuleInfo {
	out := map[string]RuleInfo{}
	add := func(info RuleInfo) {
		if old, ok := out[info.ID]; ok {
			// Keep a described entry over an undescribed one, then the first by location.
			if old.Title != "" || old.Description != "" || info.Title == "" && info.Description == "" {
				return
			}
		}
		out[info.ID] = info
	}
	for _, a := range comp.GetAnnotationSet().Flatten() {
		id, _ := a.Annotations.Custom["id"].(string)
		if id == "" || a.Location == nil && a.Annotations.Location == nil {
			continue
		}
		loc := a.Location // the annotated rule's
		if loc == nil {
			loc = a.Annotations.Location
		}
		info := RuleInfo{ID: id, Title: a.Annotations.Title, Description: paragraphs(a.Annotations.Description),
			File: loc.File, Line: loc.Row, Package: packageOf(a.Path)}
		add(info)
	}
	names := make([]string, 0, len(comp.Modules))
	for name := range comp.Modules {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		m := comp.Modules[name]
		for _, rule := range m.Rules {
			if rule.Location == nil {
				continue
			}
			var found []string
			ast.WalkTerms(rule, func(t *ast.Term) bool {
				obj, ok := t.Value.(ast.Object)
				if !ok {
					return false
				}
				if v := obj.Get(ast.StringTerm("rule")); v != nil {
					if s, ok := v.Value.(ast.String); ok && strings.Contains(string(s), ".") {
						found = append(found, string(s))
					}
				}
				return false
			})
			for _, id := range found {
				if _, ok := out[id]; !ok {
					out[id] = RuleInfo{ID: id, File: rule.Location.File, Line: rule.Location.Row, Package: strings.TrimPrefix(m.Package.Path.String(), "data.")}
				}
			}
		}
	}
	return out
}

// paragraphs rejoins a METADATA description's lines: the lines of a paragraph into one, the
// paragraphs separated by a blank line.
func paragraphs(s string) string {
	var out []string
	for _, p := range strings.Split(strings.TrimSpace(s), "\n\n") {
		if p = strings.Join(strings.Fields(p), " "); p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "\n\n")
}

// packageOf is the package of an annotated rule's path (data.lush.agents.call_deny → lush.agents).
func packageOf(p ast.Ref) string {
	if len(p) < 2 {
		return strings.TrimPrefix(p.String(), "data.")
	}
	return strings.TrimPrefix(p[:len(p)-1].String(), "data.")
}
