package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/test/geminiserver"
)

const (
	testKey   = "AIzaTEST-secret-key-0123456789"
	testModel = "gemini-2.5-flash"
)

// setup starts a Gemini stand-in and a Model using it with key.
func setup(t *testing.T, key string, opts ...geminiserver.Option) (*geminiserver.Server, *Model) {
	t.Helper()
	s := geminiserver.New(testKey, opts...)
	t.Cleanup(s.Close)
	m, err := New(t.Context(), Config{APIKey: key, BaseURL: s.URL()})
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

func TestGenerateText(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "unary", true: "stream"}[stream], func(t *testing.T) {
			s, m := setup(t, testKey)
			s.Push(geminiserver.Turn{
				Text:         "Lush is a policy gateway.",
				Usage:        geminiserver.Usage{Prompt: 21, Candidates: 6, Thoughts: 4},
				FinishReason: "MAX_TOKENS",
			})
			resp, _, err := generate(t, m, model.Request{
				Model:    testModel,
				System:   "You are terse.",
				Messages: []model.Message{userText("What is Lush?")},
			}, stream)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			want := &model.Response{
				Parts:        []model.Part{{Text: "Lush is a policy gateway."}},
				Usage:        model.Usage{Input: 21, Output: 10},
				FinishReason: "MAX_TOKENS",
				ModelVersion: testModel,
			}
			if !reflect.DeepEqual(resp, want) {
				t.Errorf("response = %+v, want %+v", resp, want)
			}

			r := s.Requests()[0]
			if r.Stream != stream || r.Model != testModel || r.System != "You are terse." || len(r.Tools) != 0 {
				t.Errorf("request = %+v, want model %s, stream %v, the system instruction and no tools", r, testModel, stream)
			}
			if len(r.Contents) != 1 || r.Contents[0].Role != "user" || r.Contents[0].Parts[0].Text != "What is Lush?" {
				t.Errorf("contents = %+v, want the user's question", r.Contents)
			}
		})
	}
}

func TestStreamingDeliversChunks(t *testing.T) {
	s, m := setup(t, testKey)
	const text = "Let me look that up in the policy store first."
	s.Push(geminiserver.Turn{Text: text, Calls: []geminiserver.Call{{Name: "lookup", Args: map[string]any{"q": "policy"}}}})

	resp, pieces, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("go")}}, true)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if len(pieces) < 3 {
		t.Errorf("onText got %d pieces %q, want several", len(pieces), pieces)
	}
	if got := strings.Join(pieces, ""); got != resp.Text() || got != text {
		t.Errorf("streamed %q, response text %q, want both %q", got, resp.Text(), text)
	}
	if len(resp.Parts) != 2 || resp.Parts[0].Text != text || resp.Parts[1].Call == nil || resp.Parts[1].Call.Name != "lookup" {
		t.Errorf("parts = %+v, want the text then the lookup call", resp.Parts)
	}
	if resp.Usage.Input == 0 || resp.Usage.Output == 0 {
		t.Errorf("usage = %+v, want the server's estimate from the last chunk", resp.Usage)
	}
}

func TestToolRoundTrip(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "unary", true: "stream"}[stream], func(t *testing.T) {
			s, m := setup(t, testKey)
			s.Push(
				geminiserver.Turn{Calls: []geminiserver.Call{{Name: "web_fetch", Args: map[string]any{"url": "https://example.com"}, ID: "call-7"}}},
				geminiserver.Turn{Text: "The page says hello."},
			)
			schema := json.RawMessage(`{"type":"object","properties":{"url":{"type":"string","format":"uri"}},"required":["url"]}`)
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
			calls := first.Calls()
			wantCall := &model.ToolCall{ID: "call-7", Name: "web_fetch", Args: map[string]any{"url": "https://example.com"}}
			if len(calls) != 1 || !reflect.DeepEqual(calls[0], wantCall) {
				t.Fatalf("calls = %+v, want %+v", calls, wantCall)
			}

			output := map[string]any{"status": 200.0, "body": "hello"}
			req.Messages = append(req.Messages,
				model.Message{Role: model.RoleModel, Parts: first.Parts},
				model.Message{Role: model.RoleUser, Parts: []model.Part{{Result: &model.ToolResult{ID: "call-7", Name: "web_fetch", Output: output}}}},
			)
			second, _, err := generate(t, m, req, stream)
			if err != nil {
				t.Fatalf("second Generate: %v", err)
			}
			if second.Text() != "The page says hello." || len(second.Calls()) != 0 {
				t.Errorf("second response = %+v, want the text and no calls", second)
			}

			reqs := s.Requests()
			if len(reqs) != 2 {
				t.Fatalf("server got %d requests, want 2", len(reqs))
			}
			for i, r := range reqs {
				if got := r.ToolNames(); !reflect.DeepEqual(got, []string{"web_fetch", "clock"}) {
					t.Errorf("request %d: tools = %v", i, got)
				}
				assertJSONEqual(t, "web_fetch schema", r.Tools[0].Schema, schema)
				assertJSONEqual(t, "clock schema", r.Tools[1].Schema, json.RawMessage(`{"type":"object"}`))
				if r.Tools[0].Description != "Fetches a page." {
					t.Errorf("request %d: description = %q", i, r.Tools[0].Description)
				}
			}
			r := reqs[1]
			if len(r.Contents) != 3 || r.Contents[1].Role != "model" || r.Contents[2].Role != "user" {
				t.Fatalf("second request contents = %+v, want user, model, user", r.Contents)
			}
			call := r.Contents[1].Parts[0]
			if call.FunctionCall == nil || call.FunctionCall.ID != "call-7" || call.FunctionCall.Name != "web_fetch" || call.FunctionCall.Args["url"] != "https://example.com" {
				t.Errorf("replayed call = %+v", call)
			}
			if call.ThoughtSignature == "" {
				t.Error("the replayed call has no thought signature placeholder")
			}
			fr := r.LastFunctionResponse()
			if fr == nil || fr.ID != "call-7" || fr.Name != "web_fetch" || !reflect.DeepEqual(fr.Response, output) {
				t.Errorf("function response = %+v, want web_fetch call-7 with %v", fr, output)
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

func TestAPIErrors(t *testing.T) {
	tests := []struct {
		name       string
		key        string
		turn       *geminiserver.Turn // nil: nothing queued
		wantStatus int
		wantCode   string
		wantMsg    string
	}{
		{"wrong key", "AIzaWRONG-key-9876543210", nil, 400, "INVALID_ARGUMENT", "API key not valid"},
		{"permission denied", testKey, &geminiserver.Turn{Status: 403, Message: "The caller does not have permission"}, 403, "PERMISSION_DENIED", "does not have permission"},
		{"quota", testKey, &geminiserver.Turn{Status: 429, Message: "Resource has been exhausted (e.g. check quota)."}, 429, "RESOURCE_EXHAUSTED", "exhausted"},
		{"server error", testKey, nil, 500, "INTERNAL", "script ran out"},
		{"key echoed in message", testKey, &geminiserver.Turn{Status: 400, Message: "bad request from key " + testKey}, 400, "INVALID_ARGUMENT", "key [REDACTED]"},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: "/unary", true: "/stream"}[stream], func(t *testing.T) {
				s, m := setup(t, tt.key)
				if tt.turn != nil {
					s.Push(*tt.turn)
				}
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
				if me.Provider != "gemini" || me.Status != tt.wantStatus || me.Code != tt.wantCode || !strings.Contains(me.Message, tt.wantMsg) {
					t.Errorf("error = %+v, want gemini %d %s with %q", me, tt.wantStatus, tt.wantCode, tt.wantMsg)
				}
				assertNoKey(t, err, tt.key)
			})
		}
	}
}

// assertNoKey fails when err's text holds key.
func assertNoKey(t *testing.T, err error, key string) {
	t.Helper()
	if strings.Contains(err.Error(), key) {
		t.Errorf("error %q holds the API key", err)
	}
}

func TestTransportErrorIsScrubbed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	// A base URL holding the key puts it into the transport error's text.
	m, err := New(t.Context(), Config{APIKey: testKey, BaseURL: "http://" + addr + "/" + testKey + "/"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, stream := range []bool{false, true} {
		_, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
		if err == nil {
			t.Fatal("Generate against a closed port succeeded")
		}
		assertNoKey(t, err, testKey)
		if !strings.HasPrefix(err.Error(), "gemini generate: ") || !strings.Contains(err.Error(), model.Redacted) {
			t.Errorf("error = %q, want it wrapped and redacted", err)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	s, m := setup(t, testKey)
	s.Push(geminiserver.Turn{Text: "never read"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := m.Generate(ctx, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
}

func TestBlockedPrompt(t *testing.T) {
	for _, stream := range []bool{false, true} {
		s, m := setup(t, testKey)
		s.Push(geminiserver.Turn{BlockReason: "PROHIBITED_CONTENT"})
		_, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("something bad")}}, stream)
		if err == nil || !strings.Contains(err.Error(), "PROHIBITED_CONTENT") {
			t.Errorf("stream=%v: error = %v, want one naming PROHIBITED_CONTENT", stream, err)
		}
	}
}

func TestInvalidRequests(t *testing.T) {
	_, m := setup(t, testKey)
	tests := []struct {
		name string
		req  model.Request
		want string
	}{
		{"no model", model.Request{Messages: []model.Message{userText("hi")}}, "no model"},
		{"unknown role", model.Request{Model: testModel, Messages: []model.Message{{Role: "system", Parts: []model.Part{{Text: "hi"}}}}}, `unknown role "system"`},
		{"bad schema", model.Request{Model: testModel, Messages: []model.Message{userText("hi")}, Tools: []model.Tool{{Name: "t", InputSchema: json.RawMessage(`{"type":`)}}}, `tool "t"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Generate(t.Context(), tt.req, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestNewWithoutKey(t *testing.T) {
	_, err := New(t.Context(), Config{})
	if err == nil || !strings.Contains(err.Error(), "GOOGLE_API_KEY") {
		t.Errorf("error = %v, want one telling to set GOOGLE_API_KEY", err)
	}
}

func TestEmptyMessagesAreDropped(t *testing.T) {
	contents, err := toContents([]model.Message{
		userText("hi"),
		{Role: model.RoleModel, Parts: []model.Part{{Text: ""}}},
		{Role: model.RoleModel, Parts: []model.Part{{Call: &model.ToolCall{Name: "a"}}, {Call: &model.ToolCall{Name: "b"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(contents) != 2 {
		t.Fatalf("got %d contents, want the empty message dropped", len(contents))
	}
	parts := contents[1].Parts
	if len(parts[0].ThoughtSignature) == 0 || len(parts[1].ThoughtSignature) != 0 {
		t.Error("want the placeholder signature on the first call of the turn only")
	}
}
