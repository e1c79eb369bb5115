// Package budget does budget accounting: it knows a build's budgets (lush.yaml budgets, in the
// policy data as data.lush.project.budgets), which of them apply to a call and what the call
// costs, and keeps the Ledger: the usage of every budget, subject and period, read from the
// decision log's store and reserved under a mutex so that concurrent calls of one process cannot
// overspend.
//
// The store is the truth: usage is charged there by the decision log, in the transaction that
// commits the allowing decision (decisionlog.Charge). The ledger caches it, refreshing an entry
// from the store when it is older than MaxAge, which is how other replicas' charges and top-ups
// reach it.
package budget

import (
	"encoding/json"
	"slices"
	"sort"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
)

// Units of budgets.
const (
	UnitTokens    = "tokens"
	UnitToolCalls = "tool_calls"
	UnitCredits   = "credits"
)

// Budget is one of a build's budgets.
type Budget struct {
	Name      string
	Agent     string // an agent budget: one usage for the agent
	Principal string // a principal budget: an id, a group or "*"; each matching caller has its own usage
	Unit      string // UnitTokens, UnitToolCalls or UnitCredits
	Limit     int64  // units per period
	Per       string // hour, day, week or month (UTC)
	Costs     map[string]int64
}

// FromManifest returns the budgets of a manifest.
func FromManifest(m *manifest.Manifest) []Budget {
	if m == nil {
		return nil
	}
	out := make([]Budget, 0, len(m.Budgets))
	for _, mb := range m.Budgets {
		b := Budget{Name: mb.Name, Agent: mb.Agent, Principal: mb.Principal, Unit: mb.Unit, Limit: mb.Limit, Per: mb.Per}
		for _, c := range mb.Costs {
			if b.Costs == nil {
				b.Costs = map[string]int64{}
			}
			b.Costs[costKey(c.Tool, c.Name)] = c.Credits
		}
		out = append(out, b)
	}
	return out
}

// FromEngine returns the budgets of the build an engine decides with, from its policy data
// (data.lush.project.budgets, written by the compiler). Entries it cannot read are skipped.
func FromEngine(eng *authz.Engine) []Budget {
	if eng == nil || eng.Bundle() == nil {
		return nil
	}
	root, _ := eng.Bundle().Data["lush"].(map[string]any)
	project, _ := root["project"].(map[string]any)
	return FromData(project["budgets"])
}

// FromData reads data.lush.project.budgets: budget name → {agent | principal, unit, limit, per,
// costs}. Entries it cannot read are skipped; the result is sorted by name.
func FromData(raw any) []Budget {
	if raw == nil {
		return nil
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var entries map[string]struct {
		Agent     string           `json:"agent"`
		Principal string           `json:"principal"`
		Unit      string           `json:"unit"`
		Limit     int64            `json:"limit"`
		Per       string           `json:"per"`
		Costs     map[string]int64 `json:"costs"`
	}
	if json.Unmarshal(data, &entries) != nil {
		return nil
	}
	var out []Budget
	for name, e := range entries {
		if name == "" || (e.Agent == "") == (e.Principal == "") || e.Limit < 1 ||
			!slices.Contains(manifest.BudgetUnits, e.Unit) || !slices.Contains(manifest.BudgetPeriods, e.Per) {
			continue
		}
		out = append(out, Budget{Name: name, Agent: e.Agent, Principal: e.Principal, Unit: e.Unit, Limit: e.Limit, Per: e.Per, Costs: e.Costs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// costKey keys Costs: the tool reference, and the MCP tool's name after a space when the cost is
// that of one tool of a server.
func costKey(ref, name string) string {
	if name == "" {
		return ref
	}
	return ref + " " + name
}

// Call is what decides whether a budget applies to a call and what the call costs.
type Call struct {
	Action    string // authz.ActionToolsCall or authz.ActionAgentInvoke; budgets apply to no other
	Agent     string
	Principal string
	Groups    []string
	Tool      string // tools/call: the tool reference
	ToolName  string // tools/call: the MCP tool's name
}

// CallOf is the Call of a policy input.
func CallOf(in *authz.Input) Call {
	c := Call{Action: in.Action, Agent: in.Agent, Principal: in.Principal.ID, Groups: in.Principal.Groups}
	if in.Tool != nil {
		c.Tool, c.ToolName = in.Tool.Ref, in.Tool.Name
	}
	return c
}

// Applies reports whether budgets apply to the action at all: calls of tools and invocations of
// agents.
func Applies(action string) bool {
	return action == authz.ActionToolsCall || action == authz.ActionAgentInvoke
}

// Subject returns whose usage of b a call counts against, and whether b applies to it at all:
// the agent, for an agent budget of the call's agent; the caller, for a principal budget whose
// pattern matches it (the caller itself, one of its groups, group:everyone or "*").
func (b *Budget) Subject(c Call) (string, bool) {
	if !Applies(c.Action) {
		return "", false
	}
	if b.Agent != "" {
		if c.Agent != b.Agent {
			return "", false
		}
		return b.Agent, true
	}
	if c.Principal == "" {
		return "", false
	}
	if b.Principal == manifest.AnyPrincipal || b.Principal == c.Principal || b.Principal == "group:everyone" || slices.Contains(c.Groups, b.Principal) {
		return c.Principal, true
	}
	return "", false
}

// Cost is the units a call is charged before it runs: 1 for a tools/call against a tool_calls
// budget; the tool's cost (default 1) against a credits budget; nothing against a tokens budget
// (the tokens are charged when the invocation ends) and nothing for agent/invoke.
func (b *Budget) Cost(c Call) int64 {
	if c.Action != authz.ActionToolsCall {
		return 0
	}
	switch b.Unit {
	case UnitToolCalls:
		return 1
	case UnitCredits:
		if n, ok := b.Costs[costKey(c.Tool, c.ToolName)]; ok && c.ToolName != "" {
			return n
		}
		if n, ok := b.Costs[c.Tool]; ok {
			return n
		}
		return 1
	}
	return 0
}

// UnitName is how messages name the unit: tokens, tool calls or credits.
func UnitName(unit string) string {
	if unit == UnitToolCalls {
		return "tool calls"
	}
	return unit
}

// Period returns the start and end of the period of b that t falls in (UTC).
func (b *Budget) Period(t time.Time) (start, end time.Time) {
	start = manifest.PeriodStart(b.Per, t)
	return start, manifest.PeriodEnd(b.Per, start)
}
