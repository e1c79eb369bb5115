package compiler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/budget"
)

// TestBudgets: lush.yaml budgets compile, sorted by name, into the manifest and into
// data.lush.project.budgets, and read back the same from either.
func TestBudgets(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	copyTree(t, quickstart, dir, false)
	appendYAML(t, dir, "lush.yaml", `budgets:
  - name: researcher-tokens
    agent: researcher
    tokens: 200000
    per: day
  - name: contractor-calls
    principal: group:contractors
    tool_calls: 500
    per: week
  - name: notes-credits
    principal: "*"
    credits: 100
    per: month
    costs:
      mcp://notes.example.com/mcp: {post_note: 5}
      tools/clock: 2
`)
	res, err := compiler.Build(ctx, dir, compiler.Offline(true))
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("build failed:\n%s", render(res.Diagnostics))
	}
	want := []manifest.Budget{
		{Name: "contractor-calls", Principal: "group:contractors", Unit: "tool_calls", Limit: 500, Per: "week"},
		{Name: "notes-credits", Principal: "*", Unit: "credits", Limit: 100, Per: "month", Costs: []manifest.BudgetCost{
			{Tool: "mcp://notes.example.com/mcp", Name: "post_note", Credits: 5}, {Tool: "tools/clock", Credits: 2}}},
		{Name: "researcher-tokens", Agent: "researcher", Unit: "tokens", Limit: 200000, Per: "day"},
	}
	if fmt.Sprint(res.Manifest.Budgets) != fmt.Sprint(want) {
		t.Errorf("manifest budgets = %+v\nwant %+v", res.Manifest.Budgets, want)
	}
	if _, err := manifest.Decode(res.ManifestJSON, res.Hash); err != nil {
		t.Errorf("decode: %v", err)
	}
	data := compiler.PolicyData(res.Manifest)["lush"].(map[string]any)["project"].(map[string]any)["budgets"]
	fromData, fromManifest := budget.FromData(data), budget.FromManifest(res.Manifest)
	if fmt.Sprint(fromData) != fmt.Sprint(fromManifest) || len(fromData) != 3 {
		t.Errorf("budgets from the data %+v\nfrom the manifest %+v", fromData, fromManifest)
	}
	if c := fromData[1].Costs; c["mcp://notes.example.com/mcp post_note"] != 5 || c["tools/clock"] != 2 {
		t.Errorf("costs %v", c)
	}

	// Without budgets, neither the manifest nor the data has them.
	plain := t.TempDir()
	copyTree(t, quickstart, plain, false)
	res, err = compiler.Build(ctx, plain, compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("build: %v", err)
	}
	if strings.Contains(string(res.ManifestJSON), "budgets") {
		t.Error("a manifest without budgets mentions budgets")
	}
	if _, ok := compiler.PolicyData(res.Manifest)["lush"].(map[string]any)["project"].(map[string]any)["budgets"]; ok {
		t.Error("data without budgets has budgets")
	}
}
