// Package anthropic implements model.Model for Anthropic's Messages API
// through the official github.com/anthropics/anthropic-sdk-go/v2 client: it
// turns agentd's requests into POST /v1/messages calls (streamed when the
// caller wants text as it arrives), Anthropic's messages into
// model.Response, and Anthropic's API errors into *model.Error.
//
// The API key is fetched for every request from Config.Key (so a key the
// credential broker rotates is picked up) and sent as the x-api-key header.
// It never appears in the errors the package returns. Nothing is read from
// the environment: the SDK's ANTHROPIC_* variables (keys, base URL, custom
// headers, profiles) are ignored, and the SDK's own OpenTelemetry spans are
// off (agentd traces model calls itself).
//
// How the two sides map is described in convert.go; in short: the system
// prompt goes in system, tool calls are tool_use blocks and tool results
// tool_result blocks (the results of one turn's calls in one user message),
// consecutive messages of one role are merged, the stop reason is the
// response's FinishReason, and usage counts cache reads and writes as input.
package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/lush-agents/lush/agentd/model"
)

// provider names Anthropic in errors.
const provider = "anthropic"

// DefaultMaxTokens is max_tokens when Config.MaxTokens is 0. The API requires
// max_tokens on every request; an answer that reaches it stops with
// FinishReason max_tokens.
const DefaultMaxTokens = 4096

// DefaultMaxRetries is how often the SDK retries a request that failed with
// 408, 409, 429 or 5xx (529 overloaded included), or without a response,
// when Config.MaxRetries is 0. It waits as retry-after says, else backs off
// from half a second.
const DefaultMaxRetries = 2

// Config configures a Model.
type Config struct {
	// BaseURL replaces https://api.anthropic.com/, e.g. to reach a proxy or
	// a local stand-in; requests go to <BaseURL>/v1/messages.
	BaseURL string
	// Key returns the API key; it is called for every request and its
	// result is never logged nor put in an error. Required. An empty key
	// sends none, for a proxy at BaseURL that adds its own; without a
	// BaseURL it is an error.
	Key func(context.Context) (string, error)
	// HTTPClient sends the requests; nil is a client without a timeout
	// (Timeout and the context bound the calls).
	HTTPClient *http.Client
	// MaxResponseBytes bounds what is read of one response (a streamed
	// answer's whole stream): past it the request fails with a
	// *model.Error. 0 is model.DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// MaxRetries is how often a failed request is retried: 0 is
	// DefaultMaxRetries, a negative number none.
	MaxRetries int
	// Timeout bounds each attempt (a streamed answer's whole stream
	// included); 0 leaves streamed calls bounded by the context alone and
	// lets the SDK give unary calls 10 minutes. The context bounds the
	// whole call, retries included.
	Timeout time.Duration
	// MaxTokens is max_tokens, the most tokens an answer may have: 0 is
	// DefaultMaxTokens. The model's own limit applies too. Unary calls (no
	// onText) with more than 21,333 need a Timeout: the SDK refuses to wait
	// longer than 10 minutes for an answer that is not streamed.
	MaxTokens int
}

// Model is the Anthropic provider. It is safe for concurrent use.
type Model struct {
	client    anthropic.Client
	key       func(context.Context) (string, error)
	maxTokens int
	proxied   bool // a BaseURL is set: an empty key sends none
}

var _ model.Model = (*Model)(nil)

// New returns a Model calling the Messages API with c. It checks c but does
// not call Key or the API.
func New(ctx context.Context, c Config) (*Model, error) {
	if c.Key == nil {
		return nil, errors.New("anthropic: no API key: Config.Key is not set (the key comes from the credential broker)")
	}
	if c.MaxTokens < 0 {
		return nil, fmt.Errorf("anthropic: max tokens %d: want 0 (the default, %d) or more", c.MaxTokens, DefaultMaxTokens)
	}
	if c.Timeout < 0 {
		return nil, fmt.Errorf("anthropic: timeout %s: want 0 (none) or more", c.Timeout)
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithoutOpenTelemetry(),
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("anthropic: base URL %q: want an http or https URL such as https://api.anthropic.com", c.BaseURL)
		}
		opts = append(opts, option.WithBaseURL(c.BaseURL))
	}
	opts = append(opts, option.WithHTTPClient(model.BoundResponses(c.HTTPClient, provider, c.MaxResponseBytes)))
	retries := c.MaxRetries
	switch {
	case retries == 0:
		retries = DefaultMaxRetries
	case retries < 0:
		retries = 0
	}
	opts = append(opts, option.WithMaxRetries(retries))
	if c.Timeout > 0 {
		opts = append(opts, option.WithRequestTimeout(c.Timeout))
	}
	maxTokens := c.MaxTokens
	if maxTokens == 0 {
		maxTokens = DefaultMaxTokens
	}
	return &Model{client: anthropic.NewClient(opts...), key: c.Key, maxTokens: maxTokens, proxied: c.BaseURL != ""}, nil
}

// Generate implements model.Model. With onText set it streams, passing each
// text delta to onText as it arrives; text already passed stays passed if
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
		return nil, errors.New("anthropic generate: the request names no model")
	}
	params, err := toParams(req, m.maxTokens)
	if err != nil {
		return nil, fmt.Errorf("anthropic generate: %w", err)
	}
	key, err := m.key(ctx)
	if err != nil {
		return nil, fmt.Errorf("anthropic generate: getting the API key: %w", err)
	}
	var withKey option.RequestOption = option.WithHeaderDel("x-api-key")
	switch {
	case key != "":
		withKey = option.WithHeader("x-api-key", key)
	case !m.proxied:
		return nil, errors.New("anthropic generate: the API key is empty: api.anthropic.com needs one")
	}

	if onText == nil {
		msg, err := m.client.Messages.New(ctx, params, withKey)
		if err != nil {
			return nil, generateError(key, err)
		}
		return fromMessage(msg, nil, m.maxTokens)
	}

	stream := m.client.Messages.NewStreaming(ctx, params, withKey)
	defer stream.Close()
	var msg anthropic.Message
	stopped := false
	for stream.Next() {
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, model.Scrub(key, "anthropic generate: reading the stream", err)
		}
		switch ev.Type {
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
				onText(ev.Delta.Text)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return nil, generateError(key, err)
	}
	if !stopped {
		return nil, &model.Error{Provider: provider, Message: "the stream ended before message_stop: the answer is incomplete"}
	}
	return fromMessage(&msg, onText, m.maxTokens)
}

// generateError turns an error of an SDK call into agentd's terms: an API
// error becomes *model.Error, anything else is wrapped. The key is scrubbed
// from both.
func generateError(key string, err error) error {
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) && apiErr != nil {
		return apiError(key, apiErr)
	}
	return model.Scrub(key, "anthropic generate", err)
}

// maxMessage bounds an API error message: a proxy in the way may answer
// with a whole HTML page.
const maxMessage = 1000

// apiError converts Anthropic's error response.
func apiError(key string, e *anthropic.Error) *model.Error {
	code := string(e.Type())
	status := e.StatusCode
	if status == http.StatusOK {
		// An error event in a stream that had started: the response's status
		// is 200; report the status Anthropic gives that error type.
		status = statusOf(code)
	}
	msg := e.Message
	if msg == "" && code == "" {
		msg = e.RawJSON() // not Anthropic's error body: say what came
	}
	msg = strings.TrimSpace(model.Redact(key, msg))
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "…"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &model.Error{Provider: provider, Status: status, Code: code, Message: msg}
}

// statusOf is the HTTP status Anthropic answers an error type with, 0 for
// a type it does not document.
func statusOf(errorType string) int {
	switch errorType {
	case "invalid_request_error":
		return http.StatusBadRequest
	case "authentication_error":
		return http.StatusUnauthorized
	case "billing_error":
		return http.StatusPaymentRequired
	case "permission_error":
		return http.StatusForbidden
	case "not_found_error":
		return http.StatusNotFound
	case "request_too_large":
		return http.StatusRequestEntityTooLarge
	case "rate_limit_error":
		return http.StatusTooManyRequests
	case "api_error":
		return http.StatusInternalServerError
	case "timeout_error":
		return http.StatusGatewayTimeout
	case "overloaded_error":
		return 529
	}
	return 0
}

// toolNames is what the Messages API accepts as a tool name: ^[a-zA-Z0-9_-]{1,128}$.
var toolNames = model.NameRule{Max: 128, Punct: "_-"}

var _ model.ToolNamer = (*Model)(nil)

// ToolNames implements model.ToolNamer.
func (m *Model) ToolNames(context.Context, model.Request) model.NameRule { return toolNames }
