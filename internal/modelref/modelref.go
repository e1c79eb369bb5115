// Package modelref is the vocabulary of model names shared by the build and the processes that
// run agents: the providers Lush can run a model on, how a spec's `model:` names one
// (`openai/<id>`, `anthropic/<id>`, `gemini/<id>`, or a bare Gemini name), each provider's default
// list of known models, and where a provider's API key is kept in the credential broker
// (`model://<name>`).
package modelref

import (
	"regexp"
	"slices"
	"strings"
)

// The providers.
const (
	Gemini    = "gemini"
	OpenAI    = "openai"
	Anthropic = "anthropic"
)

// Providers are the providers a model can run on, sorted.
var Providers = []string{Anthropic, Gemini, OpenAI}

// Defaults are each provider's known models when lush.yaml lists none of its own. Gemini's are
// written bare (as specs always named them); the others are named with their provider's prefix.
func Defaults(provider string) []string {
	switch provider {
	case Gemini:
		return []string{"gemini-2.0-flash", "gemini-2.0-flash-lite",
			"gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.5-pro",
			"gemini-3-flash-preview", "gemini-3-pro-preview"}
	case OpenAI:
		return []string{"gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano", "gpt-4o", "gpt-4o-mini",
			"gpt-5", "gpt-5-mini", "gpt-5-nano", "o3", "o4-mini"}
	case Anthropic:
		return []string{"claude-3-5-haiku-latest", "claude-3-7-sonnet-latest", "claude-haiku-4-5",
			"claude-opus-4-1", "claude-opus-4-5", "claude-sonnet-4-0", "claude-sonnet-4-5"}
	}
	return nil
}

// DefaultNames are every provider's default models as a spec names them: Gemini's bare, the
// others as provider/id.
func DefaultNames() []string {
	out := Defaults(Gemini)
	for _, p := range []string{OpenAI, Anthropic} {
		for _, id := range Defaults(p) {
			out = append(out, p+"/"+id)
		}
	}
	return out
}

// Split reads a model name: "openai/gpt-4.1" is provider openai, id gpt-4.1; a name without a
// slash is a Gemini model. prefix is what stands before the first slash ("" for a bare name);
// known reports whether it is a provider (always true for a bare name).
func Split(name string) (provider, id, prefix string, known bool) {
	p, rest, ok := strings.Cut(name, "/")
	if !ok {
		return Gemini, name, "", true
	}
	if slices.Contains(Providers, p) {
		return p, rest, p, rest != ""
	}
	return "", "", p, false
}

// Scheme is how the credential broker addresses a model provider's key: model://<name>, where
// name is a provider (its default key) or a credential name a lush.yaml models: entry gives.
const Scheme = "model://"

// Credential is the broker address of the key called name.
func Credential(name string) string { return Scheme + name }

// KeyPrincipal is the principal model keys are stored for (in the local credentials file and in
// Vault's path template): the process that runs agents, not a person.
const KeyPrincipal = "serviceaccount:agentd"

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidName reports whether s can name a models: entry or a credential: lower-case letters,
// digits, '.', '_' and '-', starting with a letter or digit, at most 63 characters.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// ParseCredential reads a model://<name> address; ok is false for anything else.
func ParseCredential(s string) (name string, ok bool) {
	name, ok = strings.CutPrefix(s, Scheme)
	return name, ok && ValidName(name)
}

// EnvKey is the environment variable a provider's key is read from on a laptop when the broker
// has none for model://<provider>.
func EnvKey(provider string) string {
	switch provider {
	case Gemini:
		return "GOOGLE_API_KEY"
	case OpenAI:
		return "OPENAI_API_KEY"
	case Anthropic:
		return "ANTHROPIC_API_KEY"
	}
	return ""
}
