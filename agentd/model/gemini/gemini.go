// Package gemini implements model.Model for Google's Gemini API through the
// google.golang.org/genai client: it turns agentd's requests into
// GenerateContent calls (streamed when the caller wants text as it arrives),
// Gemini's answers into model.Response, and Gemini's API errors into
// *model.Error. The API key never appears in the errors it returns.
//
// model.ToolCall has no field for Gemini's thought signatures, so they are
// not kept; replayed function calls carry Google's documented placeholder
// instead, which Gemini 3 models require (see skipSignature).
package gemini

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"google.golang.org/genai"

	"github.com/lush-agents/lush/agentd/model"
)

// provider names Gemini in errors.
const provider = "gemini"

// Config configures a Model.
type Config struct {
	APIKey string // the Gemini API key; required
	// BaseURL replaces https://generativelanguage.googleapis.com/, e.g. to
	// reach a proxy or a local stand-in. When empty, genai also honours the
	// GOOGLE_GEMINI_BASE_URL environment variable.
	BaseURL    string
	HTTPClient *http.Client // nil: a client without a timeout; bound calls with the context
	// MaxResponseBytes bounds what is read of one response (a streamed
	// answer's whole stream): past it the request fails with a
	// *model.Error. 0 is model.DefaultMaxResponseBytes.
	MaxResponseBytes int64
}

// Model is the Gemini provider. It is safe for concurrent use.
type Model struct {
	client *genai.Client
	key    string // to scrub from errors
}

var _ model.Model = (*Model)(nil)

// New returns a Model calling the Gemini API with cfg.
func New(ctx context.Context, cfg Config) (*Model, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("gemini: no API key: set GOOGLE_API_KEY to a Gemini API key")
	}
	client, err := genai.NewClient(ctx, &genai.ClientConfig{
		APIKey:      cfg.APIKey,
		Backend:     genai.BackendGeminiAPI,
		HTTPClient:  model.BoundResponses(cfg.HTTPClient, provider, cfg.MaxResponseBytes),
		HTTPOptions: genai.HTTPOptions{BaseURL: cfg.BaseURL},
	})
	if err != nil {
		// genai's configuration errors print the whole ClientConfig, key included.
		return nil, model.Scrub(cfg.APIKey, "gemini: creating the client", err)
	}
	return &Model{client: client, key: cfg.APIKey}, nil
}

// Generate implements model.Model. With onText set it streams, passing each
// chunk's text to onText as it arrives; text already passed stays passed if
// the stream then fails.
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
		return nil, errors.New("gemini generate: the request names no model")
	}
	contents, err := toContents(req.Messages)
	if err != nil {
		return nil, fmt.Errorf("gemini generate: %w", err)
	}
	config, err := toConfig(req)
	if err != nil {
		return nil, fmt.Errorf("gemini generate: %w", err)
	}

	var acc accumulator
	if onText == nil {
		resp, err := m.client.Models.GenerateContent(ctx, req.Model, contents, config)
		if err != nil {
			return nil, m.generateError(err)
		}
		acc.add(resp, nil)
	} else {
		for chunk, err := range m.client.Models.GenerateContentStream(ctx, req.Model, contents, config) {
			if err != nil {
				return nil, m.generateError(err)
			}
			acc.add(chunk, onText)
		}
	}
	return acc.response()
}

// generateError turns an error of a genai call into agentd's terms: an API
// error becomes *model.Error, anything else is wrapped. The key is scrubbed
// from both.
func (m *Model) generateError(err error) error {
	var apiErr genai.APIError
	if errors.As(err, &apiErr) {
		return m.apiError(apiErr)
	}
	var apiErrPtr *genai.APIError
	if errors.As(err, &apiErrPtr) && apiErrPtr != nil {
		return m.apiError(*apiErrPtr)
	}
	return model.Scrub(m.key, "gemini generate", err)
}

// maxMessage bounds an API error message: a proxy in the way may answer
// with a whole HTML page, which genai passes on as the message.
const maxMessage = 1000

// statusCode matches google.rpc.Code names such as RESOURCE_EXHAUSTED.
var statusCode = regexp.MustCompile(`^[A-Z][A-Z_]*$`)

// apiError converts Gemini's error response.
func (m *Model) apiError(e genai.APIError) *model.Error {
	msg := strings.TrimSpace(model.Redact(m.key, e.Message))
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "…"
	}
	code := e.Status
	if !statusCode.MatchString(code) {
		// Not Google's error body: genai puts the HTTP status line
		// ("502 Bad Gateway") here instead.
		code = ""
	}
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return &model.Error{Provider: provider, Status: e.Code, Code: code, Message: msg}
}
