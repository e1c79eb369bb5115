package compiler

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/toolref"
)

// checkReferences checks that loops name existing agents and lush:// references name existing
// agents, warns of allowlisted lush:// agents that no grant lets anyone call, and reports agent
// call cycles. A cycle is a warning, not an error: the call-depth limit stops runaway recursion
// at run time, and some designs recurse on purpose.
func (b *build) checkReferences() {
	names := b.agentNames()
	for _, lp := range b.p.Loops {
		if lp.Agent.Set() && !strings.HasPrefix(lp.Agent.Value, "lush://") && b.agents[lp.Agent.Value] == nil {
			b.l.ErrorHint(lp.Agent.Pos, "unknown-agent", agentHint(lp.Agent.Value, names), "loop %q invokes agent %q, which does not exist", lp.Name.Value, lp.Agent.Value)
		}
	}
	edges := map[string][]string{} // agent -> agents it calls
	for _, ref := range b.toolRefs() {
		ti := b.tools[ref]
		if ti.ref.Kind != toolref.Agent {
			continue
		}
		for _, u := range ti.uses {
			if b.agents[ti.ref.Name] == nil {
				b.l.ErrorHint(u.entry.Ref.Pos, "unknown-agent", agentHint(ti.ref.Name, names), "%s names an agent that does not exist", ti.ref)
				continue
			}
			if !b.granted(ref) {
				b.l.WarnHint(u.entry.Ref.Pos, "ungranted-agent", fmt.Sprintf("grant it in lush.yaml: tool_grants: [{tool: %s, grants: [{principal: …, access: read}]}]", ref),
					"no tool_grants entry grants %s to anyone: every call %s makes to it is denied", ref, u.agent)
			}
			edges[u.agent] = append(edges[u.agent], ti.ref.Name)
		}
	}
	for _, cycle := range findCycles(names, edges) {
		from, to := cycle[0], cycle[1]
		pos := diag.Pos{File: b.agents[from].File}
		for _, e := range b.agents[from].Tools {
			if e.Ref.Value == "lush://"+to {
				pos = e.Ref.Pos
			}
		}
		b.l.WarnHint(pos, "call-cycle", fmt.Sprintf("the call-depth limit (%d) stops runaway recursion; break the cycle unless it is intended", b.maxDepth()),
			"agent call cycle: %s", strings.Join(cycle, " → "))
	}
}

// granted reports whether some tool_grants entry gives ref to some principal.
func (b *build) granted(ref string) bool {
	return slices.ContainsFunc(b.cfg.ToolGrants, func(tg spec.ToolGrant) bool { return tg.Tool.Value == ref && len(tg.Grants) > 0 })
}

func agentHint(name string, known []string) string {
	if c := diag.DidYouMean(name, known); c != "" {
		return c
	}
	if len(known) == 0 {
		return "the project has no agents: create agents/" + name + "/spec.yaml"
	}
	return "agents: " + strings.Join(known, ", ")
}

func (b *build) maxDepth() int {
	if b.cfg.Authorization.MaxCallDepth.Set() {
		return b.cfg.Authorization.MaxCallDepth.Value
	}
	return DefaultMaxCallDepth
}

// findCycles returns one cycle per strongly connected component that has one (Tarjan's
// algorithm), each starting and ending at the component's first agent by name, so reports are
// deterministic.
func findCycles(nodes []string, edges map[string][]string) [][]string {
	index := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var comps [][]string
	next := 0
	var strong func(v string)
	strong = func(v string) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range edges[v] {
			if _, seen := index[w]; !seen {
				strong(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var comp []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp = append(comp, w)
				if w == v {
					break
				}
			}
			comps = append(comps, comp)
		}
	}
	for _, v := range nodes {
		if _, seen := index[v]; !seen {
			strong(v)
		}
	}
	var cycles [][]string
	for _, comp := range comps {
		slices.Sort(comp)
		start := comp[0]
		if len(comp) == 1 && !slices.Contains(edges[start], start) {
			continue
		}
		cycles = append(cycles, cycleThrough(start, comp, edges))
	}
	slices.SortFunc(cycles, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return cycles
}

// cycleThrough finds the shortest path from start back to start inside comp (breadth first,
// neighbours in name order).
func cycleThrough(start string, comp []string, edges map[string][]string) []string {
	parent := map[string]string{}
	queue := []string{start}
	visited := map[string]bool{}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		next := slices.Clone(edges[v])
		slices.Sort(next)
		for _, w := range next {
			if !slices.Contains(comp, w) {
				continue
			}
			if w == start {
				path := []string{start}
				for u := v; u != start; u = parent[u] {
					path = append(path, u)
				}
				slices.Reverse(path[1:])
				return append(path, start)
			}
			if !visited[w] {
				visited[w] = true
				parent[w] = v
				queue = append(queue, w)
			}
		}
	}
	return []string{start, start}
}
