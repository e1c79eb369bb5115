package compiler

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/modelref"
)

// checkModels resolves each agent's model to where it runs (a models: entry, a provider/id name,
// or a bare Gemini name) and reports models the project does not know, with suggestions. Known
// models are every provider's defaults (modelref.Defaults), replaced by the names lush.yaml's
// models: lists when it lists any, plus the names of its table entries.
func (b *build) checkModels() {
	entries := b.modelEntries()
	known := modelref.DefaultNames()
	where := "set models: in lush.yaml to allow others"
	if len(b.cfg.Models) > 0 {
		known = nil
		for _, m := range b.cfg.Models {
			known = append(known, m.Value)
		}
		where = "add it to models: in lush.yaml"
	}
	for _, e := range b.cfg.ModelEntries {
		if e.Name.Set() {
			known = append(known, e.Name.Value)
		}
	}
	b.targets = map[string]manifest.ModelTarget{}
	for _, name := range b.agentNames() {
		m := b.agents[name].Model
		if !m.Set() {
			continue
		}
		if e, ok := entries[m.Value]; ok {
			if e.Provider.Set() && e.Model.Set() {
				b.targets[name] = entryTarget(e)
			}
			continue
		}
		provider, id, prefix, ok := modelref.Split(m.Value)
		if provider != "" && id == "" {
			b.l.ErrorHint(m.Pos, "invalid-value", fmt.Sprintf("write %s/<model id>, e.g. %s/%s", provider, provider, modelref.Defaults(provider)[0]),
				"model %q has no model id after the provider", m.Value)
			continue
		}
		if !ok {
			hint := diag.DidYouMean(prefix, modelref.Providers)
			if c := diag.DidYouMean(m.Value, known); c != "" {
				hint = c
			}
			if hint != "" {
				hint += " "
			}
			hint += fmt.Sprintf("write a bare Gemini name, provider/model-id with provider one of %s, or the name of a models: entry in lush.yaml", strings.Join(modelref.Providers, ", "))
			b.l.ErrorHint(m.Pos, "unknown-provider", hint, "model %q: unknown provider %q", m.Value, prefix)
			continue
		}
		if !slices.Contains(known, m.Value) && !(prefix == modelref.Gemini && slices.Contains(known, id)) {
			hint := fmt.Sprintf("known %s models: %s (%s)", provider, strings.Join(sameProvider(known, provider), ", "), where)
			if c := otherProvider(m.Value, prefix, known); c != "" {
				hint = fmt.Sprintf("did you mean %q? (a name without provider/ is a Gemini model) ", c) + hint
			} else if c := diag.DidYouMean(m.Value, known); c != "" {
				hint = c + " " + hint
			}
			b.l.ErrorHint(m.Pos, "unknown-model", hint, "unknown model %q", m.Value)
			continue
		}
		b.targets[name] = manifest.ModelTarget{Provider: provider, Model: id, Credential: modelref.Credential(provider)}
	}
}

// Tool names are not checked against the provider an agent's model runs on: agentd offers
// every tool the gateway lists under a name the provider accepts, and maps the model's calls back
// (agentd/toolnames.go), so no MCP tool name is one a provider cannot be offered.

// modelEntries indexes lush.yaml's models: entries by name, reporting duplicates and entries
// that would take another provider's key.
func (b *build) modelEntries() map[string]spec.ModelEntry {
	out := map[string]spec.ModelEntry{}
	for _, e := range b.cfg.ModelEntries {
		if prev, dup := out[e.Name.Value]; dup {
			b.l.ErrorHint(e.Name.Pos, "duplicate-model", "rename one of them", "models: entry %q is already defined at line %d", e.Name.Value, prev.Name.Pos.Line)
			continue
		}
		if slices.ContainsFunc(b.cfg.Models, func(s spec.Scalar[string]) bool { return s.Value == e.Name.Value }) {
			b.l.ErrorHint(e.Name.Pos, "duplicate-model", "rename the entry, or remove the name from the list", "models: entry %q has the name of a model the list names", e.Name.Value)
			continue
		}
		if c := e.Credential; c.Set() && slices.Contains(modelref.Providers, c.Value) && c.Value != e.Provider.Value {
			b.l.ErrorHint(c.Pos, "wrong-provider", fmt.Sprintf("remove credential: to use %s (the %s key), or name a credential of its own", modelref.Credential(e.Provider.Value), e.Provider.Value),
				"credential %q is the default key of provider %s, and this entry's provider is %s", c.Value, c.Value, e.Provider.Value)
			continue
		}
		out[e.Name.Value] = e
	}
	return out
}

// entryTarget is where a models: entry runs. The key is the entry's credential; without one, the
// provider's default key, except at a base_url of its own, which is taken to need none (a local
// server such as Ollama).
func entryTarget(e spec.ModelEntry) manifest.ModelTarget {
	t := manifest.ModelTarget{Provider: e.Provider.Value, Model: e.Model.Value, BaseURL: strings.TrimRight(e.BaseURL.Value, "/"),
		Organization: e.Organization.Value, Project: e.Project.Value, MaxTokens: e.MaxTokens.Value}
	switch {
	case e.Credential.Set():
		t.Credential = modelref.Credential(e.Credential.Value)
	case !e.BaseURL.Set():
		t.Credential = modelref.Credential(e.Provider.Value)
	}
	return t
}

// sameProvider are the names of known that run on provider.
func sameProvider(known []string, provider string) []string {
	var out []string
	for _, k := range known {
		if p, _, _, _ := modelref.Split(k); p == provider {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

// otherProvider is provider/name when a bare name is unknown as a Gemini model and known as
// another provider's ("gpt-5" for "openai/gpt-5"), else "".
func otherProvider(name, prefix string, known []string) string {
	if prefix != "" {
		return ""
	}
	for _, p := range modelref.Providers {
		if p != modelref.Gemini && slices.Contains(known, p+"/"+name) {
			return p + "/" + name
		}
	}
	return ""
}
