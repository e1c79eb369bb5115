package compiler_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/manifest"
)

// TestModels: a spec's model: is a bare Gemini name, provider/id, or a lush.yaml models: entry;
// the build resolves it to where it runs (recorded per agent in the manifest, never a secret),
// and reports what is wrong at its file:line with a fix. The diagnostics of each case are in
// testdata/models/<case>.txt (go test ./compiler -run TestModels -update after an intended
// change).
func TestModels(t *testing.T) {
	const orchestrator = "agents/orchestrator/spec.yaml"
	setModel := func(dir, m string) {
		p := filepath.Join(dir, orchestrator)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		data = []byte(strings.Replace(string(data), "model: gemini-2.5-flash\n", "model: "+m+"\n", 1))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gemini := manifest.ModelTarget{Provider: "gemini", Model: "gemini-2.5-flash", Credential: "model://gemini"}
	tests := []struct {
		name   string
		model  string // the orchestrator's model: ("" keeps gemini-2.5-flash)
		models string // lush.yaml models: ("" for none)
		want   *manifest.ModelTarget
	}{
		{"bare-gemini", "", "", &gemini},
		{"prefixed-gemini", "gemini/gemini-2.5-flash", "", &gemini},
		{"openai-default", "openai/gpt-4.1-mini", "", &manifest.ModelTarget{Provider: "openai", Model: "gpt-4.1-mini", Credential: "model://openai"}},
		{"anthropic-default", "anthropic/claude-sonnet-4-5", "", &manifest.ModelTarget{Provider: "anthropic", Model: "claude-sonnet-4-5", Credential: "model://anthropic"}},
		{"entry-local", "local", "models:\n  - name: local\n    provider: openai\n    model: llama3.2\n    base_url: http://127.0.0.1:11434/v1/\n",
			&manifest.ModelTarget{Provider: "openai", Model: "llama3.2", BaseURL: "http://127.0.0.1:11434/v1"}},
		{"entry-full", "fast", "models:\n  - gemini-2.5-flash\n  - gemini-2.5-flash-lite\n  - name: fast\n    provider: openai\n    model: gpt-4.1-mini\n    base_url: https://llm.internal.example.com/v1\n    credential: work-openai\n    organization: org-1\n    project: proj-1\n",
			&manifest.ModelTarget{Provider: "openai", Model: "gpt-4.1-mini", BaseURL: "https://llm.internal.example.com/v1", Credential: "model://work-openai", Organization: "org-1", Project: "proj-1"}},
		{"entry-anthropic", "deep", "models:\n  - name: deep\n    provider: anthropic\n    model: claude-opus-4-5\n    max_tokens: 4096\n",
			&manifest.ModelTarget{Provider: "anthropic", Model: "claude-opus-4-5", Credential: "model://anthropic", MaxTokens: 4096}},
		{"entry-renames-gemini-name", "", "models:\n  - name: gemini-2.5-flash\n    provider: openai\n    model: gpt-4.1\n",
			&manifest.ModelTarget{Provider: "openai", Model: "gpt-4.1", Credential: "model://openai"}},
		{"list-with-prefixed", "openai/my-finetune", "models:\n  - gemini-2.5-flash\n  - gemini-2.5-flash-lite\n  - openai/my-finetune\n",
			&manifest.ModelTarget{Provider: "openai", Model: "my-finetune", Credential: "model://openai"}},

		{"unknown-provider", "opneai/gpt-4.1", "", nil},
		{"unknown-openai-model", "openai/gpt-4.1-mni", "", nil},
		{"empty-model-id", "openai/", "", nil},
		{"list-unknown-provider", "", "models:\n  - gemini-2.5-flash\n  - antropic/claude-sonnet-4-5\n", nil},
		{"entry-unknown-provider", "fast", "models:\n  - name: fast\n    provider: openia\n    model: gpt-4.1\n", nil},
		{"entry-missing-fields", "fast", "models:\n  - name: fast\n    base_url: http://127.0.0.1:8000/v1\n", nil},
		{"entry-unknown-field", "fast", "models:\n  - name: fast\n    provider: openai\n    model: gpt-4.1\n    api_key: sk-not-here\n", nil},
		{"entry-bad-url", "fast", "models:\n  - name: fast\n    provider: openai\n    model: gpt-4.1\n    base_url: 127.0.0.1:11434/v1\n", nil},
		{"entry-url-with-password", "fast", "models:\n  - name: fast\n    provider: openai\n    model: gpt-4.1\n    base_url: https://user:s3cret@llm.example.com/v1\n", nil},
		{"entry-wrong-provider-fields", "fast", "models:\n  - name: fast\n    provider: anthropic\n    model: claude-sonnet-4-5\n    organization: org-1\n  - name: slow\n    provider: openai\n    model: gpt-4.1\n    max_tokens: 100\n", nil},
		{"entry-credential-of-other-provider", "fast", "models:\n  - name: fast\n    provider: openai\n    model: gpt-4.1\n    credential: anthropic\n", nil},
		{"entry-duplicate", "fast", "models:\n  - name: fast\n    provider: openai\n    model: gpt-4.1\n  - name: fast\n    provider: anthropic\n    model: claude-sonnet-4-5\n", nil},
		// A tool name a provider refuses (notes.search) builds: agentd offers it under one it accepts.
		{"tool-name-openai", "openai/gpt-4.1", "", &manifest.ModelTarget{Provider: "openai", Model: "gpt-4.1", Credential: "model://openai"}},
		{"tool-name-anthropic", "fast", "models:\n  - name: fast\n    provider: anthropic\n    model: claude-sonnet-4-5\n",
			&manifest.ModelTarget{Provider: "anthropic", Model: "claude-sonnet-4-5", Credential: "model://anthropic"}},
		{"entry-bad-name", "Fast/1", "models:\n  - name: Fast/1\n    provider: openai\n    model: gpt-4.1\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, quickstart, dir, false)
			if tt.model != "" {
				setModel(dir, tt.model)
			}
			if strings.HasPrefix(tt.name, "tool-name") { // a named tool OpenAI and Anthropic refuse as it is
				p := filepath.Join(dir, orchestrator)
				data, _ := os.ReadFile(p)
				data = []byte(strings.Replace(string(data), "      - list_directory\n", "      - list_directory\n      - notes.search\n", 1))
				os.WriteFile(p, data, 0o644)
			}
			if tt.models != "" {
				appendYAML(t, dir, "lush.yaml", tt.models)
			}
			res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
			if err != nil {
				t.Fatal(err)
			}
			if res.OK() != (tt.want != nil) {
				t.Fatalf("build ok = %v, want %v:\n%s", res.OK(), tt.want != nil, render(res.Diagnostics))
			}
			if tt.want != nil {
				a, _ := res.Manifest.Agent("orchestrator")
				if a.ModelTarget != *tt.want {
					t.Errorf("model target = %+v, want %+v", a.ModelTarget, *tt.want)
				}
				r, _ := res.Manifest.Agent("researcher")
				if r.ModelTarget.Provider == "" {
					t.Errorf("researcher has no model target: %+v", r)
				}
			}
			got := render(res.Diagnostics) + "\n"
			if strings.Contains(got, "s3cret") || strings.Contains(string(res.ManifestJSON), "s3cret") {
				t.Errorf("a password from base_url is in the output:\n%s", got)
			}
			golden := filepath.Join("testdata", "models", tt.name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("diagnostics differ from %s (run with -update if the change is intended)\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}
