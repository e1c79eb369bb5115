package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/test/openaiserver"
)

const (
	testKey   = "sk-test-secret-key-0123456789abcdef"
	testModel = "gpt-4.1-mini"
)

// setup starts an OpenAI stand-in and a Model using it with key (and c's other settings).
func setup(t *testing.T, key string, c Config, opts ...openaiserver.Option) (*openaiserver.Server, *Model) {
	t.Helper()
	s := openaiserver.New(testKey, opts...)
	t.Cleanup(s.Close)
	c.BaseURL = s.URL()
	c.Key = func(context.Context) (string, error) { return key, nil }
	m, err := New(t.Context(), c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, m
}

// generate calls m.Generate, streaming when stream is set, and returns the text pieces streamed.
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

var modes = []bool{false, true}

func modeName(stream bool) string { return map[bool]string{false: "unary", true: "stream"}[stream] }

// TestGenerate: text, refusals, stop reasons and usage map to the response, unary and streamed
// (the streamed usage comes from the last chunk, asked for with stream_options.include_usage);
// the system prompt is the first message; the headers carry the key, organization and project.
func TestGenerate(t *testing.T) {
	tests := []struct {
		name string
		turn openaiserver.Turn
		want model.Response
	}{
		{"text", openaiserver.Turn{Text: "Lush is a policy gateway.", Usage: openaiserver.Usage{Prompt: 21, Completion: 6}},
			model.Response{Parts: []model.Part{{Text: "Lush is a policy gateway."}}, Usage: model.Usage{Input: 21, Output: 6}, FinishReason: "stop"}},
		{"length", openaiserver.Turn{Text: "Lush is", FinishReason: "length", Usage: openaiserver.Usage{Prompt: 5, Completion: 2}},
			model.Response{Parts: []model.Part{{Text: "Lush is"}}, Usage: model.Usage{Input: 5, Output: 2}, FinishReason: "length"}},
		{"content filter", openaiserver.Turn{FinishReason: "content_filter", Usage: openaiserver.Usage{Prompt: 5, Completion: 1}},
			model.Response{Usage: model.Usage{Input: 5, Output: 1}, FinishReason: "content_filter"}},
		{"refusal", openaiserver.Turn{Refusal: "I can't help with that.", Usage: openaiserver.Usage{Prompt: 9, Completion: 7}},
			model.Response{Parts: []model.Part{{Text: "I can't help with that."}}, Usage: model.Usage{Input: 9, Output: 7}, FinishReason: FinishRefusal}},
	}
	for _, tt := range tests {
		for _, stream := range modes {
			t.Run(tt.name+"/"+modeName(stream), func(t *testing.T) {
				s, m := setup(t, testKey, Config{Organization: "org-acme", Project: "proj-lush"})
				s.Push(tt.turn)
				resp, pieces, err := generate(t, m, model.Request{Model: testModel, System: "You are terse.", Messages: []model.Message{userText("What is Lush?")}}, stream)
				if err != nil {
					t.Fatalf("Generate: %v", err)
				}
				want := tt.want
				want.ModelVersion = testModel
				if !reflect.DeepEqual(*resp, want) {
					t.Errorf("response = %+v, want %+v", *resp, want)
				}
				if stream && tt.turn.Text != "" && strings.Join(pieces, "") != tt.turn.Text {
					t.Errorf("streamed %q, want the text", pieces)
				}
				if stream && len(pieces) < 2 && strings.Count(tt.turn.Text, " ") > 0 {
					t.Errorf("streamed %q: want the text in pieces as it arrives", pieces)
				}
				r := s.Requests()[0]
				if r.Stream != stream || r.IncludeUsage != stream || r.Model != testModel || r.System != "You are terse." || len(r.Messages) != 2 {
					t.Errorf("request = %+v", r)
				}
				h := r.Header
				if h.Get("Authorization") != "Bearer "+testKey || h.Get("OpenAI-Organization") != "org-acme" || h.Get("OpenAI-Project") != "proj-lush" {
					t.Errorf("headers: Authorization %q, OpenAI-Organization %q, OpenAI-Project %q", h.Get("Authorization"), h.Get("OpenAI-Organization"), h.Get("OpenAI-Project"))
				}
			})
		}
	}
}

// TestToolCalls: parallel tool calls come back with their ids, in order; the tools are offered
// with their schemas passed through; the calls and their results (a failed one as an error the
// model can read) go back with the ids.
func TestToolCalls(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"a file"}},"required":["path"],"additionalProperties":false}`)
	tools := []model.Tool{
		{Name: "read_text_file", Description: "Reads a file.", InputSchema: schema},
		{Name: "list-directory"}, // no schema: an object without properties
	}
	for _, stream := range modes {
		t.Run(modeName(stream), func(t *testing.T) {
			s, m := setup(t, testKey, Config{})
			s.Push(openaiserver.Turn{Text: "Reading both.", Calls: []openaiserver.Call{
				{ID: "call_a", Name: "read_text_file", Args: map[string]any{"path": "q3.md"}},
				{ID: "call_b", Name: "list-directory", Args: map[string]any{}},
			}})
			req := model.Request{Model: testModel, Messages: []model.Message{userText("Summarize q3.md")}, Tools: tools}
			resp, _, err := generate(t, m, req, stream)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			wantParts := []model.Part{{Text: "Reading both."},
				{Call: &model.ToolCall{ID: "call_a", Name: "read_text_file", Args: map[string]any{"path": "q3.md"}}},
				{Call: &model.ToolCall{ID: "call_b", Name: "list-directory", Args: map[string]any{}}}}
			if !reflect.DeepEqual(resp.Parts, wantParts) || resp.FinishReason != "tool_calls" {
				t.Fatalf("response = %+v (%s), want %+v", resp.Parts, resp.FinishReason, wantParts)
			}
			r := s.Requests()[0]
			if len(r.Tools) != 2 || r.Tools[0].Function.Name != "read_text_file" || r.Tools[0].Function.Description != "Reads a file." {
				t.Fatalf("tools = %+v", r.Tools)
			}
			var got, want any
			_ = json.Unmarshal(r.Tools[0].Function.Parameters, &got)
			_ = json.Unmarshal(schema, &want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("schema = %s, want it passed through", r.Tools[0].Function.Parameters)
			}
			if string(r.Tools[1].Function.Parameters) != `{"properties":{},"type":"object"}` {
				t.Errorf("schema of a tool without one = %s", r.Tools[1].Function.Parameters)
			}

			// The next turn sends the calls and their results back.
			s.Push(openaiserver.Turn{Text: "Q3 was good."})
			req.Messages = append(req.Messages, model.Message{Role: model.RoleModel, Parts: resp.Parts}, model.Message{Role: model.RoleUser, Parts: []model.Part{
				{Result: &model.ToolResult{ID: "call_a", Name: "read_text_file", Output: map[string]any{"content": "Q3: up"}}},
				{Result: &model.ToolResult{ID: "call_b", Name: "list-directory", IsError: true,
					Output: map[string]any{"error": map[string]any{"code": "denied", "message": "not allowed"}}}},
			}})
			if _, _, err := generate(t, m, req, stream); err != nil {
				t.Fatalf("Generate: %v", err)
			}
			msgs := s.Requests()[1].Messages
			if len(msgs) != 4 {
				t.Fatalf("messages = %+v, want user, assistant, tool, tool", msgs)
			}
			a := msgs[1]
			if a.Role != "assistant" || a.Content != "Reading both." || len(a.ToolCalls) != 2 || a.ToolCalls[0].ID != "call_a" ||
				a.ToolCalls[1].ID != "call_b" || a.ToolCalls[0].Function.Arguments != `{"path":"q3.md"}` {
				t.Errorf("assistant message = %+v", a)
			}
			if msgs[2].Role != "tool" || msgs[2].ToolCallID != "call_a" || msgs[2].Content != `{"content":"Q3: up"}` {
				t.Errorf("first result = %+v", msgs[2])
			}
			if msgs[3].Role != "tool" || msgs[3].ToolCallID != "call_b" || msgs[3].Content != `{"error":{"code":"denied","message":"not allowed"}}` {
				t.Errorf("failed result = %+v", msgs[3])
			}
		})
	}
}

// TestConversationMapping: calls without ids (a conversation begun on another provider) get
// ids their results answer; an error result without an {"error"} object is wrapped in one;
// empty turns are left out.
func TestConversationMapping(t *testing.T) {
	msgs, err := toMessages([]model.Message{
		userText("go"),
		{Role: model.RoleModel, Parts: []model.Part{{Call: &model.ToolCall{Name: "a", Args: map[string]any{"x": 1.0}}}, {Call: &model.ToolCall{Name: "a"}}}},
		{Role: model.RoleUser, Parts: []model.Part{{Result: &model.ToolResult{Name: "a", Output: map[string]any{"n": 1.0}}},
			{Result: &model.ToolResult{Name: "a", IsError: true, Output: map[string]any{"reason": "boom"}}}, {Text: "and then?"}}},
		{Role: model.RoleModel},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(msgs)
	want := `[{"content":"go","role":"user"},` +
		`{"tool_calls":[{"id":"call_lush_1_0","function":{"arguments":"{\"x\":1}","name":"a"},"type":"function"},{"id":"call_lush_1_1","function":{"arguments":"{}","name":"a"},"type":"function"}],"role":"assistant"},` +
		`{"content":"{\"n\":1}","tool_call_id":"call_lush_1_0","role":"tool"},` +
		`{"content":"{\"error\":{\"reason\":\"boom\"}}","tool_call_id":"call_lush_1_1","role":"tool"},` +
		`{"content":"and then?","role":"user"}]`
	if string(b) != want {
		t.Errorf("messages =\n%s\nwant\n%s", b, want)
	}
	if _, err := toMessages([]model.Message{{Role: model.RoleUser, Parts: []model.Part{{Result: &model.ToolResult{Name: "b"}}}}}); err == nil ||
		!strings.Contains(err.Error(), `the result of tool "b" answers no call`) {
		t.Errorf("orphan result: err = %v", err)
	}
}

// TestToolNames: a tool name OpenAI refuses is a clear error before any request, never dropped.
func TestToolNames(t *testing.T) {
	s, m := setup(t, testKey, Config{})
	for _, name := range []string{"notes.search", strings.Repeat("x", 65), "a b"} {
		_, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}, Tools: []model.Tool{{Name: name}}}, false)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("tool %q: OpenAI accepts tool names", name)) {
			t.Errorf("%q: err = %v", name, err)
		}
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests were sent", n)
	}
}

// TestErrors: API errors become *model.Error with OpenAI's status and code; 429 and 5xx are
// retried by the client (Retry-After honoured); a malformed reply and a timeout are errors; the
// key appears in no error and no log line.
func TestErrors(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		retries int
		turns   []openaiserver.Turn
		want    *model.Error // nil: the call succeeds
		wantErr string       // for errors that are not *model.Error
		served  int          // requests the server answered
	}{
		{"429 retried", testKey, 0, []openaiserver.Turn{{Status: 429, Code: "rate_limit_exceeded", Message: "Rate limit reached", RetryAfter: "0"}, {Text: "ok"}}, nil, "", 2},
		{"429 exhausted", testKey, 1, []openaiserver.Turn{{Status: 429, Code: "rate_limit_exceeded", Message: "Rate limit reached", RetryAfter: "0"}, {Status: 429, Code: "rate_limit_exceeded", Message: "Rate limit reached", RetryAfter: "0"}},
			&model.Error{Provider: "openai", Status: 429, Code: "rate_limit_exceeded", Message: "Rate limit reached"}, "", 2},
		{"5xx retried", testKey, 0, []openaiserver.Turn{{Status: 503, RetryAfter: "0"}, {Text: "ok"}}, nil, "", 2},
		{"5xx not retried", testKey, -1, []openaiserver.Turn{{Status: 500, Message: "The server had an error"}},
			&model.Error{Provider: "openai", Status: 500, Code: "server_error", Message: "The server had an error"}, "", 1},
		{"bad request", testKey, 0, []openaiserver.Turn{{Status: 400, Code: "context_length_exceeded", Message: "This model's maximum context length is 128000 tokens."}},
			&model.Error{Provider: "openai", Status: 400, Code: "context_length_exceeded", Message: "This model's maximum context length is 128000 tokens."}, "", 1},
		{"wrong key", "sk-wrong-key-9876543210fedcba", 0, nil,
			&model.Error{Provider: "openai", Status: 401, Code: "invalid_api_key", Message: "Incorrect API key provided: sk-" + strings.Repeat("*", 22) + "dcba. You can find your API key at https://platform.openai.com/account/api-keys."}, "", 0},
		{"key echoed", testKey, 0, []openaiserver.Turn{{Status: 403, Code: "forbidden", Message: "key " + testKey + " may not use " + testModel}},
			&model.Error{Provider: "openai", Status: 403, Code: "forbidden", Message: "key [REDACTED] may not use " + testModel}, "", 1},
		{"malformed", testKey, 0, []openaiserver.Turn{{Malformed: `{"choices": [`}}, nil, "openai generate", 1},
		{"no choices", testKey, 0, []openaiserver.Turn{{Malformed: `{"id":"x","object":"chat.completion","choices":[]}`}}, nil, "the reply has no choices", 1},
		{"arguments not JSON", testKey, 0, []openaiserver.Turn{{Calls: []openaiserver.Call{{Name: "f", RawArgs: `{"path": `}}}}, nil, `called tool "f" with arguments that are not a JSON object`, 1},
	}
	for _, tt := range tests {
		for _, stream := range modes {
			t.Run(tt.name+"/"+modeName(stream), func(t *testing.T) {
				var logs bytes.Buffer
				slog.New(slog.NewTextHandler(&logs, nil)).Info("start")
				s, m := setup(t, tt.key, Config{MaxRetries: tt.retries})
				s.Push(tt.turns...)
				resp, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
				switch {
				case tt.want == nil && tt.wantErr == "":
					if err != nil || resp.Text() != "ok" {
						t.Fatalf("Generate = %v, %v; want ok", resp, err)
					}
				case tt.want != nil:
					var me *model.Error
					if !errors.As(err, &me) || !reflect.DeepEqual(me, tt.want) {
						t.Fatalf("err = %#v, want %#v", err, tt.want)
					}
				default:
					if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("err = %v, want %q", err, tt.wantErr)
					}
				}
				if err != nil && (strings.Contains(err.Error(), tt.key) || strings.Contains(fmt.Sprintf("%#v %+v", err, err), tt.key)) {
					t.Errorf("the key is in the error: %v", err)
				}
				if err != nil {
					slog.New(slog.NewJSONHandler(&logs, nil)).Error("generate failed", "err", err)
					if strings.Contains(logs.String(), tt.key) {
						t.Errorf("the key is in the log: %s", logs.String())
					}
				}
				if got := len(s.Requests()); got != tt.served {
					t.Errorf("the server answered %d requests, want %d", got, tt.served)
				}
			})
		}
	}
}

// TestTimeout: a reply that never comes ends with the context (Config.Timeout), as a deadline
// error, without retrying past it.
func TestTimeout(t *testing.T) {
	for _, stream := range modes {
		t.Run(modeName(stream), func(t *testing.T) {
			s, m := setup(t, testKey, Config{Timeout: 50 * time.Millisecond, MaxRetries: -1})
			s.Push(openaiserver.Turn{Hang: true})
			_, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want a deadline error", err)
			}
		})
	}
}

// TestKey: the key is asked for on every request (a rotated key is used at once); an empty key
// sends no Authorization header (a local server); the key function's error is returned as is.
func TestKey(t *testing.T) {
	s := openaiserver.NewKeyless()
	t.Cleanup(s.Close)
	keys := []string{"sk-first-aaaaaaaaaaaa", "sk-second-bbbbbbbbbbb", ""}
	i := 0
	m, err := New(t.Context(), Config{BaseURL: s.URL(), Key: func(context.Context) (string, error) {
		if i == len(keys) {
			return "", &model.Error{Provider: "openai", Message: "no API key for openai (model://openai)"}
		}
		i++
		return keys[i-1], nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	for range keys {
		s.Push(openaiserver.Turn{Text: "ok"})
		if _, err := m.Generate(t.Context(), model.Request{Model: "llama3.2", Messages: []model.Message{userText("hi")}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, r := range s.Requests() {
		got = append(got, r.Header.Get("Authorization"))
	}
	if want := []string{"Bearer sk-first-aaaaaaaaaaaa", "Bearer sk-second-bbbbbbbbbbb", ""}; !reflect.DeepEqual(got, want) {
		t.Errorf("Authorization = %q, want %q", got, want)
	}
	_, err = m.Generate(t.Context(), model.Request{Model: "llama3.2", Messages: []model.Message{userText("hi")}}, nil)
	if err == nil || !strings.Contains(err.Error(), "no API key for openai") {
		t.Errorf("err = %v", err)
	}
	if _, err := New(t.Context(), Config{}); err == nil {
		t.Error("New without Key succeeded")
	}
}
