package spec

import (
	"fmt"
	"regexp"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/principal"
	"github.com/lush-agents/lush/internal/toolref"
)

// Budget is one entry of lush.yaml budgets: at most Limit units (tokens, tool calls or credits)
// per calendar period (UTC) for an agent, or for each caller a principal pattern matches.
// Exactly one of Agent and Principal is set, and exactly one unit.
type Budget struct {
	Name      Scalar[string]
	Agent     Scalar[string] // an agent of the project: one usage for the agent, whoever calls it
	Principal Scalar[string] // a principal id, a group or "*": each matching caller has its own usage
	Unit      Scalar[string] // one of manifest.BudgetUnits (the key written: tokens, tool_calls or credits)
	Limit     int64          // the units of one period
	Per       Scalar[string] // one of manifest.BudgetPeriods
	Costs     []BudgetCost   // credits budgets only: what a tools/call costs (default 1)
	Pos       diag.Pos
}

// BudgetCost is one entry of a credits budget's costs: the credits a tools/call of Tool (of
// its tool Name, when set; every tool of Tool otherwise) costs.
type BudgetCost struct {
	Tool    Scalar[string]
	Name    string // the MCP tool's name within an MCP server; "" for every tool of Tool
	Credits int64
	Pos     diag.Pos
}

var (
	budgetFields = []string{"name", "agent", "principal", "tokens", "tool_calls", "credits", "per", "costs"}
	budgetName   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
)

// budget decodes one entry of budgets. Cross-references (the agent exists, the tools of costs
// are known, names are unique) are checked by the compiler.
func (d *decoder) budget(n *yaml.Node) (Budget, bool) {
	b := Budget{Pos: d.at(n)}
	good := true
	var costs *yaml.Node
	ok := d.fields(n, "budget", budgetFields, []string{"name", "per"}, func(k string, v *yaml.Node) {
		switch k {
		case "name":
			s, ok := d.str(v, "budget name")
			switch {
			case !ok:
				good = false
			case !budgetName.MatchString(s.Value) || len(s.Value) > 63:
				d.l.ErrorHint(s.Pos, "invalid-name", "use lower-case letters, digits and '-', starting with a letter or digit, at most 63 characters",
					"budget name %q is not valid", s.Value)
				good = false
			default:
				b.Name = s
			}
		case "agent":
			s, ok := d.str(v, "agent")
			switch {
			case !ok:
				good = false
			case !toolref.ValidAgentName(s.Value):
				d.l.ErrorHint(s.Pos, "invalid-name", "name an agent of the project (agents/<name>/spec.yaml)", "agent name %q is not valid", s.Value)
				good = false
			default:
				b.Agent = s
			}
		case "principal":
			s, ok := d.str(v, "principal")
			if !ok {
				good = false
				return
			}
			if s.Value != manifest.AnyPrincipal {
				if _, err := principal.Parse(s.Value); err != nil {
					hint := `write user:<id>, group:<name>, serviceaccount:<name>, or "*" for every caller`
					msg := err.Error()
					if perr, ok := err.(*principal.Error); ok {
						if perr.Hint != "" {
							hint = perr.Hint
						}
						msg = perr.Problem
					}
					d.l.ErrorHint(s.Pos, "invalid-principal", hint, "budgets: %s", msg)
					good = false
					return
				}
			}
			b.Principal = s
		case "tokens", "tool_calls", "credits":
			if b.Unit.Set() {
				d.l.ErrorHint(d.at(d.resolve(v)), "conflicting-fields", "write one budget per unit",
					"budget %q counts %s already; a budget counts one unit: tokens, tool_calls or credits", b.Name.Value, b.Unit.Value)
				good = false
				return
			}
			lim, ok := d.bigInteger(v, k, 1, manifest.MaxBudgetLimit)
			if !ok {
				good = false
				return
			}
			b.Unit, b.Limit = Scalar[string]{Value: k, Pos: lim.Pos}, lim.Value
		case "per":
			s, ok := d.enum(v, "per", manifest.BudgetPeriods)
			if !ok {
				good = false
				return
			}
			b.Per = s
		case "costs":
			costs = v
		}
	})
	if !ok {
		return b, false
	}
	switch {
	case b.Agent.Set() && b.Principal.Set():
		d.l.ErrorHint(b.Principal.Pos, "conflicting-fields", "write one budget for the agent and one for the principal",
			"budget %q applies to an agent or to a principal, not both", b.Name.Value)
		good = false
	case !b.Agent.Set() && !b.Principal.Set() && !d.hasKey(n, "agent") && !d.hasKey(n, "principal"):
		d.l.ErrorHint(b.Pos, "missing-field", `add agent: <an agent of the project>, or principal: user:<id>, group:<name>, serviceaccount:<name> or "*"`,
			"budget %q names neither an agent nor a principal", b.Name.Value)
		good = false
	}
	if !b.Unit.Set() && !d.hasKey(n, "tokens") && !d.hasKey(n, "tool_calls") && !d.hasKey(n, "credits") {
		d.l.ErrorHint(b.Pos, "missing-field", "add one of tokens: N, tool_calls: N or credits: N",
			"budget %q has no limit", b.Name.Value)
		good = false
	}
	if costs != nil {
		if b.Unit.Set() && b.Unit.Value != "credits" {
			d.l.ErrorHint(d.at(d.resolve(costs)), "conflicting-fields", "remove costs:, or count credits: N instead",
				"budget %q counts %s: costs apply to credits budgets only", b.Name.Value, b.Unit.Value)
			good = false
		} else {
			var costsOK bool
			b.Costs, costsOK = d.budgetCosts(costs)
			good = good && costsOK
		}
	}
	return b, good && b.Name.Set() && b.Unit.Set() && b.Per.Set() && (b.Agent.Set() || b.Principal.Set())
}

// budgetCosts decodes costs: tool reference → credits, or, for an MCP server, tool name →
// credits. It reports whether every entry is valid.
func (d *decoder) budgetCosts(n *yaml.Node) ([]BudgetCost, bool) {
	var out []BudgetCost
	ok := true
	entries := 0
	d.keyedByRef(n, "costs", func(ref Scalar[string], r toolref.Ref, body *yaml.Node) {
		entries++
		if rb := d.resolve(body); rb != nil && rb.Kind == yaml.MappingNode {
			if !r.Stdio() && !r.Remote() {
				d.l.ErrorHint(d.at(rb), "wrong-type", fmt.Sprintf("write %s: <credits>", ref.Value),
					"%s names one tool: its cost is a number, not a mapping of tool names", ref.Value)
				ok = false
				return
			}
			ps, _ := d.pairs(rb, "costs of "+ref.Value)
			for _, p := range ps {
				if !ValidMCPToolName(p.key) {
					d.l.Errorf(d.at(p.k), "invalid-name", "tool name %q is not a valid MCP tool name", p.key)
					ok = false
					continue
				}
				if c, good := d.bigInteger(p.v, "cost", 1, manifest.MaxBudgetCost); good {
					out = append(out, BudgetCost{Tool: ref, Name: p.key, Credits: c.Value, Pos: c.Pos})
				} else {
					ok = false
				}
			}
			return
		}
		if c, good := d.bigInteger(body, "cost", 1, manifest.MaxBudgetCost); good {
			out = append(out, BudgetCost{Tool: ref, Credits: c.Value, Pos: c.Pos})
		} else {
			ok = false
		}
	})
	if rn := d.resolve(n); rn == nil || rn.Kind != yaml.MappingNode || len(rn.Content)/2 != entries {
		ok = false // not a mapping, or an entry with an invalid reference
	}
	return out, ok
}

// bigInteger decodes a whole number within [lo, hi] as an int64.
func (d *decoder) bigInteger(n *yaml.Node, what string, lo, hi int64) (Scalar[int64], bool) {
	n = d.resolve(n)
	if n == nil {
		return Scalar[int64]{}, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.l.ErrorHint(d.at(n), "wrong-type", "write a whole number such as 100", "%s must be a whole number, not %s", what, kindName(n))
		return Scalar[int64]{}, false
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil || v < lo || v > hi {
		d.l.ErrorHint(d.at(n), "invalid-value", fmt.Sprintf("write a whole number from %d to %d", lo, hi), "%s must be a positive whole number, not %s", what, n.Value)
		return Scalar[int64]{}, false
	}
	return Scalar[int64]{Value: v, Pos: d.at(n)}, true
}
