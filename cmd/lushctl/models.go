package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/agentd/model/anthropic"
	"github.com/lush-agents/lush/agentd/model/gemini"
	"github.com/lush-agents/lush/agentd/model/openai"
	"github.com/lush-agents/lush/agentd/model/scripted"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/modelref"
	"github.com/lush-agents/lush/vault"
)

// providerScripted is the offline provider: it replays scripts and overrides every agent's model.
const providerScripted = "scripted"

// keyFunc returns a provider's API key for one request ("" when the endpoint needs none).
type keyFunc = func(context.Context) (string, error)

// providers are the model providers agentd runs agents on, by modelref name: each makes the
// Model that serves a target, asking key for the API key on every request (so that a rotated
// secret is picked up). Another provider is one more row.
var providers = map[string]func(ctx context.Context, t model.Target, key keyFunc) (model.Model, error){
	modelref.Gemini:    newGemini,
	modelref.Anthropic: newAnthropic,
	modelref.OpenAI:    newOpenAI,
}

// modelConfig chooses and configures the model provider.
type modelConfig struct {
	// provider is "" to run each agent on the provider its model names, a provider name to run
	// only that one's models, or scripted.
	provider string
	scripts  string // the scripted provider's directory (default <project>/scripts)
}

// newModel returns the Model agents run on, and a description of it for start-up messages.
// Keys are looked up per request: in the credential broker that creds configures (the local file
// <project>/.lush/credentials.local by default, Vault when configured) at model://<name> for
// modelref.KeyPrincipal, then, for a provider's default key, in its environment variable
// (GOOGLE_API_KEY, OPENAI_API_KEY, ANTHROPIC_API_KEY). release closes the broker.
func newModel(ctx context.Context, c modelConfig, projectDir string, creds vault.Config) (m model.Model, desc string, release func(), err error) {
	if c.provider == providerScripted {
		dir := c.scripts
		if dir == "" {
			dir = filepath.Join(projectDir, "scripts")
		}
		m, err := scripted.New(dir)
		if err != nil {
			return nil, "", nil, usage("%v: the scripted provider replays <dir>/<agent>.yaml (--scripts, LUSH_SCRIPTS)", err)
		}
		return m, fmt.Sprintf("scripted (offline: replays %s/<agent>.yaml; no model runs)", dir), func() {}, nil
	}
	names := slices.Sorted(maps.Keys(providers))
	if c.provider != "" && !slices.Contains(names, c.provider) {
		return nil, "", nil, usage("model provider %q: use %s or %s (or none, to run each agent on the provider its model names)",
			c.provider, strings.Join(names, ", "), providerScripted)
	}
	if creds.File == "" && projectDir != "" {
		creds.File = filepath.Join(projectDir, filepath.FromSlash(vault.LocalFile))
	}
	broker, err := vault.New(creds)
	if err != nil {
		return nil, "", nil, usage("credentials (model keys): %v", err)
	}
	keys := &modelKeys{broker: broker, getenv: os.Getenv}
	factories := map[string]model.Factory{}
	var envs []string
	for _, p := range names {
		if c.provider != "" && p != c.provider {
			continue
		}
		newProvider := providers[p]
		factories[p] = func(ctx context.Context, project string, t model.Target) (model.Model, error) {
			return newProvider(ctx, t, keys.key(project, t))
		}
		envs = append(envs, modelref.EnvKey(p))
	}
	r := model.NewRouter(factories)
	desc = fmt.Sprintf("%s (each agent on the provider its model names; keys from %s, then %s)",
		strings.Join(r.Providers(), ", "), broker.Sources(), strings.Join(envs, ", "))
	return r, desc, broker.Close, nil
}

// modelKeys finds providers' API keys.
type modelKeys struct {
	broker *vault.Broker
	getenv func(string) string
}

// key returns the key function of a target: the broker's api_key at t.Credential, else (for a
// provider's default key only) the provider's environment variable. A target without a
// credential (a local server) needs no key. Errors say where to put the key and never hold one.
func (k *modelKeys) key(project string, t model.Target) keyFunc {
	return func(ctx context.Context) (string, error) {
		if t.Credential == "" {
			return "", nil
		}
		c, err := k.broker.Lookup(ctx, vault.Request{Project: project, Tool: t.Credential, Principal: modelref.KeyPrincipal,
			Declared: []manifest.Credential{{Tool: t.Credential, Principal: modelref.KeyPrincipal, Type: vault.TypeAPIKey}}})
		var missing *vault.MissingError
		switch {
		case err == nil && c != nil && c.Key != "":
			return c.Key, nil
		case err != nil && !errors.As(err, &missing):
			return "", fmt.Errorf("look up the %s key %s: %w", t.Provider, t.Credential, err)
		}
		env := ""
		if t.Credential == modelref.Credential(t.Provider) {
			env = modelref.EnvKey(t.Provider)
			if v := k.getenv(env); v != "" {
				return v, nil
			}
		}
		return "", &model.Error{Provider: t.Provider, Message: missingKey(t, env, missing)}
	}
}

// missingKey says where a target's key goes.
func missingKey(t model.Target, env string, missing *vault.MissingError) string {
	msg := fmt.Sprintf("no API key for %s (%s): store it with `lushctl auth add %s`", t.Provider, t.Credential, t.Credential)
	if missing != nil {
		for _, f := range missing.Fixes {
			if strings.HasPrefix(f, "vault ") {
				msg += ", or in Vault: `" + f + "`"
			}
		}
	}
	if env != "" {
		msg += ", or set " + env + " in the environment of the process that runs agents"
	}
	return msg
}

// newGemini runs a target on Gemini. Its base URL is the target's, else LUSH_GEMINI_BASE_URL (a
// proxy or a local stand-in of the API), else Google's.
func newGemini(ctx context.Context, t model.Target, key keyFunc) (model.Model, error) {
	base := t.BaseURL
	if base == "" {
		base = os.Getenv("LUSH_GEMINI_BASE_URL")
	}
	return &rekeyed{key: key, make: func(ctx context.Context, k string) (model.Model, error) {
		return gemini.New(ctx, gemini.Config{APIKey: k, BaseURL: base})
	}}, nil
}

// newAnthropic runs a target on Anthropic. Its base URL is the target's, else
// LUSH_ANTHROPIC_BASE_URL (a proxy or a local stand-in of the API), else Anthropic's; max_tokens is
// the target's (a lush.yaml models: entry's max_tokens), else anthropic.DefaultMaxTokens. The
// client asks key for the key on every request.
func newAnthropic(ctx context.Context, t model.Target, key keyFunc) (model.Model, error) {
	base := t.BaseURL
	if base == "" {
		base = os.Getenv("LUSH_ANTHROPIC_BASE_URL")
	}
	return anthropic.New(ctx, anthropic.Config{BaseURL: base, Key: key, MaxTokens: t.MaxTokens})
}

// rekeyed serves a provider whose client takes a fixed key: it makes the client with the key
// current at a request, and again when the key changes (a rotated secret).
type rekeyed struct {
	key  keyFunc
	make func(ctx context.Context, key string) (model.Model, error)

	mu      sync.Mutex
	lastKey string
	m       model.Model
}

func (r *rekeyed) Generate(ctx context.Context, req model.Request, onText func(string)) (*model.Response, error) {
	k, err := r.key(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.m == nil || k != r.lastKey {
		m, err := r.make(ctx, k)
		if err != nil {
			r.mu.Unlock()
			return nil, err
		}
		r.m, r.lastKey = m, k
	}
	m := r.m
	r.mu.Unlock()
	return m.Generate(ctx, req, onText)
}

// newOpenAI runs a target on OpenAI's chat completions API, or on the OpenAI-compatible server at
// its base URL; without one, at LUSH_OPENAI_BASE_URL (a proxy or a local stand-in), else OpenAI's.
func newOpenAI(ctx context.Context, t model.Target, key keyFunc) (model.Model, error) {
	base := t.BaseURL
	if base == "" {
		base = os.Getenv("LUSH_OPENAI_BASE_URL")
	}
	return openai.New(ctx, openai.Config{BaseURL: base, Key: key, Organization: t.Organization, Project: t.Project})
}
