package openaiserver

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// post sends a chat completions request with the bearer key (none when key is "").
func post(t *testing.T, url, key, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

const body = `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"hi"}]}]}`

// TestServerAnswers: what the server answers to requests as OpenAI would, and what it records.
func TestServerAnswers(t *testing.T) {
	const key = "sk-server-test-0123456789"
	s := New(key)
	t.Cleanup(s.Close)
	s.Push(Turn{Status: 429, Code: "rate_limit_exceeded", RetryAfter: "0"}, Turn{Text: "a b c", Usage: Usage{Prompt: 3, Completion: 2}})
	tests := []struct {
		name, path, key, body string
		status                int
		want                  string // in the body
	}{
		{"no key", "/v1/chat/completions", "", body, 401, "You didn't provide an API key"},
		{"wrong key", "/v1/chat/completions", "sk-wrong-0123456789", body, 401, `"code":"invalid_api_key"`},
		{"not JSON", "/v1/chat/completions", key, "{", 400, "could not parse the JSON body"},
		{"no messages", "/v1/chat/completions", key, `{"model":"m"}`, 400, "'messages' must contain at least one message"},
		{"other path", "/v1/responses", key, body, 404, "this OpenAI stand-in serves POST /v1/chat/completions"},
		{"429", "/v1/chat/completions", key, body, 429, `"type":"requests"`},
		{"reply", "/v1/chat/completions", key, body, 200, `"content":"a b c"`},
		{"script ran out", "/v1/chat/completions", key, body, 500, "the script ran out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, h, got := post(t, strings.TrimSuffix(s.URL(), "/v1")+tt.path, tt.key, tt.body)
			if code != tt.status || !strings.Contains(got, tt.want) {
				t.Fatalf("%d %s, want %d with %q", code, got, tt.status, tt.want)
			}
			if tt.name == "429" && h.Get("Retry-After") != "0" {
				t.Errorf("Retry-After = %q", h.Get("Retry-After"))
			}
			if tt.name == "wrong key" && strings.Contains(got, "sk-wrong-0123456789") {
				t.Errorf("the wrong key is echoed whole: %s", got)
			}
		})
	}
	reqs := s.Requests()
	if len(reqs) != 3 || reqs[1].System != "Be brief." || reqs[1].Messages[1].Content != "hi" || reqs[1].Header.Get("Authorization") != "Bearer "+key {
		t.Errorf("requests = %+v", reqs)
	}
}

// TestStream: a streamed reply is chunks of text, tool calls in pieces, the finish reason, the
// usage chunk when asked for, then [DONE].
func TestStream(t *testing.T) {
	s := NewKeyless()
	t.Cleanup(s.Close)
	s.Push(Turn{Text: "one two", Calls: []Call{{Name: "f", Args: map[string]any{"x": "y"}}}, Usage: Usage{Prompt: 7, Completion: 5}})
	code, h, got := post(t, s.URL()+"/chat/completions", "", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 || h.Get("Content-Type") != "text/event-stream" || !strings.HasSuffix(got, "data: [DONE]\n\n") {
		t.Fatalf("%d %s %q", code, h.Get("Content-Type"), got)
	}
	var text, args, finish string
	var usage map[string]any
	for _, ev := range strings.Split(strings.TrimSuffix(got, "data: [DONE]\n\n"), "\n\n") {
		if ev == "" {
			continue
		}
		var c completion
		if err := json.Unmarshal([]byte(strings.TrimPrefix(ev, "data: ")), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if c.Usage != nil {
			b, _ := json.Marshal(c.Usage)
			json.Unmarshal(b, &usage)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text += *ch.Delta.Content
			}
			for _, tc := range ch.Delta.ToolCalls {
				args += tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	if text != "one two" || args != `{"x":"y"}` || finish != "tool_calls" || usage["prompt_tokens"] != 7.0 || usage["completion_tokens"] != 5.0 {
		t.Errorf("text %q args %q finish %q usage %v", text, args, finish, usage)
	}
}
