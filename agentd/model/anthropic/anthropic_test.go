package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/test/anthropicserver"
)

const (
	testKey   = "sk-ant-TEST-secret-key-0123456789"
	testModel = "claude-sonnet-4-5"
)

// staticKey returns a Config.Key that always gives key.
func staticKey(key string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return key, nil }
}

// setup starts an Anthropic stand-in and a Model using it; edit adjusts the
// Config (the key defaults to testKey, retries to none).
func setup(t *testing.T, edit func(*Config), opts ...anthropicserver.Option) (*anthropicserver.Server, *Model) {
	t.Helper()
	s := anthropicserver.New(testKey, opts...)
	t.Cleanup(s.Close)
	c := Config{BaseURL: s.URL(), Key: staticKey(testKey), MaxRetries: -1}
	if edit != nil {
		edit(&c)
	}
	m, err := New(t.Context(), c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, m
}

// generate calls m.Generate, streaming when stream is set, and returns the
// text pieces streamed.
func generate(t *testing.T, m *Model, req model.Request, stream bool) (*model.Response, []string, error) {
	t.Helper()
	var pieces []string
	var onText func(string)
	if stream {
		onText = func(s string) { pieces = append(pieces, s) }
	}
	resp, err := m.Generate(t.Context(), req, onText)
	return resp, pieces, err
}

func userText(text string) model.Message {
	return model.Message{Role: model.RoleUser, Parts: []model.Part{{Text: text}}}
}

// modes runs f unary and streamed.
func modes(t *testing.T, f func(t *testing.T, stream bool)) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "unary", true: "stream"}[stream], func(t *testing.T) { f(t, stream) })
	}
}

func TestGenerateText(t *testing.T) {
	modes(t, func(t *testing.T, stream bool) {
		s, m := setup(t, nil)
		s.Push(anthropicserver.Turn{
			Text:  "Lush is a policy gateway.",
			Usage: anthropicserver.Usage{Input: 21, Output: 6, CacheCreation: 5, CacheRead: 3},
		})
		resp, pieces, err := generate(t, m, model.Request{
			Model:    testModel,
			System:   "You are terse.",
			Messages: []model.Message{userText("What is Lush?")},
		}, stream)
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		want := &model.Response{
			Parts:        []model.Part{{Text: "Lush is a policy gateway."}},
			Usage:        model.Usage{Input: 21 + 5 + 3, Output: 6},
			FinishReason: "end_turn",
			ModelVersion: testModel,
		}
		if !reflect.DeepEqual(resp, want) {
			t.Errorf("response = %+v, want %+v", resp, want)
		}
		if stream && (len(pieces) < 3 || strings.Join(pieces, "") != want.Parts[0].Text) {
			t.Errorf("streamed %q, want the text in several pieces", pieces)
		}

		r := s.Requests()[0]
		if r.Stream != stream || r.Model != testModel || r.System != "You are terse." || r.MaxTokens != DefaultMaxTokens || len(r.Tools) != 0 {
			t.Errorf("request = %+v, want model %s, stream %v, the system prompt, max_tokens %d and no tools", r, testModel, stream, DefaultMaxTokens)
		}
		if len(r.Messages) != 1 || r.Messages[0].Role != "user" || r.Messages[0].Content[0].Text != "What is Lush?" {
			t.Errorf("messages = %+v, want the user's question alone (the system prompt is not a message)", r.Messages)
		}
		if r.Header.Get("x-api-key") != testKey || r.Header.Get("Authorization") != "" {
			t.Errorf("headers x-api-key %q, Authorization %q: want the key in x-api-key only", r.Header.Get("x-api-key"), r.Header.Get("Authorization"))
		}
		if r.Version == "" {
			t.Error("no anthropic-version header")
		}
	})
}

func TestMaxTokensConfigured(t *testing.T) {
	s, m := setup(t, func(c *Config) { c.MaxTokens = 321 })
	s.Push(anthropicserver.Turn{Text: "ok"})
	if _, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, false); err != nil {
		t.Fatal(err)
	}
	if got := s.Requests()[0].MaxTokens; got != 321 {
		t.Errorf("max_tokens = %d, want 321", got)
	}
}

func TestToolRoundTrip(t *testing.T) {
	modes(t, func(t *testing.T, stream bool) {
		s, m := setup(t, nil)
		args := map[string]any{"url": "https://example.com", "options": map[string]any{"depth": 2.0, "tags": []any{"a", "b"}}}
		s.Push(
			anthropicserver.Turn{Text: "Fetching.", Calls: []anthropicserver.Call{{ID: "toolu_01A", Name: "web_fetch", Input: args}}},
			anthropicserver.Turn{Text: "The page says hello."},
		)
		schema := json.RawMessage(`{"type":"object","properties":{"url":{"type":"string","format":"uri"}},"required":["url"],"additionalProperties":false}`)
		req := model.Request{
			Model:    testModel,
			System:   "You are a researcher.",
			Messages: []model.Message{userText("Fetch example.com")},
			Tools: []model.Tool{
				{Name: "web_fetch", Description: "Fetches a page.", InputSchema: schema},
				{Name: "clock"},
			},
		}
		first, _, err := generate(t, m, req, stream)
		if err != nil {
			t.Fatalf("first Generate: %v", err)
		}
		wantCall := &model.ToolCall{ID: "toolu_01A", Name: "web_fetch", Args: args}
		if calls := first.Calls(); len(calls) != 1 || !reflect.DeepEqual(calls[0], wantCall) {
			t.Fatalf("calls = %+v, want %+v (the input JSON assembled)", calls, wantCall)
		}
		if first.FinishReason != "tool_use" || first.Text() != "Fetching." {
			t.Errorf("first = %+v, want text then the call, finish tool_use", first)
		}

		output := map[string]any{"status": 200.0, "body": "hello"}
		req.Messages = append(req.Messages,
			model.Message{Role: model.RoleModel, Parts: first.Parts},
			model.Message{Role: model.RoleUser, Parts: []model.Part{{Result: &model.ToolResult{ID: "toolu_01A", Name: "web_fetch", Output: output}}}},
		)
		second, _, err := generate(t, m, req, stream)
		if err != nil {
			t.Fatalf("second Generate: %v", err)
		}
		if second.Text() != "The page says hello." || len(second.Calls()) != 0 {
			t.Errorf("second = %+v, want the text and no calls", second)
		}

		reqs := s.Requests()
		for i, r := range reqs {
			if got := r.ToolNames(); !reflect.DeepEqual(got, []string{"web_fetch", "clock"}) {
				t.Errorf("request %d: tools = %v", i, got)
			}
			assertJSONEqual(t, "web_fetch input_schema", r.Tools[0].InputSchema, schema)
			assertJSONEqual(t, "clock input_schema", r.Tools[1].InputSchema, json.RawMessage(`{"type":"object"}`))
			if r.Tools[0].Description != "Fetches a page." || r.Tools[1].Description != "" {
				t.Errorf("request %d: descriptions %q, %q", i, r.Tools[0].Description, r.Tools[1].Description)
			}
		}
		r := reqs[1]
		if len(r.Messages) != 3 || r.Messages[1].Role != "assistant" || r.Messages[2].Role != "user" {
			t.Fatalf("second request messages = %+v, want user, assistant, user", r.Messages)
		}
		use := r.Messages[1].Content[1]
		if use.Type != "tool_use" || use.ID != "toolu_01A" || use.Name != "web_fetch" || !reflect.DeepEqual(use.Input, args) {
			t.Errorf("replayed call = %+v", use)
		}
		results := r.LastToolResults()
		if len(results) != 1 || results[0].ToolUseID != "toolu_01A" || results[0].IsError {
			t.Fatalf("tool results = %+v, want one for toolu_01A, not an error", results)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(results[0].ResultText()), &got); err != nil || !reflect.DeepEqual(got, output) {
			t.Errorf("result content %q, want the output %v as JSON", results[0].ResultText(), output)
		}
	})
}

func TestParallelToolCallsAndErrors(t *testing.T) {
	modes(t, func(t *testing.T, stream bool) {
		s, m := setup(t, nil)
		s.Push(
			anthropicserver.Turn{Calls: []anthropicserver.Call{
				{ID: "toolu_a", Name: "search", Input: map[string]any{"q": "lush"}},
				{ID: "toolu_b", Name: "search", Input: map[string]any{"q": "opa"}},
				{ID: "toolu_c", Name: "delete_file", Input: map[string]any{"path": "/etc"}},
			}},
			anthropicserver.Turn{Text: "Done."},
		)
		req := model.Request{Model: testModel, Messages: []model.Message{userText("go")}, Tools: []model.Tool{{Name: "search"}, {Name: "delete_file"}}}
		first, _, err := generate(t, m, req, stream)
		if err != nil {
			t.Fatal(err)
		}
		calls := first.Calls()
		if len(calls) != 3 || calls[0].ID != "toolu_a" || calls[1].ID != "toolu_b" || calls[2].Name != "delete_file" || calls[1].Args["q"] != "opa" {
			t.Fatalf("calls = %+v, want the three in order with their ids", calls)
		}
		denied := map[string]any{"error": map[string]any{"code": "denied", "message": "policy denies delete_file"}}
		// agentd sends the results in one message; here they come in two, and a
		// note in a third: all must reach the API as one user turn, results first.
		req.Messages = append(req.Messages,
			model.Message{Role: model.RoleModel, Parts: first.Parts},
			model.Message{Role: model.RoleUser, Parts: []model.Part{
				{Result: &model.ToolResult{ID: "toolu_a", Name: "search", Output: map[string]any{"hits": 1.0}}},
			}},
			model.Message{Role: model.RoleUser, Parts: []model.Part{{Text: "(one more thing)"}}},
			model.Message{Role: model.RoleUser, Parts: []model.Part{
				{Result: &model.ToolResult{ID: "toolu_c", Name: "delete_file", Output: denied, IsError: true}},
				{Result: &model.ToolResult{ID: "toolu_b", Name: "search", Output: map[string]any{"hits": 2.0}}},
			}},
		)
		if _, _, err := generate(t, m, req, stream); err != nil {
			t.Fatalf("second Generate: %v", err)
		}
		r := s.Requests()[1]
		if len(r.Messages) != 3 {
			t.Fatalf("messages = %+v, want user, assistant, user", r.Messages)
		}
		last := r.Messages[2].Content
		var order []string
		for _, b := range last {
			order = append(order, b.Type+":"+b.ToolUseID+b.Text)
		}
		want := []string{"tool_result:toolu_a", "tool_result:toolu_c", "tool_result:toolu_b", "text:(one more thing)"}
		if !reflect.DeepEqual(order, want) {
			t.Errorf("last user turn = %v, want %v", order, want)
		}
		for _, b := range last {
			if b.Type == "tool_result" && b.IsError != (b.ToolUseID == "toolu_c") {
				t.Errorf("result %s: is_error = %v, want it set for the denied call only", b.ToolUseID, b.IsError)
			}
		}
		if !strings.Contains(last[1].ResultText(), "policy denies delete_file") {
			t.Errorf("the denied result's content is %q, want the error object", last[1].ResultText())
		}
	})
}

func TestForeignToolCallIDs(t *testing.T) {
	// Calls recorded by another provider: no id, or one Anthropic refuses.
	s, m := setup(t, nil)
	s.Push(anthropicserver.Turn{Text: "ok"})
	req := model.Request{Model: testModel, Tools: []model.Tool{{Name: "a"}, {Name: "b"}}, Messages: []model.Message{
		userText("go"),
		{Role: model.RoleModel, Parts: []model.Part{
			{Call: &model.ToolCall{Name: "a", Args: map[string]any{}}},
			{Call: &model.ToolCall{Name: "b"}},
			{Call: &model.ToolCall{ID: "call.7/x", Name: "a"}},
		}},
		{Role: model.RoleUser, Parts: []model.Part{
			{Result: &model.ToolResult{ID: "call.7/x", Name: "a", Output: map[string]any{"n": 3.0}}},
			{Result: &model.ToolResult{Name: "b", Output: map[string]any{"n": 2.0}}},
			{Result: &model.ToolResult{Name: "a", Output: map[string]any{"n": 1.0}}},
		}},
	}}
	if _, _, err := generate(t, m, req, false); err != nil {
		t.Fatalf("Generate: %v (the server checks tool_use ids and their pairing)", err)
	}
	r := s.Requests()[0]
	uses := r.Messages[1].Content
	results := r.Messages[2].Content
	if uses[0].ID != "lush_1_1" || uses[1].ID != "lush_1_2" || !strings.HasPrefix(uses[2].ID, "lush_") || uses[2].ID == "lush_1_3" {
		t.Errorf("tool_use ids = %s, %s, %s; want lush_1_1, lush_1_2 and a hash of call.7/x", uses[0].ID, uses[1].ID, uses[2].ID)
	}
	for i, want := range []string{uses[2].ID, uses[1].ID, uses[0].ID} {
		if results[i].ToolUseID != want {
			t.Errorf("result %d answers %s, want %s", i, results[i].ToolUseID, want)
		}
	}
}

func TestConsecutiveTurnsMerged(t *testing.T) {
	s, m := setup(t, nil)
	s.Push(anthropicserver.Turn{Text: "ok"})
	req := model.Request{Model: testModel, Messages: []model.Message{
		userText("first"),
		{Role: model.RoleUser, Parts: []model.Part{{Text: ""}}}, // empty: dropped
		userText("second"),
		{Role: model.RoleModel, Parts: []model.Part{{Text: "thinking aloud"}}},
		{Role: model.RoleModel, Parts: []model.Part{{Text: "more"}}},
		{Role: model.RoleModel, Parts: nil},
		userText("third"),
	}}
	if _, _, err := generate(t, m, req, false); err != nil {
		t.Fatalf("Generate: %v (the server refuses roles that do not alternate)", err)
	}
	var got [][]string
	for _, msg := range s.Requests()[0].Messages {
		texts := []string{msg.Role}
		for _, b := range msg.Content {
			texts = append(texts, b.Text)
		}
		got = append(got, texts)
	}
	want := [][]string{{"user", "first", "second"}, {"assistant", "thinking aloud", "more"}, {"user", "third"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("messages = %v, want %v", got, want)
	}
}

func TestStopReasons(t *testing.T) {
	calls := []anthropicserver.Call{{ID: "toolu_x", Name: "run", Input: map[string]any{"cmd": "ls"}}}
	tests := []struct {
		name      string
		turn      anthropicserver.Turn
		want      string
		wantText  string
		wantCalls int
	}{
		{"end_turn", anthropicserver.Turn{Text: "Done."}, "end_turn", "Done.", 0},
		{"tool_use", anthropicserver.Turn{Calls: calls}, "tool_use", "", 1},
		{"max_tokens", anthropicserver.Turn{Text: "A long", StopReason: "max_tokens"}, "max_tokens", "A long", 0},
		{"stop_sequence", anthropicserver.Turn{Text: "Up to", StopReason: "stop_sequence"}, "stop_sequence", "Up to", 0},
		{"pause_turn", anthropicserver.Turn{Text: "Working", StopReason: "pause_turn"}, "pause_turn", "Working", 0},
		{"context window", anthropicserver.Turn{Text: "Cut", StopReason: "model_context_window_exceeded"}, "model_context_window_exceeded", "Cut", 0},
		{"refusal", anthropicserver.Turn{Text: "I can ", StopReason: "refusal", Calls: calls,
			Refusal: &anthropicserver.Refusal{Category: "cyber", Explanation: "This looks like an attack."}},
			"refusal", "I can [The model refused to continue (Anthropic stop_reason refusal, category cyber): This looks like an attack.]", 0},
		{"bare refusal", anthropicserver.Turn{StopReason: "refusal"}, "refusal", "[The model refused to continue (Anthropic stop_reason refusal)]", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modes(t, func(t *testing.T, stream bool) {
				s, m := setup(t, nil)
				s.Push(tt.turn)
				resp, pieces, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("go")}, Tools: []model.Tool{{Name: "run"}}}, stream)
				if err != nil {
					t.Fatalf("Generate: %v", err)
				}
				if resp.FinishReason != tt.want || resp.Text() != tt.wantText || len(resp.Calls()) != tt.wantCalls {
					t.Errorf("response = finish %q, text %q, %d calls; want %q, %q, %d", resp.FinishReason, resp.Text(), len(resp.Calls()), tt.want, tt.wantText, tt.wantCalls)
				}
				if stream && strings.Join(pieces, "") != tt.wantText {
					t.Errorf("streamed %q, want %q", strings.Join(pieces, ""), tt.wantText)
				}
			})
		})
	}
}

func TestToolInputCutByMaxTokens(t *testing.T) {
	// A stream that reaches max_tokens inside a tool's input leaves the input
	// JSON unfinished: the call must not run, and the error must say why.
	msg := &anthropic.Message{StopReason: anthropic.StopReasonMaxTokens, Content: []anthropic.ContentBlockUnion{
		{Type: "text", Text: "Let me"},
		{Type: "tool_use", ID: "toolu_1", Name: "write_file", Input: json.RawMessage(`{"path":"/tmp/a","body":"trun`)},
	}}
	resp, err := fromMessage(msg, nil, 50)
	if err == nil {
		t.Fatalf("fromMessage = %+v, want an error", resp)
	}
	var me *model.Error
	if !errors.As(err, &me) || me.Code != "max_tokens" || !strings.Contains(me.Message, "write_file") || !strings.Contains(me.Message, "50") {
		t.Errorf("error = %v, want a max_tokens *model.Error naming the tool and the limit", err)
	}

	msg.StopReason = anthropic.StopReasonToolUse
	msg.Content[1].Input = json.RawMessage(`["not", "an", "object"]`)
	if _, err := fromMessage(msg, nil, 50); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("error = %v, want one saying the input is not a JSON object", err)
	}
}

func TestAPIErrors(t *testing.T) {
	tests := []struct {
		name       string
		key        string
		retries    int
		turns      []anthropicserver.Turn
		wantStatus int
		wantCode   string
		wantMsg    string
		wantTries  int // requests the server accepted
	}{
		{"wrong key", "sk-ant-WRONG-key-9876543210", -1, nil, 401, "authentication_error", "invalid x-api-key", 0},
		{"rate limited", testKey, -1, []anthropicserver.Turn{{Status: 429, RetryAfter: "0"}}, 429, "rate_limit_error", "rate limit", 1},
		{"rate limited after retries", testKey, 2, []anthropicserver.Turn{{Status: 429, RetryAfter: "0"}, {Status: 429, RetryAfter: "0"}, {Status: 429, RetryAfter: "0"}}, 429, "rate_limit_error", "rate limit", 3},
		{"overloaded", testKey, -1, []anthropicserver.Turn{{Status: 529}}, 529, "overloaded_error", "Overloaded", 1},
		{"server error", testKey, -1, []anthropicserver.Turn{{Status: 500}}, 500, "api_error", "Internal server error", 1},
		{"bad gateway without Anthropic's body", testKey, -1, []anthropicserver.Turn{{Status: 502, ErrorType: "api_error", Message: "upstream connect error"}}, 502, "api_error", "upstream connect error", 1},
		{"script ran out", testKey, -1, nil, 500, "api_error", "script ran out", 1},
		{"key echoed in message", testKey, -1, []anthropicserver.Turn{{Status: 400, Message: "bad request from key " + testKey}}, 400, "invalid_request_error", "key [REDACTED]", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modes(t, func(t *testing.T, stream bool) {
				s, m := setup(t, func(c *Config) { c.Key = staticKey(tt.key); c.MaxRetries = tt.retries })
				s.Push(tt.turns...)
				resp, pieces, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
				if err == nil {
					t.Fatalf("Generate = %+v, want an error", resp)
				}
				if len(pieces) != 0 {
					t.Errorf("onText got %q before the error", pieces)
				}
				var me *model.Error
				if !errors.As(err, &me) {
					t.Fatalf("error %v (%T) is not a *model.Error", err, err)
				}
				if me.Provider != "anthropic" || me.Status != tt.wantStatus || me.Code != tt.wantCode || !strings.Contains(me.Message, tt.wantMsg) {
					t.Errorf("error = %+v, want anthropic %d %s with %q", me, tt.wantStatus, tt.wantCode, tt.wantMsg)
				}
				if got := len(s.Requests()); got != tt.wantTries {
					t.Errorf("the server accepted %d requests, want %d", got, tt.wantTries)
				}
				assertNoKey(t, err, tt.key)
			})
		})
	}
}

func TestRetriedThenAnswered(t *testing.T) {
	modes(t, func(t *testing.T, stream bool) {
		s, m := setup(t, func(c *Config) { c.MaxRetries = 0 }) // the default: 2 retries
		s.Push(
			anthropicserver.Turn{Status: 429, RetryAfter: "0"},
			anthropicserver.Turn{Status: 529, RetryAfter: "0"},
			anthropicserver.Turn{Text: "third time lucky"},
		)
		resp, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
		if err != nil {
			t.Fatalf("Generate: %v (the SDK retries 429 and 529 twice by default)", err)
		}
		if resp.Text() != "third time lucky" || len(s.Requests()) != 3 {
			t.Errorf("text %q after %d requests, want the third answer", resp.Text(), len(s.Requests()))
		}
	})
}

func TestStreamFaults(t *testing.T) {
	tests := []struct {
		name     string
		turn     anthropicserver.Turn
		wantCode string
		wantMsg  string
	}{
		{"overloaded mid-stream", anthropicserver.Turn{Text: "Partial answer", StreamError: "overloaded_error"}, "overloaded_error", "Overloaded"},
		{"cut short", anthropicserver.Turn{Text: "Partial answer", Cut: true}, "", "before message_stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, m := setup(t, nil)
			s.Push(tt.turn)
			resp, pieces, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, true)
			if err == nil {
				t.Fatalf("Generate = %+v, want an error", resp)
			}
			if strings.Join(pieces, "") != "Partial answer" {
				t.Errorf("streamed %q before the fault, want the partial answer", pieces)
			}
			var me *model.Error
			if !errors.As(err, &me) || me.Code != tt.wantCode || !strings.Contains(me.Message, tt.wantMsg) {
				t.Errorf("error = %#v, want code %q with %q", err, tt.wantCode, tt.wantMsg)
			}
			if tt.wantCode == "overloaded_error" && me.Status != 529 {
				t.Errorf("status = %d, want 529 for overloaded_error", me.Status)
			}
		})
	}
}

func TestMalformedResponse(t *testing.T) {
	modes(t, func(t *testing.T, stream bool) {
		s, m := setup(t, nil)
		s.Push(anthropicserver.Turn{Malformed: true})
		resp, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
		if err == nil {
			t.Fatalf("Generate = %+v, want an error", resp)
		}
		if !strings.HasPrefix(err.Error(), "anthropic generate: ") {
			t.Errorf("error = %q, want it wrapped", err)
		}
	})
}

func TestTimeout(t *testing.T) {
	t.Run("attempt timeout, retried", func(t *testing.T) {
		s, m := setup(t, func(c *Config) { c.Timeout = 50 * time.Millisecond; c.MaxRetries = 1 })
		s.Push(anthropicserver.Turn{Stall: true}, anthropicserver.Turn{Stall: true})
		modes(t, func(t *testing.T, stream bool) {
			_, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error = %v, want context.DeadlineExceeded", err)
			}
			s.Push(anthropicserver.Turn{Stall: true}, anthropicserver.Turn{Stall: true})
		})
		if got := len(s.Requests()); got != 4 {
			t.Errorf("the server saw %d attempts, want 4 (each call retried once)", got)
		}
	})
	t.Run("context deadline", func(t *testing.T) {
		s, m := setup(t, func(c *Config) { c.MaxRetries = 3 })
		for _, stream := range []bool{false, true} {
			s.Push(anthropicserver.Turn{Stall: true})
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			var onText func(string)
			if stream {
				onText = func(string) {}
			}
			_, err := m.Generate(ctx, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, onText)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("stream=%v: error = %v, want context.DeadlineExceeded", stream, err)
			}
		}
	})
}

func TestCanceledContext(t *testing.T) {
	s, m := setup(t, nil)
	s.Push(anthropicserver.Turn{Text: "never read"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := m.Generate(ctx, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
}

func TestKeyPerRequest(t *testing.T) {
	s := anthropicserver.New(testKey)
	t.Cleanup(s.Close)
	var calls atomic.Int32
	keys := []string{testKey, "sk-ant-ROTATED-away-000000", testKey}
	m, err := New(t.Context(), Config{BaseURL: s.URL(), MaxRetries: -1, Key: func(context.Context) (string, error) {
		return keys[calls.Add(1)-1], nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 0 {
		t.Error("New fetched the key")
	}
	s.Push(anthropicserver.Turn{Text: "one"}, anthropicserver.Turn{Text: "three"})
	req := model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}
	if _, err := m.Generate(t.Context(), req, nil); err != nil {
		t.Fatalf("first: %v", err)
	}
	_, err = m.Generate(t.Context(), req, nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Status != 401 {
		t.Fatalf("second, with a key the server does not know: %v, want 401", err)
	}
	assertNoKey(t, err, keys[1])
	if resp, err := m.Generate(t.Context(), req, nil); err != nil || resp.Text() != "three" {
		t.Fatalf("third: %v, %v", resp, err)
	}
	if calls.Load() != 3 {
		t.Errorf("Key was called %d times, want once a request", calls.Load())
	}
}

func TestKeyErrors(t *testing.T) {
	s, _ := setup(t, nil)
	brokerErr := errors.New("vault: permission denied on secret/anthropic")
	tests := []struct {
		name string
		key  func(context.Context) (string, error)
		want string
	}{
		{"broker fails", func(context.Context) (string, error) { return "", brokerErr }, "getting the API key: vault: permission denied"},
		{"empty key for api.anthropic.com", staticKey(""), "the API key is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(t.Context(), Config{Key: tt.key})
			if err != nil {
				t.Fatal(err)
			}
			_, err = m.Generate(t.Context(), model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one with %q", err, tt.want)
			}
		})
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests reached the server without a key", n)
	}

	// At a base URL of its own (a proxy that adds the key), an empty key sends none.
	m, err := New(t.Context(), Config{BaseURL: s.URL(), Key: staticKey(""), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Generate(t.Context(), model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Status != 401 || !strings.Contains(me.Message, "x-api-key header is required") {
		t.Errorf("error = %v, want the server's 401 for a request without a key", err)
	}
}

func TestEnvironmentIgnored(t *testing.T) {
	// The SDK reads these by default; Lush's key comes from the broker and the
	// base URL from its configuration only.
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-FROM-ENV")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Leak: yes")
	s, m := setup(t, nil)
	s.Push(anthropicserver.Turn{Text: "ok"})
	if _, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, false); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	h := s.Requests()[0].Header
	if h.Get("x-api-key") != testKey || h.Get("Authorization") != "" || h.Get("X-Leak") != "" {
		t.Errorf("headers = %v, want only the configured key", h)
	}
}

// assertNoKey fails when err's text holds key.
func assertNoKey(t *testing.T, err error, key string) {
	t.Helper()
	if strings.Contains(err.Error(), key) || strings.Contains(fmtAll(err), key) {
		t.Errorf("error %q holds the API key", err)
	}
}

// fmtAll is the text of err and of every error it wraps.
func fmtAll(err error) string {
	var b strings.Builder
	for e := err; e != nil; e = errors.Unwrap(e) {
		b.WriteString(e.Error())
		b.WriteString("\n")
	}
	return b.String()
}

func TestTransportErrorIsScrubbed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	// A base URL holding the key puts it into the transport error's text.
	m, err := New(t.Context(), Config{Key: staticKey(testKey), MaxRetries: -1, BaseURL: "http://" + addr + "/" + testKey + "/"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	modes(t, func(t *testing.T, stream bool) {
		_, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
		if err == nil {
			t.Fatal("Generate against a closed port succeeded")
		}
		assertNoKey(t, err, testKey)
		if !strings.HasPrefix(err.Error(), "anthropic generate: ") || !strings.Contains(err.Error(), model.Redacted) {
			t.Errorf("error = %q, want it wrapped and redacted", err)
		}
	})
}

func TestInvalidRequests(t *testing.T) {
	s, m := setup(t, nil)
	hi := []model.Message{userText("hi")}
	call := func(id, name string) model.Part { return model.Part{Call: &model.ToolCall{ID: id, Name: name}} }
	result := func(id, name string) model.Part { return model.Part{Result: &model.ToolResult{ID: id, Name: name}} }
	tests := []struct {
		name string
		req  model.Request
		want string
	}{
		{"no model", model.Request{Messages: hi}, "no model"},
		{"empty conversation", model.Request{Model: testModel, Messages: []model.Message{{Role: model.RoleUser}}}, "conversation is empty"},
		{"unknown role", model.Request{Model: testModel, Messages: []model.Message{{Role: "system", Parts: []model.Part{{Text: "hi"}}}}}, `unknown role "system"`},
		{"dotted tool name", model.Request{Model: testModel, Messages: hi, Tools: []model.Tool{{Name: "web.fetch"}}}, `tool "web.fetch": Anthropic accepts tool names`},
		{"long tool name", model.Request{Model: testModel, Messages: hi, Tools: []model.Tool{{Name: strings.Repeat("t", 129)}}}, "1 to 128"},
		{"duplicate tool", model.Request{Model: testModel, Messages: hi, Tools: []model.Tool{{Name: "t"}, {Name: "t"}}}, "offered twice"},
		{"bad schema", model.Request{Model: testModel, Messages: hi, Tools: []model.Tool{{Name: "t", InputSchema: json.RawMessage(`{"type":`)}}}, `tool "t": decoding`},
		{"array schema", model.Request{Model: testModel, Messages: hi, Tools: []model.Tool{{Name: "t", InputSchema: json.RawMessage(`{"type":"array"}`)}}}, `needs type "object"`},
		{"bad required", model.Request{Model: testModel, Messages: hi, Tools: []model.Tool{{Name: "t", InputSchema: json.RawMessage(`{"type":"object","required":"x"}`)}}}, "required"},
		{"call in a user message", model.Request{Model: testModel, Messages: []model.Message{{Role: model.RoleUser, Parts: []model.Part{call("c", "t")}}}}, "message 0: a tool call (t) in a user message"},
		{"result in a model message", model.Request{Model: testModel, Messages: []model.Message{userText("hi"), {Role: model.RoleModel, Parts: []model.Part{result("c", "t")}}}}, "message 1: a tool result (t) in a model message"},
		{"result without a call", model.Request{Model: testModel, Messages: []model.Message{userText("hi"), {Role: model.RoleModel, Parts: []model.Part{{Text: "x"}}}, {Role: model.RoleUser, Parts: []model.Part{result("c9", "t")}}}}, `message 2: the tool result of t (id "c9") answers no tool call`},
		{"call without a result", model.Request{Model: testModel, Messages: []model.Message{userText("hi"), {Role: model.RoleModel, Parts: []model.Part{call("c1", "t"), call("c2", "u")}}, {Role: model.RoleUser, Parts: []model.Part{result("c1", "t")}}}}, `u (id "c2"); message 2 does not answer them`},
		{"conversation ends with calls", model.Request{Model: testModel, Messages: []model.Message{userText("hi"), {Role: model.RoleModel, Parts: []model.Part{call("c1", "t")}}}}, "the conversation ends"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Generate(t.Context(), tt.req, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d invalid requests reached the server", n)
	}
}

func TestNewRefuses(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		want string
	}{
		{"no key", Config{}, "Config.Key is not set"},
		{"negative max tokens", Config{Key: staticKey("k"), MaxTokens: -1}, "max tokens -1"},
		{"negative timeout", Config{Key: staticKey("k"), Timeout: -time.Second}, "timeout"},
		{"bad base URL", Config{Key: staticKey("k"), BaseURL: "api.anthropic.com"}, `base URL "api.anthropic.com"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(t.Context(), tt.c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func assertJSONEqual(t *testing.T, what string, got, want json.RawMessage) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Errorf("%s: %s is not JSON: %v", what, got, err)
		return
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: want %s is not JSON: %v", what, want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}
