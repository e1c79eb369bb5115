package main

import (
	"context"
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/test/anthropicserver"
	"github.com/lush-agents/lush/vault"
)

// TestAnthropicTarget: an agent whose model is anthropic/<id> runs on the Anthropic provider, with
// the key stored at model://anthropic, the target's max_tokens, and its base URL (or
// LUSH_ANTHROPIC_BASE_URL for the default endpoint).
func TestAnthropicTarget(t *testing.T) {
	const key = "sk-ant-cmd-test-4c3b2a"
	dir := t.TempDir()
	if r := lushctl(t, key+"\n", "auth", "add", "model://anthropic", "-C", dir); r.code != exitOK {
		t.Fatalf("auth add: %+v", r)
	}
	s := anthropicserver.New(key)
	t.Cleanup(s.Close)
	m, desc, closeModel, err := newModel(context.Background(), modelConfig{}, dir, vault.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeModel()
	if !strings.Contains(desc, "anthropic") {
		t.Errorf("desc = %q, want anthropic among the providers", desc)
	}

	ask := func(target model.Target) (*model.Response, error) {
		return m.Generate(t.Context(), model.Request{Model: "anthropic/" + target.Model, Agent: "researcher", Project: "quickstart", Target: target,
			System: "You research.", Messages: []model.Message{{Role: model.RoleUser, Parts: []model.Part{{Text: "hi"}}}}}, nil)
	}
	s.Push(anthropicserver.Turn{Text: "from Anthropic"})
	resp, err := ask(model.Target{Provider: "anthropic", Model: "claude-sonnet-4-5", BaseURL: s.URL(), Credential: "model://anthropic", MaxTokens: 777})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	r := s.Requests()[0]
	if resp.Text() != "from Anthropic" || r.Model != "claude-sonnet-4-5" || r.MaxTokens != 777 || r.APIKey != key || r.System != "You research." {
		t.Errorf("response %q; request model %q, max_tokens %d, system %q, key sent %v", resp.Text(), r.Model, r.MaxTokens, r.System, r.APIKey == key)
	}

	t.Setenv("LUSH_ANTHROPIC_BASE_URL", s.URL())
	s.Push(anthropicserver.Turn{Text: "again"})
	if resp, err := ask(model.Target{Provider: "anthropic", Model: "claude-haiku-4-5", Credential: "model://anthropic"}); err != nil || resp.Text() != "again" {
		t.Fatalf("Generate at LUSH_ANTHROPIC_BASE_URL: %v, %v", resp, err)
	}
	if r := s.Requests()[1]; r.Model != "claude-haiku-4-5" || r.MaxTokens != 4096 {
		t.Errorf("request model %q, max_tokens %d; want claude-haiku-4-5 and the default 4096", r.Model, r.MaxTokens)
	}
}
