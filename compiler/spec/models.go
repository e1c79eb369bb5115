package spec

import (
	"fmt"
	"net/url"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/modelref"
)

// ModelEntry is a table entry of lush.yaml models: a name agents' specs use as their model,
// mapped to a provider, the provider's model id, and optionally an endpoint and a credential.
// Provider or Model is unset only in a file with errors.
type ModelEntry struct {
	Name       Scalar[string]
	Provider   Scalar[string] // one of modelref.Providers
	Model      Scalar[string] // the provider's model id
	BaseURL    Scalar[string] // an OpenAI-compatible (or other) endpoint instead of the provider's API
	Credential Scalar[string] // the name of the key in the broker: model://<credential>
	// Provider-specific settings.
	Organization Scalar[string] // openai
	Project      Scalar[string] // openai
	MaxTokens    Scalar[int]    // anthropic
	Pos          diag.Pos
}

// MaxModelTokens bounds a models: entry's max_tokens.
const MaxModelTokens = 1_000_000

var modelEntryFields = []string{"name", "provider", "model", "base_url", "credential", "organization", "project", "max_tokens"}

// providerFields are the settings only one provider has.
var providerFields = map[string]string{"organization": modelref.OpenAI, "project": modelref.OpenAI, "max_tokens": modelref.Anthropic}

// models decodes lush.yaml's models: a list whose items are model names or table entries.
func (d *decoder) models(n *yaml.Node, p *ProjectConfig) {
	d.seq(n, "models", func(item *yaml.Node) {
		item = d.resolve(item)
		if item == nil {
			return
		}
		if item.Kind == yaml.MappingNode {
			if e, ok := d.modelEntry(item); ok {
				p.ModelEntries = append(p.ModelEntries, e)
			}
			return
		}
		s, ok := d.str(item, "each item of models")
		if !ok {
			return
		}
		if _, _, prefix, known := modelref.Split(s.Value); !known {
			d.unknownProvider(s.Pos, prefix, s.Value)
			return
		}
		p.Models = append(p.Models, s)
	})
}

// unknownProvider reports a model name whose prefix is no provider.
func (d *decoder) unknownProvider(pos diag.Pos, prefix, name string) {
	if prefix == "" || strings.HasSuffix(name, "/") {
		d.l.ErrorHint(pos, "invalid-value", "write provider/model-id, e.g. openai/gpt-4.1-mini", "model %q has no model id after the provider", name)
		return
	}
	hint := diag.DidYouMean(prefix, modelref.Providers)
	if hint != "" {
		hint += " "
	}
	hint += "a model name is a bare Gemini name or provider/model-id with provider one of " + strings.Join(modelref.Providers, ", ") +
		"; for another model id with a slash, add a models: entry in lush.yaml (name, provider, model)"
	d.l.ErrorHint(pos, "unknown-provider", hint, "model %q: unknown provider %q", name, prefix)
}

func (d *decoder) modelEntry(n *yaml.Node) (ModelEntry, bool) {
	e := ModelEntry{Pos: d.at(n)}
	var present []string
	ok := d.fields(n, "a models: entry", modelEntryFields, []string{"name", "provider", "model"}, func(k string, v *yaml.Node) {
		present = append(present, k)
		switch k {
		case "name":
			if s, ok := d.str(v, "name"); ok {
				if !modelref.ValidName(s.Value) {
					d.l.ErrorHint(s.Pos, "invalid-name", "use lower-case letters, digits, '.', '_' and '-' (no '/': provider/id names are resolved without an entry)", "model name %q is not valid", s.Value)
				} else {
					e.Name = s
				}
			}
		case "provider":
			e.Provider, _ = d.enum(v, "provider", modelref.Providers)
		case "model":
			e.Model, _ = d.str(v, "model")
		case "base_url":
			if s, ok := d.str(v, "base_url"); ok && d.checkBaseURL(s) {
				e.BaseURL = s
			}
		case "credential":
			if s, ok := d.str(v, "credential"); ok {
				if !modelref.ValidName(s.Value) {
					d.l.ErrorHint(s.Pos, "invalid-name", "name the key as lushctl auth add model://<name> stores it: lower-case letters, digits, '.', '_' and '-'", "credential %q is not valid", s.Value)
				} else {
					e.Credential = s
				}
			}
		case "organization":
			e.Organization, _ = d.str(v, "organization")
		case "project":
			e.Project, _ = d.str(v, "project")
		case "max_tokens":
			e.MaxTokens, _ = d.integer(v, "max_tokens", 1, MaxModelTokens)
		}
	})
	if !ok {
		return e, false
	}
	if e.Provider.Set() {
		for _, k := range present {
			if want, only := providerFields[k]; only && want != e.Provider.Value {
				d.l.ErrorHint(d.keyPos(n, k), "wrong-provider", fmt.Sprintf("remove it, or set provider: %s", want),
					"%s applies to provider %s only, and this entry's provider is %s", k, want, e.Provider.Value)
			}
		}
	}
	// An incomplete entry is kept (its problems are reported) so that specs naming it are not
	// reported as naming an unknown model too.
	return e, e.Name.Set()
}

// keyPos is where key k of mapping n is written.
func (d *decoder) keyPos(n *yaml.Node, k string) diag.Pos {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == k {
			return d.at(n.Content[i])
		}
	}
	return d.at(n)
}

// checkBaseURL accepts an absolute http(s) URL without credentials, query or fragment.
func (d *decoder) checkBaseURL(s Scalar[string]) bool {
	u, err := url.Parse(s.Value)
	hint := "write the API's base URL, e.g. http://127.0.0.1:11434/v1 (Ollama) or https://llm.internal.example.com/v1"
	switch {
	case err != nil:
		d.l.ErrorHint(s.Pos, "invalid-url", hint, "base_url %q is not a URL", s.Value)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		d.l.ErrorHint(s.Pos, "invalid-url", hint, "base_url %q must be an absolute http:// or https:// URL", s.Value)
	case u.User != nil:
		d.l.ErrorHint(s.Pos, "invalid-url", "keys come from the credential broker (credential: and lushctl auth add model://<name>), never from lush.yaml",
			"base_url must not carry a user name or password")
	case u.RawQuery != "" || u.Fragment != "":
		d.l.ErrorHint(s.Pos, "invalid-url", hint, "base_url %q must not have a query or fragment", s.Value)
	default:
		return true
	}
	return false
}
