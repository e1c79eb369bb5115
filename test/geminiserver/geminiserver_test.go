package geminiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genai"
)

const testKey = "test-key-0123456789"

// start starts a server for the test and a genai client pointed at it.
func start(t *testing.T, opts ...Option) (*Server, *genai.Client) {
	t.Helper()
	s := New(testKey, opts...)
	t.Cleanup(s.Close)
	client, err := genai.NewClient(t.Context(), &genai.ClientConfig{
		APIKey:      testKey,
		Backend:     genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: s.URL()},
	})
	if err != nil {
		t.Fatalf("creating the genai client: %v", err)
	}
	return s, client
}

func TestGenerateContent(t *testing.T) {
	s, client := start(t)
	s.Push(Turn{
		Text:  "Looking it up.",
		Calls: []Call{{Name: "search", Args: map[string]any{"q": "lush"}, ID: "call-1"}},
		Usage: Usage{Prompt: 12, Candidates: 5, Thoughts: 3},
	})

	config := &genai.GenerateContentConfig{
		SystemInstruction: genai.NewContentFromText("You are a researcher.", genai.RoleUser),
		Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{
			Name:                 "search",
			Description:          "Searches the web.",
			ParametersJsonSchema: map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}},
		}}}},
	}
	resp, err := client.Models.GenerateContent(t.Context(), "gemini-2.5-flash", genai.Text("find lush"), config)
	if err != nil {
		t.Fatalf("GenerateContent: %v", err)
	}

	if got := resp.Text(); got != "Looking it up." {
		t.Errorf("text = %q, want %q", got, "Looking it up.")
	}
	calls := resp.FunctionCalls()
	if len(calls) != 1 || calls[0].Name != "search" || calls[0].ID != "call-1" || calls[0].Args["q"] != "lush" {
		t.Errorf("function calls = %+v, want search(q=lush) with id call-1", calls)
	}
	if got := resp.Candidates[0].FinishReason; got != genai.FinishReasonStop {
		t.Errorf("finish reason = %q, want STOP", got)
	}
	u := resp.UsageMetadata
	if u == nil || u.PromptTokenCount != 12 || u.CandidatesTokenCount != 5 || u.ThoughtsTokenCount != 3 || u.TotalTokenCount != 20 {
		t.Errorf("usage = %+v, want 12 prompt, 5 candidates, 3 thoughts, 20 total", u)
	}
	if resp.ModelVersion != "gemini-2.5-flash" {
		t.Errorf("model version = %q, want gemini-2.5-flash", resp.ModelVersion)
	}

	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("recorded %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Version != "v1beta" || r.Model != "gemini-2.5-flash" || r.Stream {
		t.Errorf("request = %s %s stream=%v, want v1beta gemini-2.5-flash unary", r.Version, r.Model, r.Stream)
	}
	if r.System != "You are a researcher." {
		t.Errorf("system = %q", r.System)
	}
	if len(r.Contents) != 1 || r.Contents[0].Role != "user" || r.Contents[0].Parts[0].Text != "find lush" {
		t.Errorf("contents = %+v, want one user text part", r.Contents)
	}
	if got := r.ToolNames(); !slices.Equal(got, []string{"search"}) {
		t.Errorf("tool names = %v, want [search]", got)
	}
	var schema map[string]any
	if err := json.Unmarshal(r.Tools[0].Schema, &schema); err != nil || schema["type"] != "object" {
		t.Errorf("tool schema = %s (%v), want an object schema", r.Tools[0].Schema, err)
	}
	if r.Tools[0].Description != "Searches the web." {
		t.Errorf("tool description = %q", r.Tools[0].Description)
	}
}

func TestEstimatedUsage(t *testing.T) {
	s, client := start(t)
	s.Push(Turn{Text: "twelve chars"})
	resp, err := client.Models.GenerateContent(t.Context(), "m", genai.Text("a prompt of some length"), nil)
	if err != nil {
		t.Fatalf("GenerateContent: %v", err)
	}
	u := resp.UsageMetadata
	if u == nil || u.PromptTokenCount < 1 || u.CandidatesTokenCount != 3 || u.TotalTokenCount != u.PromptTokenCount+3 {
		t.Errorf("usage = %+v, want an estimate with 3 candidate tokens", u)
	}
}

func TestStream(t *testing.T) {
	s, client := start(t)
	const text = "The quick brown fox jumps."
	s.Push(Turn{Text: text, Calls: []Call{{Name: "note", Args: map[string]any{"n": 1.0}}}, Usage: Usage{Prompt: 7, Candidates: 9}})

	var (
		texts   []string
		chunks  int
		calls   []*genai.FunctionCall
		last    *genai.GenerateContentResponse
		finishN int
	)
	for chunk, err := range client.Models.GenerateContentStream(t.Context(), "gemini-2.5-flash", genai.Text("go"), nil) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		chunks++
		last = chunk
		if len(chunk.FunctionCalls()) > 0 {
			if len(chunk.Candidates[0].Content.Parts) != len(chunk.FunctionCalls()) {
				t.Errorf("a function call chunk also holds other parts: %+v", chunk.Candidates[0].Content.Parts)
			}
			calls = append(calls, chunk.FunctionCalls()...)
			continue
		}
		if chunk.Candidates[0].FinishReason != "" {
			finishN++
		}
		texts = append(texts, chunk.Text())
	}
	if len(texts) < 3 {
		t.Errorf("got %d text chunks %q, want the text in several", len(texts), texts)
	}
	if got := strings.Join(texts, ""); got != text {
		t.Errorf("joined text = %q, want %q", got, text)
	}
	if len(calls) != 1 || calls[0].Name != "note" {
		t.Errorf("calls = %+v, want note", calls)
	}
	if finishN != 0 {
		t.Errorf("%d text chunks carry a finish reason; only the last chunk should", finishN)
	}
	if last == nil || last.Candidates[0].FinishReason != genai.FinishReasonStop || last.UsageMetadata == nil || last.UsageMetadata.PromptTokenCount != 7 || last.UsageMetadata.CandidatesTokenCount != 9 {
		t.Errorf("last chunk = %+v, want STOP with usage 7/9", last)
	}
	if chunks != len(texts)+1 {
		t.Errorf("got %d chunks, want %d text chunks and one call chunk", chunks, len(texts))
	}
	if reqs := s.Requests(); len(reqs) != 1 || !reqs[0].Stream {
		t.Errorf("requests = %+v, want one streaming request", reqs)
	}
}

func TestStreamWithChunkDelay(t *testing.T) {
	s, client := start(t, WithChunkDelay(time.Millisecond))
	s.Push(Turn{Text: "one two three"})
	var got strings.Builder
	for chunk, err := range client.Models.GenerateContentStream(t.Context(), "m", genai.Text("go"), nil) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		got.WriteString(chunk.Text())
	}
	if got.String() != "one two three" {
		t.Errorf("text = %q", got.String())
	}
}

func TestBlockedPrompt(t *testing.T) {
	s, client := start(t)
	s.Push(Turn{BlockReason: "SAFETY"})
	resp, err := client.Models.GenerateContent(t.Context(), "m", genai.Text("bad"), nil)
	if err != nil {
		t.Fatalf("GenerateContent: %v", err)
	}
	if len(resp.Candidates) != 0 || resp.PromptFeedback == nil || resp.PromptFeedback.BlockReason != genai.BlockedReasonSafety {
		t.Errorf("response = %+v, want no candidates and block reason SAFETY", resp)
	}
}

// googleError is Google's error body.
type googleError struct {
	Error struct {
		Code    int              `json:"code"`
		Message string           `json:"message"`
		Status  string           `json:"status"`
		Details []map[string]any `json:"details"`
	} `json:"error"`
}

func TestErrorBodies(t *testing.T) {
	s := New(testKey)
	t.Cleanup(s.Close)
	s.PushFor("", Turn{Status: http.StatusTooManyRequests, Message: "quota exceeded"})
	s.PushFor("", Turn{Status: http.StatusServiceUnavailable, Code: "UNAVAILABLE_NOW"})

	const path = "/v1beta/models/gemini-2.5-flash:generateContent"
	const body = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	tests := []struct {
		name        string
		method      string
		path        string
		key         string // header
		body        string
		wantStatus  int
		wantCode    string
		wantMessage string
	}{
		{"no key", "POST", path, "", body, 403, "PERMISSION_DENIED", "unregistered callers"},
		{"wrong key", "POST", path, "other-key", body, 400, "INVALID_ARGUMENT", "API key not valid"},
		{"malformed JSON", "POST", path, testKey, `{"contents":`, 400, "INVALID_ARGUMENT", "invalid JSON payload"},
		{"stream without alt=sse", "POST", "/v1beta/models/m:streamGenerateContent", testKey, body, 400, "INVALID_ARGUMENT", "alt=sse"},
		{"unknown method", "POST", "/v1beta/models/m:countTokens", testKey, body, 404, "NOT_FOUND", "countTokens"},
		{"GET", "GET", path, testKey, "", 404, "NOT_FOUND", "GET"},
		{"scripted 429", "POST", path, testKey, body, 429, "RESOURCE_EXHAUSTED", "quota exceeded"},
		{"scripted 503 with code", "POST", path, testKey, body, 503, "UNAVAILABLE_NOW", "Service Unavailable"},
		{"script ran out", "POST", path, testKey, body, 500, "INTERNAL", "script ran out"},
		{"key as query parameter", "POST", path + "?key=" + testKey, "", body, 500, "INTERNAL", "script ran out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tt.method, s.URL()+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.key != "" {
				req.Header.Set("x-goog-api-key", tt.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got googleError
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatalf("decoding the error body: %v", err)
			}
			if resp.StatusCode != tt.wantStatus || got.Error.Code != tt.wantStatus || got.Error.Status != tt.wantCode || !strings.Contains(got.Error.Message, tt.wantMessage) {
				t.Errorf("got %d %+v, want %d %s containing %q", resp.StatusCode, got.Error, tt.wantStatus, tt.wantCode, tt.wantMessage)
			}
			if strings.Contains(got.Error.Message, testKey) {
				t.Errorf("the error message %q holds the key", got.Error.Message)
			}
		})
	}
	if n := len(s.Requests()); n != 4 {
		t.Errorf("recorded %d requests, want the 4 accepted ones", n)
	}
}

func TestWrongKeyThroughGenai(t *testing.T) {
	s := New(testKey)
	t.Cleanup(s.Close)
	client, err := genai.NewClient(t.Context(), &genai.ClientConfig{
		APIKey:      "wrong",
		Backend:     genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: s.URL()},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Models.GenerateContent(t.Context(), "m", genai.Text("hi"), nil)
	var apiErr genai.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != 400 || apiErr.Status != "INVALID_ARGUMENT" || apiErr.Details[0]["reason"] != "API_KEY_INVALID" {
		t.Errorf("error = %v, want genai.APIError 400 INVALID_ARGUMENT with reason API_KEY_INVALID", err)
	}
}

func TestRoutingConcurrentAgents(t *testing.T) {
	const orchestrator, researcher = "[orchestrator]", "[researcher]"
	s, client := start(t, WithRouter(RouteBySystemPrefix(orchestrator, researcher)))
	const rounds = 10
	for i := range rounds {
		s.PushFor(orchestrator, Turn{Text: fmt.Sprintf("orchestrator %d", i)})
		s.PushFor(researcher, Turn{Text: fmt.Sprintf("researcher %d", i)})
	}

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, agent := range []string{orchestrator, researcher} {
		wg.Go(func() {
			config := &genai.GenerateContentConfig{SystemInstruction: genai.NewContentFromText(agent+" You work here.", genai.RoleUser)}
			name := strings.Trim(agent, "[]")
			for i := range rounds {
				var text strings.Builder
				for chunk, err := range client.Models.GenerateContentStream(t.Context(), "gemini-2.5-flash", genai.Text("next"), config) {
					if err != nil {
						errs <- fmt.Errorf("%s round %d: %w", name, i, err)
						return
					}
					text.WriteString(chunk.Text())
				}
				if want := fmt.Sprintf("%s %d", name, i); text.String() != want {
					errs <- fmt.Errorf("%s round %d got %q, want %q", name, i, text.String(), want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := s.Remaining(); n != 0 {
		t.Errorf("%d turns left, want 0", n)
	}
	for _, r := range s.Requests() {
		if !strings.HasPrefix(r.System, r.Queue) || r.Queue == "" {
			t.Errorf("request with system %q went to queue %q", r.System, r.Queue)
		}
	}
}

func TestRouteByModel(t *testing.T) {
	s, client := start(t, WithRouter(RouteByModel))
	s.PushFor("model-a", Turn{Text: "from a"})
	s.PushFor("model-b", Turn{Text: "from b"})
	for _, m := range []string{"model-b", "model-a"} {
		resp, err := client.Models.GenerateContent(t.Context(), m, genai.Text("hi"), nil)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		if want := "from " + strings.TrimPrefix(m, "model-"); resp.Text() != want {
			t.Errorf("%s answered %q, want %q", m, resp.Text(), want)
		}
	}
}

func TestResponder(t *testing.T) {
	s, client := start(t, WithResponder(func(r Request) Turn {
		fr := r.LastFunctionResponse()
		if fr != nil && fr.Response["error"] != nil {
			return Turn{Text: "the tool failed: " + fr.Name}
		}
		return Turn{Text: "fine"}
	}))
	s.Push(Turn{Text: "queued first"})

	failed := []*genai.Content{
		genai.NewContentFromText("do it", genai.RoleUser),
		genai.NewContentFromFunctionCall("fetch", map[string]any{"url": "x"}, genai.RoleModel),
		genai.NewContentFromFunctionResponse("fetch", map[string]any{"error": map[string]any{"code": 403}}, genai.RoleUser),
	}
	for _, tt := range []struct {
		name     string
		contents []*genai.Content
		want     string
	}{
		{"queue first", genai.Text("hi"), "queued first"},
		{"responder, plain", genai.Text("hi"), "fine"},
		{"responder, failed tool", failed, "the tool failed: fetch"},
	} {
		resp, err := client.Models.GenerateContent(context.Background(), "m", tt.contents, nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if resp.Text() != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, resp.Text(), tt.want)
		}
	}
}

func TestRequestDecodesCallsAndResponses(t *testing.T) {
	s, client := start(t)
	s.Push(Turn{Text: "ok"})
	call := &genai.Part{FunctionCall: &genai.FunctionCall{ID: "c1", Name: "fetch", Args: map[string]any{"url": "x"}}, ThoughtSignature: []byte("sig")}
	resp := &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: "c1", Name: "fetch", Response: map[string]any{"output": "page"}}}
	contents := []*genai.Content{
		genai.NewContentFromText("fetch x", genai.RoleUser),
		{Role: genai.RoleModel, Parts: []*genai.Part{call}},
		{Role: genai.RoleUser, Parts: []*genai.Part{resp}},
	}
	if _, err := client.Models.GenerateContent(t.Context(), "m", contents, nil); err != nil {
		t.Fatal(err)
	}
	r := s.Requests()[0]
	if len(r.Contents) != 3 {
		t.Fatalf("contents = %+v, want 3", r.Contents)
	}
	fc := r.Contents[1].Parts[0]
	if r.Contents[1].Role != "model" || fc.FunctionCall == nil || fc.FunctionCall.ID != "c1" || fc.FunctionCall.Args["url"] != "x" || fc.ThoughtSignature != "c2ln" {
		t.Errorf("model part = %+v, want fetch call c1 with signature c2ln (base64 of sig)", fc)
	}
	fr := r.LastFunctionResponse()
	if fr == nil || fr.ID != "c1" || fr.Name != "fetch" || fr.Response["output"] != "page" {
		t.Errorf("last function response = %+v", fr)
	}
}

func TestNewNeedsKey(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New with an empty key did not panic")
		}
	}()
	New("")
}

func TestStreamBodyIsServerSentEvents(t *testing.T) {
	s := New(testKey)
	t.Cleanup(s.Close)
	s.Push(Turn{Text: "a b"})
	req, err := http.NewRequestWithContext(t.Context(), "POST", s.URL()+"/v1beta/models/m:streamGenerateContent?alt=sse", strings.NewReader(`{"contents":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-goog-api-key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	events := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" || len(events) != 2 {
		t.Fatalf("got %s with %d events:\n%s", ct, len(events), b)
	}
	for _, e := range events {
		data, ok := strings.CutPrefix(e, "data: ")
		if !ok || !json.Valid([]byte(data)) {
			t.Errorf("event %q is not data: <json>", e)
		}
	}
}
