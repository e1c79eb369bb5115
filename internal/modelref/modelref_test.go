package modelref

import (
	"fmt"
	"testing"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		name                 string
		provider, id, prefix string
		known                bool
	}{
		{"gemini-2.5-flash", Gemini, "gemini-2.5-flash", "", true},
		{"gemini/gemini-2.5-flash", Gemini, "gemini-2.5-flash", Gemini, true},
		{"openai/gpt-4.1", OpenAI, "gpt-4.1", OpenAI, true},
		{"openai/ft:gpt-4.1:acme/x", OpenAI, "ft:gpt-4.1:acme/x", OpenAI, true}, // the id may hold slashes
		{"anthropic/claude-sonnet-4-5", Anthropic, "claude-sonnet-4-5", Anthropic, true},
		{"openai/", OpenAI, "", OpenAI, false},
		{"meta-llama/Llama-3.1-8B", "", "", "meta-llama", false},
	}
	for _, tt := range tests {
		p, id, prefix, known := Split(tt.name)
		if got, want := fmt.Sprint(p, id, prefix, known), fmt.Sprint(tt.provider, tt.id, tt.prefix, tt.known); got != want {
			t.Errorf("Split(%q) = %s, want %s", tt.name, got, want)
		}
	}
}

func TestCredential(t *testing.T) {
	tests := []struct {
		addr string
		name string
		ok   bool
	}{
		{"model://openai", "openai", true},
		{"model://work-openai.eu_1", "work-openai.eu_1", true},
		{"model://", "", false},
		{"model://Work", "", false},
		{"model://a/b", "", false},
		{"mcp://openai", "", false},
	}
	for _, tt := range tests {
		name, ok := ParseCredential(tt.addr)
		if ok != tt.ok || (ok && name != tt.name) {
			t.Errorf("ParseCredential(%q) = %q, %v", tt.addr, name, ok)
		}
		if ok && Credential(name) != tt.addr {
			t.Errorf("Credential(%q) = %q", name, Credential(name))
		}
	}
	for _, p := range Providers {
		if EnvKey(p) == "" || len(Defaults(p)) == 0 {
			t.Errorf("provider %s has no env key or no default models", p)
		}
	}
}
