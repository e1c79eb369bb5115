package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/agentd/model/gemini"
	"github.com/lush-agents/lush/agentd/model/scripted"
)

// The model providers agentd can run agents on.
const (
	providerGemini   = "gemini"
	providerScripted = "scripted"
)

// modelConfig chooses and configures the model provider.
type modelConfig struct {
	provider string // gemini or scripted; "" picks gemini when GOOGLE_API_KEY is set
	scripts  string // the scripted provider's directory (default <project>/scripts)
}

// newModel returns the provider the config names. Gemini reads GOOGLE_API_KEY (and
// LUSH_GEMINI_BASE_URL, to reach a proxy or a local stand-in of the API).
func newModel(ctx context.Context, c modelConfig, projectDir string) (model.Model, string, error) {
	provider := c.provider
	if provider == "" {
		if os.Getenv("GOOGLE_API_KEY") == "" {
			return nil, "", usage("no model provider: set GOOGLE_API_KEY to run agents on Gemini, or use the offline scripted provider " +
				"(--provider scripted, LUSH_MODEL_PROVIDER=scripted), which replays <project>/scripts/<agent>.yaml")
		}
		provider = providerGemini
	}
	switch provider {
	case providerGemini:
		m, err := gemini.New(ctx, gemini.Config{APIKey: os.Getenv("GOOGLE_API_KEY"), BaseURL: os.Getenv("LUSH_GEMINI_BASE_URL")})
		if err != nil {
			return nil, "", usage("%v", err)
		}
		return m, "gemini (Google Gemini API)", nil
	case providerScripted:
		dir := c.scripts
		if dir == "" {
			dir = filepath.Join(projectDir, "scripts")
		}
		m, err := scripted.New(dir)
		if err != nil {
			return nil, "", usage("%v: the scripted provider replays <dir>/<agent>.yaml (--scripts, LUSH_SCRIPTS)", err)
		}
		return m, fmt.Sprintf("scripted (offline: replays %s/<agent>.yaml; no model runs)", dir), nil
	}
	return nil, "", usage("model provider %q: use gemini or scripted", provider)
}
