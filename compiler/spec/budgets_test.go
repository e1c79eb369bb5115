package spec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lush-agents/lush/internal/diag"
)

func TestParseBudgets(t *testing.T) {
	src := `project: p
budgets:
  - name: researcher-tokens
    agent: researcher
    tokens: 200000
    per: day
  - name: contractor-calls
    principal: group:contractors
    tool_calls: 500
    per: day
  - name: coder-credits
    agent: coder
    credits: 100
    per: month
    costs: {tools/clock: 5, mcp://gh.example.com/mcp: {create_issue: 3}}
`
	var l diag.List
	p := ParseProjectConfig("lush.yaml", []byte(src), &l)
	if got := render(&l); got != "" {
		t.Fatalf("diagnostics:\n%s", got)
	}
	var got []string
	for _, b := range p.Budgets {
		got = append(got, fmt.Sprintf("%s %s%s %d %s per %s %d costs", b.Name.Value, b.Agent.Value, b.Principal.Value, b.Limit, b.Unit.Value, b.Per.Value, len(b.Costs)))
	}
	want := "[researcher-tokens researcher 200000 tokens per day 0 costs contractor-calls group:contractors 500 tool_calls per day 0 costs coder-credits coder 100 credits per month 2 costs]"
	if fmt.Sprint(got) != want {
		t.Errorf("budgets = %v\nwant %s", got, want)
	}
	if c := p.Budgets[2].Costs; c[1].Tool.Value != "mcp://gh.example.com/mcp" || c[1].Name != "create_issue" || c[1].Credits != 3 {
		t.Errorf("costs %+v", c)
	}
	if pos := p.Budgets[0].Unit.Pos; pos != (diag.Pos{File: "lush.yaml", Line: 5, Col: 13}) {
		t.Errorf("position of tokens: %v", pos)
	}
}

func TestParseBudgetErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"both", "project: p\nbudgets:\n  - {name: b, agent: a, principal: user:x, tokens: 1, per: day}\n", `3:36 error conflicting-fields: budget "b" applies to an agent or to a principal, not both`},
		{"neither", "project: p\nbudgets:\n  - {name: b, tokens: 1, per: day}\n", `3:5 error missing-field: budget "b" names neither an agent nor a principal`},
		{"two units", "project: p\nbudgets:\n  - {name: b, agent: a, tokens: 1, credits: 2, per: day}\n", `3:45 error conflicting-fields: budget "b" counts tokens already`},
		{"no unit", "project: p\nbudgets:\n  - {name: b, agent: a, per: day}\n", `3:5 error missing-field: budget "b" has no limit (add one of tokens: N, tool_calls: N or credits: N)`},
		{"zero", "project: p\nbudgets:\n  - {name: b, agent: a, tokens: 0, per: day}\n", "3:33 error invalid-value: tokens must be a positive whole number, not 0"},
		{"negative", "project: p\nbudgets:\n  - {name: b, agent: a, tool_calls: -5, per: day}\n", "tool_calls must be a positive whole number, not -5"},
		{"not a number", "project: p\nbudgets:\n  - {name: b, agent: a, tokens: lots, per: day}\n", "tokens must be a whole number, not a string"},
		{"bad per", "project: p\nbudgets:\n  - {name: b, agent: a, tokens: 1, per: daily}\n", `per "daily" is not valid`},
		{"no per", "project: p\nbudgets:\n  - {name: b, agent: a, tokens: 1}\n", `budget is missing required field "per"`},
		{"costs on tokens", "project: p\nbudgets:\n  - {name: b, agent: a, tokens: 1, per: day, costs: {tools/x: 1}}\n", `budget "b" counts tokens: costs apply to credits budgets only`},
		{"zero cost", "project: p\nbudgets:\n  - {name: b, agent: a, credits: 1, per: day, costs: {tools/x: 0}}\n", "cost must be a positive whole number, not 0"},
		{"bad cost ref", "project: p\nbudgets:\n  - {name: b, agent: a, credits: 1, per: day, costs: {ftp://x: 1}}\n", "invalid-tool-ref"},
		{"bad name", "project: p\nbudgets:\n  - {name: Big, agent: a, tokens: 1, per: day}\n", `budget name "Big" is not valid`},
		{"bad principal", "project: p\nbudgets:\n  - {name: b, principal: admin:root, tokens: 1, per: day}\n", `budgets: principal "admin:root" has unknown kind "admin"`},
		{"unknown field", "project: p\nbudgets:\n  - {name: b, agent: a, tokens: 1, per: day, period: day}\n", `unknown field "period" in budget`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l diag.List
			p := ParseProjectConfig("lush.yaml", []byte(tt.src), &l)
			if got := render(&l); !strings.Contains(got, tt.want) {
				t.Errorf("diagnostics:\n%s\nwant containing %q", got, tt.want)
			}
			if p != nil && len(p.Budgets) != 0 && tt.name != "unknown field" {
				t.Errorf("invalid budget kept: %+v", p.Budgets)
			}
		})
	}
}
