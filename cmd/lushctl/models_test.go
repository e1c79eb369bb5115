package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/internal/modelref"
	"github.com/lush-agents/lush/test/vaultserver"
	"github.com/lush-agents/lush/vault"
)

// TestModelKeys: a provider's key comes from the credential broker (here the local file, filled
// by lushctl auth add model://…) and, for a provider's default key only, from its environment
// variable when the broker has none; a rotated key is read at the next request; a missing key
// is an error that says where to put it and holds no key.
func TestModelKeys(t *testing.T) {
	dir := t.TempDir()
	const fileKey, envKey, rotated = "sk-file-1f2e3d", "sk-env-9a8b7c", "sk-rotated-5d6e"
	if r := lushctl(t, fileKey+"\n", "auth", "add", "model://openai", "-C", dir); r.code != exitOK || !strings.Contains(r.stdout, "added the model key model://openai") {
		t.Fatalf("auth add: %+v", r)
	}
	broker, err := vault.New(vault.Config{File: filepath.Join(dir, vault.LocalFile)})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"OPENAI_API_KEY": envKey, "ANTHROPIC_API_KEY": envKey}
	keys := &modelKeys{broker: broker, getenv: func(k string) string { return env[k] }}
	tests := []struct {
		name    string
		target  model.Target
		want    string   // the key
		errWant []string // substrings of the error, when there is one
	}{
		{"from the file", model.Target{Provider: "openai", Credential: "model://openai"}, fileKey, nil},
		{"env fallback", model.Target{Provider: "anthropic", Credential: "model://anthropic"}, envKey, nil},
		{"no credential: a local server", model.Target{Provider: "openai", BaseURL: "http://127.0.0.1:11434/v1"}, "", nil},
		{"a named credential never falls back to env", model.Target{Provider: "openai", Credential: "model://work"}, "",
			[]string{"no API key for openai (model://work)", "lushctl auth add model://work"}},
		{"missing everywhere", model.Target{Provider: "gemini", Credential: "model://gemini"}, "",
			[]string{"lushctl auth add model://gemini", "GOOGLE_API_KEY"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keys.key("quickstart", tt.target)(t.Context())
			if tt.errWant != nil {
				if err == nil {
					t.Fatalf("key = %q, want an error", got)
				}
				for _, w := range tt.errWant {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v, want %q in it", err, w)
					}
				}
				if strings.Contains(err.Error(), envKey) || strings.Contains(err.Error(), fileKey) {
					t.Errorf("err holds a key: %v", err)
				}
				var me *model.Error
				if !errors.As(err, &me) || me.Provider != tt.target.Provider {
					t.Errorf("err = %#v, want a *model.Error of %s", err, tt.target.Provider)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("key = %q, %v; want %q", got, err, tt.want)
			}
		})
	}

	// Rotation: the next request reads the new key.
	if r := lushctl(t, rotated+"\n", "auth", "add", "model://openai", "-C", dir); r.code != exitOK || !strings.Contains(r.stdout, "replaced") {
		t.Fatalf("auth add again: %+v", r)
	}
	if got, err := keys.key("quickstart", model.Target{Provider: "openai", Credential: "model://openai"})(t.Context()); err != nil || got != rotated {
		t.Errorf("after rotation: %q, %v", got, err)
	}
}

// TestAuthModelKey: auth add/list/remove take model://<name>; the key is stored for
// serviceaccount:agentd as an api_key, never shown; flags that do not apply are refused.
func TestAuthModelKey(t *testing.T) {
	dir := t.TempDir()
	const key = "sk-model-key-77aa"
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"add", []string{"auth", "add", "model://work-openai"}, exitOK, "added the model key model://work-openai"},
		{"bad name", []string{"auth", "add", "model://Work/x"}, exitUsage, "write model://<name>"},
		{"a person's principal", []string{"auth", "add", "model://openai", "--principal", "user:bob"}, exitUsage, "model keys belong to the process that runs agents"},
		{"another type", []string{"auth", "add", "model://openai", "--type", "bearer"}, exitUsage, "a model key is an api_key"},
		{"a header", []string{"auth", "add", "model://openai", "--header", "X-Key"}, exitUsage, "do not apply to model keys"},
		{"list", []string{"auth", "list"}, exitOK, "model://work-openai  serviceaccount:agentd  api_key  model provider key"},
		{"remove", []string{"auth", "remove", "model://work-openai"}, exitOK, "removed the model key model://work-openai"},
		{"remove again", []string{"auth", "remove", "model://work-openai"}, exitFailed, "holds no model key model://work-openai"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lushctl(t, key+"\n", append(tt.args, "-C", dir)...)
			if r.code != tt.code || !strings.Contains(r.stdout+r.stderr, tt.want) {
				t.Fatalf("%v: code %d, want %d with %q:\n%s%s", tt.args, r.code, tt.code, tt.want, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout+r.stderr, key) {
				t.Errorf("the key is in the output")
			}
			if tt.name == "add" {
				c, ok, err := vault.OpenFile(filepath.Join(dir, vault.LocalFile)).Lookup("model://work-openai", modelref.KeyPrincipal)
				if err != nil || !ok || c.Key != key || c.Type != vault.TypeAPIKey {
					t.Fatalf("stored: ok=%v err=%v type=%s", ok, err, c.Type)
				}
			}
		})
	}
}

// TestNewModel: --provider scripted replays scripts; a provider name runs only that provider's
// models; none routes each agent to its own; an unknown one is a usage error.
func TestNewModel(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tests := []struct {
		provider string
		want     string // in the description, or the error
		code     bool   // an error
	}{
		{"", "gemini", false},
		{"gemini", "gemini (each agent", false},
		{"scripted", "scripted (offline", false},
		{"gemnii", `model provider "gemnii": use`, true},
	}
	for _, tt := range tests {
		t.Run(tt.provider, func(t *testing.T) {
			m, desc, closeModel, err := newModel(ctx, modelConfig{provider: tt.provider, scripts: dir}, dir, vault.Config{})
			if tt.code {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer closeModel()
			if m == nil || !strings.Contains(desc, tt.want) {
				t.Errorf("desc = %q, want %q", desc, tt.want)
			}
		})
	}
}

// TestModelKeysFromVault: with credentials.vault configured, a model key is read from Vault at
// the path template's path for model/<name> and serviceaccount:agentd (the local file is not
// asked); a missing one says which vault command writes it.
func TestModelKeysFromVault(t *testing.T) {
	srv := vaultserver.Start(t)
	const key = "sk-from-vault-42a1b2c3"
	c := srv.Client(t, srv.RootToken())
	if _, err := c.Logical().Write("secret/data/lush/quickstart/model/openai/serviceaccount/agentd", map[string]any{"data": map[string]any{"key": key}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(srv.RootToken()), 0o600); err != nil {
		t.Fatal(err)
	}
	broker, err := vault.New(vault.Config{File: filepath.Join(dir, vault.LocalFile), Vault: &vault.VaultConfig{Address: srv.Addr(), Auth: vault.VaultAuth{TokenFile: tokenFile}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	keys := &modelKeys{broker: broker, getenv: func(string) string { return "" }}
	got, err := keys.key("quickstart", model.Target{Provider: "openai", Credential: "model://openai"})(t.Context())
	if err != nil || got != key {
		t.Fatalf("key = %q, %v; want the one in Vault", got, err)
	}
	_, err = keys.key("quickstart", model.Target{Provider: "openai", Credential: "model://work"})(t.Context())
	if err == nil || !strings.Contains(err.Error(), "vault kv put -mount=secret lush/quickstart/model/work/serviceaccount/agentd key=…") {
		t.Errorf("missing key in Vault: %v", err)
	}
}
