package anthropicserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

const testKey = "sk-ant-test-key-0123456789"

// start starts a server for the test and an SDK client pointed at it.
func start(t *testing.T, opts ...Option) (*Server, anthropic.Client) {
	t.Helper()
	s := New(testKey, opts...)
	t.Cleanup(s.Close)
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.URL()),
		option.WithAPIKey(testKey), option.WithMaxRetries(0), option.WithoutOpenTelemetry())
	return s, client
}

func params(messages ...anthropic.MessageParam) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 100, Messages: messages}
}

func TestMessage(t *testing.T) {
	s, client := start(t)
	s.Push(Turn{
		Text:  "Looking it up.",
		Calls: []Call{{Name: "search", Input: map[string]any{"q": "lush"}, ID: "toolu_1"}},
		Usage: Usage{Input: 12, Output: 5, CacheRead: 3},
	})
	p := params(anthropic.NewUserMessage(anthropic.NewTextBlock("find lush")))
	p.System = []anthropic.TextBlockParam{{Text: "You are a researcher."}}
	p.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "search", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"q": map[string]any{"type": "string"}}}}}}
	msg, err := client.Messages.New(t.Context(), p)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if len(msg.Content) != 2 || msg.Content[0].Text != "Looking it up." || msg.Content[1].Type != "tool_use" || msg.Content[1].ID != "toolu_1" || string(msg.Content[1].Input) != `{"q":"lush"}` {
		t.Errorf("content = %+v", msg.Content)
	}
	if msg.StopReason != anthropic.StopReasonToolUse || msg.Model != "claude-test" {
		t.Errorf("stop reason %q, model %q", msg.StopReason, msg.Model)
	}
	if u := msg.Usage; u.InputTokens != 12 || u.OutputTokens != 5 || u.CacheReadInputTokens != 3 {
		t.Errorf("usage = %+v", u)
	}
	r := s.Requests()[0]
	if r.System != "You are a researcher." || r.MaxTokens != 100 || r.Stream || r.APIKey != testKey || r.Version == "" {
		t.Errorf("request = %+v", r)
	}
	if !reflect.DeepEqual(r.ToolNames(), []string{"search"}) || !strings.Contains(string(r.Tools[0].InputSchema), `"type":"object"`) {
		t.Errorf("tools = %+v", r.Tools)
	}
}

func TestStream(t *testing.T) {
	s, client := start(t)
	s.Push(Turn{Text: "The quick brown fox.", Calls: []Call{{Name: "note", Input: map[string]any{"text": "a long enough input to split"}}}, Usage: Usage{Input: 7, Output: 9, CacheCreation: 2}})
	stream := client.Messages.NewStreaming(t.Context(), params(anthropic.NewUserMessage(anthropic.NewTextBlock("go"))))
	defer stream.Close()
	var msg anthropic.Message
	var types []string
	textDeltas, jsonDeltas := 0, 0
	for stream.Next() {
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("Accumulate: %v", err)
		}
		types = append(types, ev.Type)
		switch ev.Delta.Type {
		case "text_delta":
			textDeltas++
		case "input_json_delta":
			jsonDeltas++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if types[0] != "message_start" || types[len(types)-2] != "message_delta" || types[len(types)-1] != "message_stop" {
		t.Errorf("events = %v", types)
	}
	if textDeltas < 4 || jsonDeltas < 3 {
		t.Errorf("%d text and %d input JSON deltas, want the text and the input in pieces", textDeltas, jsonDeltas)
	}
	if len(msg.Content) != 2 || msg.Content[0].Text != "The quick brown fox." || string(msg.Content[1].Input) != `{"text":"a long enough input to split"}` || msg.Content[1].ID != "toolu_01_01" {
		t.Errorf("content = %+v", msg.Content)
	}
	if msg.StopReason != anthropic.StopReasonToolUse || msg.Usage.InputTokens != 7 || msg.Usage.OutputTokens != 9 || msg.Usage.CacheCreationInputTokens != 2 {
		t.Errorf("stop %q, usage %+v", msg.StopReason, msg.Usage)
	}
	if !s.Requests()[0].Stream {
		t.Error("the request was not recorded as streamed")
	}
}

func TestRefusalDetails(t *testing.T) {
	s, client := start(t)
	s.Push(Turn{StopReason: "refusal", Refusal: &Refusal{Category: "cyber", Explanation: "no"}})
	msg, err := client.Messages.New(t.Context(), params(anthropic.NewUserMessage(anthropic.NewTextBlock("go"))))
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != anthropic.StopReasonRefusal || msg.StopDetails.Category != "cyber" || msg.StopDetails.Explanation != "no" {
		t.Errorf("stop %q, details %+v", msg.StopReason, msg.StopDetails)
	}
}

func TestErrorsAndRetries(t *testing.T) {
	s := New(testKey)
	t.Cleanup(s.Close)
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.URL()), option.WithAPIKey(testKey), option.WithMaxRetries(2))
	s.Push(Turn{Status: 429, RetryAfter: "0"}, Turn{Status: 529, RetryAfter: "0"}, Turn{Text: "ok"})
	msg, err := client.Messages.New(t.Context(), params(anthropic.NewUserMessage(anthropic.NewTextBlock("go"))))
	if err != nil || msg.Content[0].Text != "ok" || len(s.Requests()) != 3 {
		t.Fatalf("after 429 and 529: %v, %+v, %d requests; want the SDK to retry into the answer", err, msg, len(s.Requests()))
	}

	s.Push(Turn{Status: 400, Message: "nope"})
	_, err = client.Messages.New(t.Context(), params(anthropic.NewUserMessage(anthropic.NewTextBlock("go"))))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Type() != "invalid_request_error" || apiErr.Message != "nope" {
		t.Errorf("error = %v, want a 400 invalid_request_error", err)
	}
}

// post sends body to the server's /v1/messages with the key and version
// headers (unless told otherwise) and returns the status and error message.
func post(t *testing.T, s *Server, body string, header map[string]string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL()+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", testKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error.Type, e.Error.Message
}

func TestChecks(t *testing.T) {
	const (
		user    = `{"role":"user","content":"hi"}`
		useA    = `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_a","name":"t","input":{}}]}`
		resultA = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":"ok"}]}`
	)
	body := func(messages ...string) string {
		return `{"model":"m","max_tokens":10,"messages":[` + strings.Join(messages, ",") + `]}`
	}
	tests := []struct {
		name       string
		body       string
		header     map[string]string
		wantStatus int
		wantType   string
		wantMsg    string
	}{
		{"valid tool round", body(user, useA, resultA), nil, 500, "api_error", "script ran out"},
		{"no key", body(user), map[string]string{"x-api-key": ""}, 401, "authentication_error", "x-api-key header is required"},
		{"wrong key", body(user), map[string]string{"x-api-key": "other"}, 401, "authentication_error", "invalid x-api-key"},
		{"bearer key", body(user), map[string]string{"x-api-key": "", "Authorization": "Bearer " + testKey}, 500, "api_error", "script ran out"},
		{"no version", body(user), map[string]string{"anthropic-version": ""}, 400, "invalid_request_error", "anthropic-version"},
		{"not JSON", `{"model":`, nil, 400, "invalid_request_error", "not valid JSON"},
		{"no max_tokens", `{"model":"m","messages":[` + user + `]}`, nil, 400, "invalid_request_error", "max_tokens: Field required"},
		{"no model", `{"max_tokens":1,"messages":[` + user + `]}`, nil, 400, "invalid_request_error", "model: Field required"},
		{"no messages", `{"model":"m","max_tokens":1,"messages":[]}`, nil, 400, "invalid_request_error", "messages: Field required"},
		{"system role", body(`{"role":"system","content":"x"}`), nil, 400, "invalid_request_error", "messages.0.role"},
		{"roles repeat", body(user, user), nil, 400, "invalid_request_error", "roles must alternate"},
		{"empty text", body(`{"role":"user","content":[{"type":"text","text":""}]}`), nil, 400, "invalid_request_error", "messages.0.content.0.text: text content blocks must be non-empty"},
		{"result without use", body(user, `{"role":"assistant","content":"x"}`, resultA), nil, 400, "invalid_request_error", "unexpected `tool_use_id`"},
		{"use without result", body(user, useA, user), nil, 400, "invalid_request_error", "messages.1: `tool_use` ids were found without `tool_result`"},
		{"use at the end", body(user, useA), nil, 400, "invalid_request_error", "toolu_a"},
		{"result after text", body(user, useA, `{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"toolu_a"}]}`), nil, 400, "invalid_request_error", "must come before"},
		{"bad tool_use id", body(user, `{"role":"assistant","content":[{"type":"tool_use","id":"a.b","name":"t","input":{}}]}`), nil, 400, "invalid_request_error", "content.0.id"},
		{"tool_use in user turn", body(`{"role":"user","content":[{"type":"tool_use","id":"a","name":"t","input":{}}]}`), nil, 400, "invalid_request_error", "only appear in assistant"},
		{"bad tool name", `{"model":"m","max_tokens":1,"messages":[` + user + `],"tools":[{"name":"a.b","input_schema":{"type":"object"}}]}`, nil, 400, "invalid_request_error", "tools.0.name"},
		{"no input_schema", `{"model":"m","max_tokens":1,"messages":[` + user + `],"tools":[{"name":"a"}]}`, nil, 400, "invalid_request_error", "tools.0.input_schema: Field required"},
		{"array input_schema", `{"model":"m","max_tokens":1,"messages":[` + user + `],"tools":[{"name":"a","input_schema":{"type":"array"}}]}`, nil, 400, "invalid_request_error", "tools.0.input_schema.type"},
		{"duplicate tools", `{"model":"m","max_tokens":1,"messages":[` + user + `],"tools":[{"name":"a","input_schema":{"type":"object"}},{"name":"a","input_schema":{"type":"object"}}]}`, nil, 400, "invalid_request_error", "unique"},
	}
	s := New(testKey)
	t.Cleanup(s.Close)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, typ, msg := post(t, s, tt.body, tt.header)
			if status != tt.wantStatus || typ != tt.wantType || !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("answer = %d %s %q, want %d %s with %q", status, typ, msg, tt.wantStatus, tt.wantType, tt.wantMsg)
			}
		})
	}
}

func TestStall(t *testing.T) {
	// The responder cancels the client's context once the request arrived:
	// the stalled reply must end with the request, not hang.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, client := start(t, WithResponder(func(Request) Turn {
		cancel()
		return Turn{Stall: true}
	}))
	_, err := client.Messages.New(ctx, params(anthropic.NewUserMessage(anthropic.NewTextBlock("go"))))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("New = %v, want the stalled call ended by its context", err)
	}
}

func TestRouting(t *testing.T) {
	s, client := start(t, WithRouter(RouteBySystemPrefix("[orchestrator]", "[researcher]")), WithResponder(func(r Request) Turn {
		return Turn{Text: "responder for " + r.Queue}
	}))
	s.PushFor("[researcher]", Turn{Text: "from the researcher queue"})
	ask := func(system string) string {
		p := params(anthropic.NewUserMessage(anthropic.NewTextBlock("go")))
		p.System = []anthropic.TextBlockParam{{Text: system}}
		msg, err := client.Messages.New(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		return msg.Content[0].Text
	}
	if got := ask("[researcher] You research."); got != "from the researcher queue" {
		t.Errorf("researcher got %q", got)
	}
	if got := ask("[orchestrator] You plan."); got != "responder for [orchestrator]" {
		t.Errorf("orchestrator got %q", got)
	}
	if s.Remaining() != 0 {
		t.Errorf("%d turns left", s.Remaining())
	}
}

func TestCloseReleasesStall(t *testing.T) {
	arrived := make(chan struct{})
	s := New(testKey, WithResponder(func(Request) Turn {
		close(arrived)
		return Turn{Stall: true}
	}))
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.URL()), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	errc := make(chan error, 1)
	go func() {
		_, err := client.Messages.New(t.Context(), params(anthropic.NewUserMessage(anthropic.NewTextBlock("go"))))
		errc <- err
	}()
	<-arrived
	s.Close() // must not wait for the stalled reply forever
	if err := <-errc; err == nil {
		t.Error("the stalled call succeeded after Close")
	}
}
