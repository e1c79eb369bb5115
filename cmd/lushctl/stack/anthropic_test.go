package stack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/agentd/model/anthropic"
	"github.com/lush-agents/lush/test/anthropicserver"
)

const anthropicKey = "sk-ant-stack-test-0123456789"

// newAnthropic returns the Anthropic provider at srv with anthropicKey, without retries.
func newAnthropic(t *testing.T, srv *anthropicserver.Server) *anthropic.Model {
	t.Helper()
	m, err := anthropic.New(context.Background(), anthropic.Config{BaseURL: srv.URL(), MaxRetries: -1,
		Key: func(context.Context) (string, error) { return anthropicKey, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The conversation of TestGeminiToolUse on Anthropic, through the official SDK against a local
// server that speaks the Messages API and checks the requests as the API does: the orchestrator
// streams, the researcher (called through lush://) does not; a read succeeds, a write is stubbed,
// a denial goes back to the model as an is_error tool_result it recovers from.
func TestAnthropicToolUse(t *testing.T) {
	srv := anthropicserver.New(anthropicKey, anthropicserver.WithRouter(anthropicserver.RouteBySystemPrefix("Coordinates", "Finds")))
	t.Cleanup(srv.Close)
	srv.PushFor("Coordinates",
		anthropicserver.Turn{Calls: []anthropicserver.Call{{ID: "toolu_c1", Name: "researcher", Input: map[string]any{"message": "What about Q3?"}}}, Usage: anthropicserver.Usage{Input: 100, Output: 10}},
		anthropicserver.Turn{Calls: []anthropicserver.Call{{ID: "toolu_c2", Name: "write_note", Input: map[string]any{"text": "Q3 grew 12%"}}}, Usage: anthropicserver.Usage{Input: 120, Output: 12, CacheRead: 30}},
		anthropicserver.Turn{Text: "I wrote the note (the write was stubbed): Q3 grew 12%.", Usage: anthropicserver.Usage{Input: 200, Output: 20}},
	)
	srv.PushFor("Finds",
		anthropicserver.Turn{Calls: []anthropicserver.Call{{Name: "echo", Input: map[string]any{"text": "salary of the CEO"}}}, Usage: anthropicserver.Usage{Input: 50, Output: 5}},
		anthropicserver.Turn{Calls: []anthropicserver.Call{{Name: "echo", Input: map[string]any{"text": "Q3 revenue grew 12%"}}}, Usage: anthropicserver.Usage{Input: 70, Output: 6}},
		anthropicserver.Turn{Text: "Q3 revenue grew 12%.", Usage: anthropicserver.Usage{Input: 90, Output: 7}},
	)
	h := start(t, harnessOpts{model: newAnthropic(t, srv)})

	req, _ := http.NewRequest("POST", h.st.URL()+"/agents/orchestrator/chat/stream", strings.NewReader(`{"message":"Write a Q3 note"}`))
	req.Header.Set("X-API-Key", aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res agentd.Result
	var texts int
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "event: ") {
			event = strings.TrimPrefix(line, "event: ")
			if event == "text" {
				texts++
			}
		}
		if strings.HasPrefix(line, "data: ") && event == "done" {
			json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &res)
		}
	}
	if res.Status != "ok" || res.Response != "I wrote the note (the write was stubbed): Q3 grew 12%." {
		t.Fatalf("result: %+v", res)
	}
	if texts < 3 {
		t.Errorf("%d text events: the answer should stream in pieces", texts)
	}
	if res.Usage.Input != 450 || res.Usage.Output != 42 {
		t.Errorf("usage %+v: want the sums of the orchestrator's usage, cache reads counted as input (450, 42)", res.Usage)
	}
	if w := toolCall(&res, "write_note"); w == nil || w.Status != "stubbed" {
		t.Errorf("write_note: %+v", w)
	}
	if got := h.rec.Calls(); len(got) != 1 || got[0] != "echo" {
		t.Errorf("upstream calls %v; want the one allowed echo", got)
	}

	var orch, res2 []anthropicserver.Request
	for _, r := range srv.Requests() {
		switch r.Queue {
		case "Coordinates":
			orch = append(orch, r)
		case "Finds":
			res2 = append(res2, r)
		}
	}
	if len(orch) != 3 || len(res2) != 3 {
		t.Fatalf("requests: %d orchestrator, %d researcher", len(orch), len(res2))
	}
	if !orch[0].Stream || res2[0].Stream {
		t.Error("the orchestrator (chat/stream) should stream and the researcher (called as a tool) should not")
	}
	if got := strings.Join(orch[0].ToolNames(), ","); got != "researcher,write_note" {
		t.Errorf("orchestrator's tools: %s", got)
	}
	// The denial went back to the model as an is_error tool_result it could act on.
	results := res2[1].LastToolResults()
	if len(results) != 1 || !results[0].IsError || !strings.Contains(results[0].ResultText(), "salaries are private") || !strings.Contains(results[0].ResultText(), "denied") {
		t.Fatalf("researcher's second request: tool results %+v, want the denial of echo as an error", results)
	}
	if results := orch[1].LastToolResults(); len(results) != 1 || results[0].ToolUseID != "toolu_c1" || results[0].IsError {
		t.Errorf("orchestrator's tool result: %+v, want the researcher's answer to toolu_c1", results)
	}
	if !strings.HasPrefix(orch[0].System, "Coordinates research and writes notes.") || orch[0].Messages[0].Role != "user" {
		t.Errorf("system %q, first message %+v: want the agent's composed prompt in system, not in the messages", orch[0].System, orch[0].Messages[0])
	}
}

// A provider error ends the invocation as a model failure, with Anthropic's status and type; the
// key never shows.
func TestAnthropicErrors(t *testing.T) {
	srv := anthropicserver.New(anthropicKey)
	t.Cleanup(srv.Close)
	srv.Push(anthropicserver.Turn{Status: 529})
	h := start(t, harnessOpts{model: newAnthropic(t, srv)})
	code, res, body := h.chat("researcher", aliceKey, "hi")
	if code != 502 || res.Status != "error" || !strings.Contains(res.Error, "529 overloaded_error") {
		t.Fatalf("got %d %s", code, body)
	}
	if strings.Contains(string(body), anthropicKey) {
		t.Error("the API key leaked into the answer")
	}
}

// The Anthropic key and delegation tokens stay out of the logs, the decision log and the spans
// through a whole orchestrator → researcher run.
func TestAnthropicSecretsStayOut(t *testing.T) {
	srv := anthropicserver.New(anthropicKey, anthropicserver.WithRouter(anthropicserver.RouteBySystemPrefix("Coordinates", "Finds")))
	t.Cleanup(srv.Close)
	srv.PushFor("Coordinates",
		anthropicserver.Turn{Calls: []anthropicserver.Call{{Name: "researcher", Input: map[string]any{"message": "Q3?"}}}},
		anthropicserver.Turn{Text: "done"})
	srv.PushFor("Finds",
		anthropicserver.Turn{Calls: []anthropicserver.Call{{Name: "echo", Input: map[string]any{"text": "Q3"}}}},
		anthropicserver.Turn{Text: "Q3 is fine"})
	h := start(t, harnessOpts{model: newAnthropic(t, srv)})
	if code, res, body := h.chat("orchestrator", aliceKey, "go"); code != 200 || res.Status != "ok" {
		t.Fatalf("chat: %d %s", code, body)
	}
	var everything strings.Builder
	everything.WriteString(h.logs.String())
	for _, r := range h.decisions() {
		b, _ := json.Marshal(r)
		everything.Write(b)
	}
	for _, s := range h.spans.Ended() {
		everything.WriteString(s.Name())
		for _, a := range s.Attributes() {
			everything.WriteString(a.Value.String())
		}
	}
	if everything.Len() < 1000 {
		t.Fatalf("too little was captured to be a check (%d bytes)", everything.Len())
	}
	for _, secret := range []string{anthropicKey, "eyJ", aliceKey} {
		if strings.Contains(everything.String(), secret) {
			t.Errorf("%q appears in the logs, decision log or spans", secret)
		}
	}
	if srv.Requests()[0].APIKey != anthropicKey {
		t.Error("the key did not reach the server: the check above proves nothing")
	}
}
