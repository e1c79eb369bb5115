package compiler

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/principal"
)

// checkBudgets checks lush.yaml budgets against the project: unique names, agents that exist,
// principals like any other (service accounts declared), and costs that name tools some agent
// allowlists.
func (b *build) checkBudgets(check func(spec.Scalar[string], string) (principal.Principal, bool)) {
	seen := map[string]diag.Pos{}
	names := b.agentNames()
	for _, bu := range b.cfg.Budgets {
		if first, dup := seen[bu.Name.Value]; dup {
			b.l.ErrorHint(bu.Name.Pos, "duplicate-budget", fmt.Sprintf("rename or remove one; the first is at line %d", first.Line),
				"budget %q is declared twice", bu.Name.Value)
		} else {
			seen[bu.Name.Value] = bu.Name.Pos
		}
		if bu.Agent.Set() && b.agents[bu.Agent.Value] == nil {
			b.l.ErrorHint(bu.Agent.Pos, "unknown-agent", agentHint(bu.Agent.Value, names),
				"budget %q names agent %q, which does not exist", bu.Name.Value, bu.Agent.Value)
		}
		if bu.Principal.Set() && bu.Principal.Value != manifest.AnyPrincipal {
			check(bu.Principal, "budgets")
		}
		for _, c := range bu.Costs {
			ti := b.tools[c.Tool.Value]
			if ti == nil {
				b.l.ErrorHint(c.Tool.Pos, "unknown-tool", b.refHint(c.Tool.Value, "name a tool of some agent's tools allowlist"),
					"budget %q sets a cost for %s, which no agent's tools allowlist includes", bu.Name.Value, c.Tool.Value)
			}
		}
	}
}

// budgets returns lush.yaml budgets for the manifest, sorted by name; nil when there are none
// (so the manifests of projects without budgets do not change).
func (b *build) budgets() []manifest.Budget {
	var out []manifest.Budget
	for _, bu := range b.cfg.Budgets {
		mb := manifest.Budget{Name: bu.Name.Value, Agent: bu.Agent.Value, Principal: bu.Principal.Value,
			Unit: bu.Unit.Value, Limit: bu.Limit, Per: bu.Per.Value}
		for _, c := range bu.Costs {
			mb.Costs = append(mb.Costs, manifest.BudgetCost{Tool: c.Tool.Value, Name: c.Name, Credits: c.Credits})
		}
		slices.SortFunc(mb.Costs, func(x, y manifest.BudgetCost) int {
			if c := strings.Compare(x.Tool, y.Tool); c != 0 {
				return c
			}
			return strings.Compare(x.Name, y.Name)
		})
		out = append(out, mb)
	}
	slices.SortFunc(out, func(x, y manifest.Budget) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// budgetData is data.lush.project.budgets: each budget by name, with its costs keyed by tool
// reference ("<ref>" or "<ref> <tool name>").
func budgetData(bs []manifest.Budget) map[string]any {
	out := make(map[string]any, len(bs))
	for _, bu := range bs {
		e := map[string]any{"unit": bu.Unit, "limit": bu.Limit, "per": bu.Per}
		if bu.Agent != "" {
			e["agent"] = bu.Agent
		} else {
			e["principal"] = bu.Principal
		}
		if len(bu.Costs) > 0 {
			costs := map[string]any{}
			for _, c := range bu.Costs {
				k := c.Tool
				if c.Name != "" {
					k += " " + c.Name
				}
				costs[k] = c.Credits
			}
			e["costs"] = costs
		}
		out[bu.Name] = e
	}
	return out
}
