package model_test

import (
	"context"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
)

// named is a provider with a tool name rule of its own.
type named struct {
	echo
	rule model.NameRule
}

func (n named) ToolNames(context.Context, model.Request) model.NameRule { return n.rule }

// TestNameRuleValid: a rule accepts letters, digits and its punctuation, up to its length, with
// a letter or '_' first when it says so.
func TestNameRuleValid(t *testing.T) {
	strict := model.NameRule{Max: 8, Punct: "_-"}
	gem := model.NameRule{Max: 8, Punct: "_.-", LetterFirst: true}
	tests := []struct {
		rule model.NameRule
		name string
		want bool
	}{
		{strict, "read_it", true},
		{strict, "a-b", true},
		{strict, "9lives", true},
		{strict, "a.b", false},
		{strict, "a b", false},
		{strict, "", false},
		{strict, "abcdefgh", true},
		{strict, "abcdefghi", false},
		{strict, "café", false},
		{gem, "a.b", true},
		{gem, "_x", true},
		{gem, "9lives", false},
		{gem, ".x", false},
	}
	for _, tt := range tests {
		if got := tt.rule.Valid(tt.name); got != tt.want {
			t.Errorf("%+v.Valid(%q) = %v, want %v", tt.rule, tt.name, got, tt.want)
		}
	}
}

// TestRouterToolNames: the router answers with the rule of the provider a request's target runs
// on; a provider without a rule, and a provider the router does not run, get the default
// (Gemini's).
func TestRouterToolNames(t *testing.T) {
	strict := model.NameRule{Max: 64, Punct: "_-"}
	r := model.NewRouter(map[string]model.Factory{
		"openai": func(context.Context, string, model.Target) (model.Model, error) { return named{echo{"o"}, strict}, nil },
		"gemini": func(context.Context, string, model.Target) (model.Model, error) { return echo{"g"}, nil },
	})
	def := model.ToolNamesOf(t.Context(), echo{"plain"}, model.Request{})
	if def != (model.NameRule{Max: 64, Punct: "_.-", LetterFirst: true}) {
		t.Errorf("default rule %+v", def)
	}
	tests := []struct {
		name string
		req  model.Request
		want model.NameRule
	}{
		{"openai", model.Request{Model: "openai/gpt-4.1", Target: model.Target{Provider: "openai", Model: "gpt-4.1"}}, strict},
		{"gemini", model.Request{Model: "gemini-2.5-flash"}, def},
		{"not run", model.Request{Model: "anthropic/x", Target: model.Target{Provider: "anthropic", Model: "x"}}, def},
	}
	for _, tt := range tests {
		if got := model.ToolNamesOf(t.Context(), r, tt.req); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
