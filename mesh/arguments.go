package mesh

import (
	"fmt"
	"slices"

	"github.com/lush-agents/lush/internal/manifest"
)

// ArgumentsNeeded reports whether deciding a tools/call of tool name of the server ref by agent
// needs the call's arguments, and why: a policy reads them (the build's ArgumentReads), or the
// call may run as a write, whose stub, approval and decision-log event carry its arguments, or
// its risk class needs a person's approval, which is bound to the arguments. A call the agent's
// allowlist refuses (another server, a name outside `only`, a write by a read-only entry) is
// denied whatever its arguments, so it needs none.
func ArgumentsNeeded(m *manifest.Manifest, agent, ref, name string) (bool, string) {
	if m.ArgumentReads == nil {
		return true, "the build does not record which tools' arguments its policy reads (it was built by an older lushctl): rebuild it"
	}
	if m.ArgumentReads.Read(ref, name) {
		return true, fmt.Sprintf("a policy reads the arguments of %s (%s)", ref, name)
	}
	a, ok := m.Agent(agent)
	if !ok {
		return false, ""
	}
	i := slices.IndexFunc(a.Tools, func(t manifest.AllowedTool) bool { return t.Ref == ref })
	if i < 0 || (len(a.Tools[i].Only) > 0 && !slices.Contains(a.Tools[i].Only, name)) {
		return false, "" // refused by the allowlist
	}
	c := class(m, ref, name)
	if c.Access != "read" {
		if a.Tools[i].Access == "read" {
			return false, "" // a write by a read-only entry: refused by the allowlist
		}
		return true, fmt.Sprintf("%s (%s) is a write: its stub, its approval and its decision-log event carry its arguments", ref, name)
	}
	if slices.Contains(m.Authorization.ApprovalRequiredFor, c.Risk) {
		return true, fmt.Sprintf("%s (%s) has risk %s, which needs a person's approval of the exact call, arguments included", ref, name, c.Risk)
	}
	return false, ""
}

// class is the class of a tool as the policy sees it: the tool's own, else its server's
// default, else unknown, which counts as a write.
func class(m *manifest.Manifest, ref, name string) manifest.Class {
	if t, ok := m.Tool(ref); ok {
		if c, ok := t.Classes[name]; ok && name != "" && name != "*" {
			return c
		}
		if c, ok := t.Classes["*"]; ok {
			return c
		}
	}
	return manifest.Class{Access: "write", Risk: "write"}
}

// otherTool stands for every tool of a server that its classes do not name.
const otherTool = "\x00other"

// serverNeedsBody reports whether some tools/call agent may make of the server ref needs its
// arguments: then the route's requests are decided from their bodies.
func serverNeedsBody(m *manifest.Manifest, a *manifest.Agent, ref string) bool {
	var names []string
	if i := slices.IndexFunc(a.Tools, func(t manifest.AllowedTool) bool { return t.Ref == ref }); i >= 0 && len(a.Tools[i].Only) > 0 {
		names = a.Tools[i].Only
	} else {
		names = []string{otherTool}
		if t, ok := m.Tool(ref); ok {
			for n := range t.Classes {
				names = append(names, n)
			}
		}
		if r := m.ArgumentReads; r != nil {
			for _, t := range r.Tools {
				if t.Ref == ref || t.Ref == manifest.AnyRef {
					names = append(names, t.Names...)
				}
			}
		}
	}
	for _, n := range names {
		if n == "" || n == "*" {
			continue
		}
		if need, _ := ArgumentsNeeded(m, a.Name, ref, n); need {
			return true
		}
	}
	return false
}
