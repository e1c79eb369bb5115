// Package openai implements model.Model for OpenAI's chat completions API, and for the servers
// that speak it (vLLM, Ollama, LiteLLM, llama.cpp server) at a base URL of their own, through the
// official github.com/openai/openai-go client. It turns agentd's requests into chat completion
// requests (streamed when the caller wants text as it arrives, with the usage asked for),
// the answers into model.Response (text, tool calls with their ids, refusals, the finish reason,
// token counts), and API errors into *model.Error. The API key is asked for on every request
// (Config.Key), so a rotated key is used at once, and never appears in the errors it returns.
//
// Chat completions, not the Responses API: every OpenAI-compatible server speaks chat
// completions, and what agentd needs (a system prompt, tools with JSON Schemas, parallel tool
// calls with ids, tool results, streaming, refusals, usage) is all there. The Responses API adds
// server-side state and OpenAI's hosted tools, which agentd does not use: its tools run through
// the gateway, and the conversation is agentd's.
package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/lush-agents/lush/agentd/model"
)

// provider names OpenAI in errors.
const provider = "openai"

// DefaultBaseURL is OpenAI's API.
const DefaultBaseURL = "https://api.openai.com/v1/"

// DefaultMaxRetries is how often a request that failed with 408, 409, 429 or 5xx, or that could
// not connect, is retried (the client honours Retry-After).
const DefaultMaxRetries = 2

// Config configures a Model. Anthropic's provider has the same shape.
type Config struct {
	// BaseURL replaces DefaultBaseURL: an OpenAI-compatible server (e.g.
	// http://127.0.0.1:11434/v1 for Ollama) or a proxy.
	BaseURL string
	// Key returns the API key for a request; it is called for every request. A key of "" sends
	// no Authorization header (local servers need none). Required.
	Key func(context.Context) (string, error)
	// HTTPClient sends the requests; nil is a client without a timeout (Timeout and the
	// context bound the calls).
	HTTPClient *http.Client
	// MaxRetries is how often a failed request is retried: 0 is DefaultMaxRetries, a negative
	// value never retries.
	MaxRetries int
	// Timeout bounds one Generate, retries included; 0 leaves it to the caller's context.
	Timeout time.Duration
	// Organization and Project are sent as the OpenAI-Organization and OpenAI-Project headers
	// when set.
	Organization, Project string
	// MaxResponseBytes bounds what is read of one response (a streamed answer's whole stream):
	// past it the request fails with a *model.Error. 0 is model.DefaultMaxResponseBytes.
	MaxResponseBytes int64
}

// Model is the OpenAI provider. It is safe for concurrent use.
type Model struct {
	chat    openai.ChatCompletionService
	key     func(context.Context) (string, error)
	timeout time.Duration
}

var _ model.Model = (*Model)(nil)

// New returns a Model calling the chat completions API as c says. It reads no environment
// variable (the caller decides where keys and URLs come from) and makes no request.
func New(_ context.Context, c Config) (*Model, error) {
	if c.Key == nil {
		return nil, errors.New("openai: Config.Key is required (return \"\" for a server that needs no key)")
	}
	base := c.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	retries := c.MaxRetries
	switch {
	case retries == 0:
		retries = DefaultMaxRetries
	case retries < 0:
		retries = 0
	}
	hc := model.BoundResponses(c.HTTPClient, provider, c.MaxResponseBytes)
	opts := []option.RequestOption{option.WithBaseURL(base), option.WithHTTPClient(hc), option.WithMaxRetries(retries)}
	if c.Organization != "" {
		opts = append(opts, option.WithOrganization(c.Organization))
	}
	if c.Project != "" {
		opts = append(opts, option.WithProject(c.Project))
	}
	// NewChatCompletionService, unlike openai.NewClient, reads no OPENAI_* variable.
	return &Model{chat: openai.NewChatCompletionService(opts...), key: c.Key, timeout: c.Timeout}, nil
}

// Generate implements model.Model. With onText set it streams, passing each piece of text to
// onText as it arrives; text already passed stays passed if the stream then fails.
func (m *Model) Generate(ctx context.Context, req model.Request, onText func(string)) (*model.Response, error) {
	ctx, tooLarge := model.WatchResponses(ctx)
	resp, err := m.generate(ctx, req, onText)
	if err != nil {
		if e := tooLarge(); e != nil {
			return nil, e // a response over MaxResponseBytes, however the SDK reported it
		}
	}
	return resp, err
}

func (m *Model) generate(ctx context.Context, req model.Request, onText func(string)) (*model.Response, error) {
	if req.Model == "" {
		return nil, errors.New("openai generate: the request names no model")
	}
	params, err := toParams(req)
	if err != nil {
		return nil, fmt.Errorf("openai generate: %w", err)
	}
	if m.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.timeout)
		defer cancel()
	}
	key, err := m.key(ctx)
	if err != nil {
		return nil, err
	}
	opts := []option.RequestOption{option.WithAPIKey(key)}

	if onText == nil {
		resp, err := m.chat.New(ctx, params, opts...)
		if err != nil {
			return nil, generateError(key, err)
		}
		return fromCompletion(resp)
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)}
	stream := m.chat.NewStreaming(ctx, params, opts...)
	defer stream.Close()
	var acc accumulator
	for stream.Next() {
		if err := acc.add(stream.Current(), onText); err != nil {
			return nil, err
		}
	}
	if err := stream.Err(); err != nil {
		return nil, generateError(key, err)
	}
	return acc.response()
}

// maxMessage bounds an API error message: a proxy in the way may answer with a whole HTML page.
const maxMessage = 1000

// generateError turns an error of a call into agentd's terms: an API error becomes
// *model.Error (OpenAI's type as its code, or the code when there is one), anything else is
// wrapped. The key is removed from both.
func generateError(key string, err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		msg := strings.TrimSpace(model.Redact(key, apiErr.Message))
		if len(msg) > maxMessage {
			msg = msg[:maxMessage] + "…"
		}
		if msg == "" {
			msg = http.StatusText(apiErr.StatusCode)
		}
		code := apiErr.Code
		if code == "" {
			code = apiErr.Type
		}
		return &model.Error{Provider: provider, Status: apiErr.StatusCode, Code: model.Redact(key, code), Message: msg}
	}
	return model.Scrub(key, "openai generate", err)
}

// toolNames is what OpenAI accepts as a function name: ^[a-zA-Z0-9_-]{1,64}$.
var toolNames = model.NameRule{Max: 64, Punct: "_-"}

var _ model.ToolNamer = (*Model)(nil)

// ToolNames implements model.ToolNamer.
func (m *Model) ToolNames(context.Context, model.Request) model.NameRule { return toolNames }
