// Package graph derives, from a build, the graph of who may call whom: the principals that may
// invoke each agent (its ACL), the agents each agent calls (lush:// tools in its allowlist), the
// tools each agent may use, the loops that fire each agent and the service accounts they run as,
// and who may trigger or read each loop. The graph is computed from the build every time and
// never stored (seed 003: the org graph is derived). It renders as Graphviz DOT or Mermaid.
package graph

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/toolref"
)

// The kinds of node.
const (
	KindPrincipal = "principal" // user:, group:, serviceaccount:
	KindAgent     = "agent"
	KindTool      = "tool"
	KindLoop      = "loop"
)

// The kinds of edge.
const (
	EdgeInvokes = "invokes" // principal → agent: the agent's ACL (label: the role)
	EdgeCalls   = "calls"   // agent → agent: a lush:// tool (label: the access)
	EdgeUses    = "uses"    // agent → tool: the allowlist (label: the access, and the tools it is narrowed to)
	EdgeFires   = "fires"   // loop → agent: the loop's schedule (label: the schedule)
	EdgeRunsAs  = "runs_as" // loop → service account
	EdgeLoopACL = "loop"    // principal → loop: the loop's ACL (label: the role)
)

// Node is a principal, an agent, a tool or a loop.
type Node struct {
	ID   string `json:"id"` // the principal, agent name, tool reference or loop name
	Kind string `json:"kind"`
}

// Edge is a relation between two nodes.
type Edge struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Kind  string `json:"kind"`
	Label string `json:"label,omitempty"`
}

// Graph is the derived graph of a build: nodes and edges in a stable order.
type Graph struct {
	Revision string `json:"revision"`
	Nodes    []Node `json:"nodes"`
	Edges    []Edge `json:"edges"`
}

// key identifies a node: the same name can be an agent and a loop.
func key(kind, id string) string { return kind + "\x00" + id }

// Derive computes the graph of m (build hash).
func Derive(m *manifest.Manifest, hash string) *Graph {
	g := &Graph{Revision: hash}
	seen := map[string]bool{}
	node := func(kind, id string) string {
		k := key(kind, id)
		if !seen[k] {
			seen[k] = true
			g.Nodes = append(g.Nodes, Node{ID: id, Kind: kind})
		}
		return k
	}
	edge := func(fromKind, from, toKind, to, kind, label string) {
		g.Edges = append(g.Edges, Edge{From: node(fromKind, from), To: node(toKind, to), Kind: kind, Label: label})
	}
	for _, a := range m.Agents {
		node(KindAgent, a.Name)
		for _, e := range a.ACL {
			edge(KindPrincipal, e.Principal, KindAgent, a.Name, EdgeInvokes, e.Role)
		}
		for _, t := range a.Tools {
			if r, err := toolref.Parse(t.Ref); err == nil && r.Kind == toolref.Agent {
				edge(KindAgent, a.Name, KindAgent, r.Name, EdgeCalls, t.Access)
				continue
			}
			label := t.Access
			if len(t.Only) > 0 {
				label += ", only " + strings.Join(t.Only, ", ")
			}
			edge(KindAgent, a.Name, KindTool, t.Ref, EdgeUses, label)
		}
	}
	for _, l := range m.Loops {
		edge(KindLoop, l.Name, KindAgent, l.Agent, EdgeFires, l.Schedule)
		edge(KindLoop, l.Name, KindPrincipal, l.RunAs, EdgeRunsAs, "")
		for _, e := range l.ACL {
			edge(KindPrincipal, e.Principal, KindLoop, l.Name, EdgeLoopACL, e.Role)
		}
	}
	order := map[string]int{KindPrincipal: 0, KindLoop: 1, KindAgent: 2, KindTool: 3}
	slices.SortFunc(g.Nodes, func(a, b Node) int {
		return cmp.Or(cmp.Compare(order[a.Kind], order[b.Kind]), strings.Compare(a.ID, b.ID))
	})
	slices.SortFunc(g.Edges, func(a, b Edge) int {
		return cmp.Or(strings.Compare(a.From, b.From), strings.Compare(a.To, b.To), strings.Compare(a.Kind, b.Kind), strings.Compare(a.Label, b.Label))
	})
	g.Edges = slices.Compact(g.Edges)
	for i := range g.Edges { // the keys were for sorting; the edges name their nodes by id
		g.Edges[i].From = strings.SplitN(g.Edges[i].From, "\x00", 2)[1]
		g.Edges[i].To = strings.SplitN(g.Edges[i].To, "\x00", 2)[1]
	}
	return g
}

// ids numbers the nodes for renderers whose ids must be plain names.
func (g *Graph) ids() map[string]string {
	out := make(map[string]string, len(g.Nodes))
	for i, n := range g.Nodes {
		out[key(n.Kind, n.ID)] = fmt.Sprintf("n%d", i)
	}
	return out
}

// endpoints are the kinds of an edge's two ends.
func endpoints(e Edge) (from, to string) {
	switch e.Kind {
	case EdgeInvokes:
		return KindPrincipal, KindAgent
	case EdgeCalls:
		return KindAgent, KindAgent
	case EdgeUses:
		return KindAgent, KindTool
	case EdgeFires:
		return KindLoop, KindAgent
	case EdgeRunsAs:
		return KindLoop, KindPrincipal
	default:
		return KindPrincipal, KindLoop
	}
}

var dotShape = map[string]string{KindPrincipal: "ellipse", KindAgent: "box", KindTool: "component", KindLoop: "hexagon"}

// DOT renders the graph for Graphviz.
func (g *Graph) DOT() string {
	ids := g.ids()
	var b strings.Builder
	fmt.Fprintf(&b, "// Who may call whom in build %s (lushctl graph). Render: dot -Tsvg\n", manifest.Short(g.Revision))
	b.WriteString("digraph lush {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n")
	for _, n := range g.Nodes {
		fmt.Fprintf(&b, "  %s [label=%q, shape=%s];\n", ids[key(n.Kind, n.ID)], n.ID, dotShape[n.Kind])
	}
	for _, e := range g.Edges {
		fk, tk := endpoints(e)
		label := e.Kind
		if e.Label != "" {
			label += " (" + e.Label + ")"
		}
		fmt.Fprintf(&b, "  %s -> %s [label=%q];\n", ids[key(fk, e.From)], ids[key(tk, e.To)], label)
	}
	b.WriteString("}\n")
	return b.String()
}

var mermaidShape = map[string][2]string{KindPrincipal: {"([", "])"}, KindAgent: {"[", "]"}, KindTool: {"[[", "]]"}, KindLoop: {"{{", "}}"}}

// Mermaid renders the graph as a Mermaid flowchart.
func (g *Graph) Mermaid() string {
	ids := g.ids()
	var b strings.Builder
	fmt.Fprintf(&b, "%%%% Who may call whom in build %s (lushctl graph)\nflowchart LR\n", manifest.Short(g.Revision))
	for _, n := range g.Nodes {
		s := mermaidShape[n.Kind]
		fmt.Fprintf(&b, "  %s%s\"%s\"%s\n", ids[key(n.Kind, n.ID)], s[0], mermaidText(n.ID), s[1])
	}
	for _, e := range g.Edges {
		fk, tk := endpoints(e)
		label := e.Kind
		if e.Label != "" {
			label += ": " + e.Label
		}
		fmt.Fprintf(&b, "  %s -->|\"%s\"| %s\n", ids[key(fk, e.From)], mermaidText(label), ids[key(tk, e.To)])
	}
	return b.String()
}

// mermaidText escapes a label for a quoted Mermaid string.
func mermaidText(s string) string {
	return strings.NewReplacer(`"`, "#quot;", "|", "#124;").Replace(s)
}
