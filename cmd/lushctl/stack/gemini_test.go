package stack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/agentd/model/gemini"
	"github.com/lush-agents/lush/test/geminiserver"
)

const geminiKey = "AIza-test-key-0123456789"

// Both agents run on Gemini through the real genai client, against a local server that speaks
// the Gemini REST API. The orchestrator streams (streamGenerateContent); the researcher, called
// through lush://, does not (generateContent). The script has a read that succeeds, a write
// that is stubbed, and a denial the model recovers from.
func TestGeminiToolUse(t *testing.T) {
	srv := geminiserver.New(geminiKey, geminiserver.WithRouter(geminiserver.RouteBySystemPrefix("Coordinates", "Finds")))
	t.Cleanup(srv.Close)
	srv.PushFor("Coordinates",
		geminiserver.Turn{Calls: []geminiserver.Call{{ID: "c1", Name: "researcher", Args: map[string]any{"message": "What about Q3?"}}}, Usage: geminiserver.Usage{Prompt: 100, Candidates: 10}},
		geminiserver.Turn{Calls: []geminiserver.Call{{ID: "c2", Name: "write_note", Args: map[string]any{"text": "Q3 grew 12%"}}}, Usage: geminiserver.Usage{Prompt: 150, Candidates: 12}},
		geminiserver.Turn{Text: "I wrote the note (the write was stubbed): Q3 grew 12%.", Usage: geminiserver.Usage{Prompt: 200, Candidates: 20}},
	)
	srv.PushFor("Finds",
		geminiserver.Turn{Calls: []geminiserver.Call{{Name: "echo", Args: map[string]any{"text": "salary of the CEO"}}}, Usage: geminiserver.Usage{Prompt: 50, Candidates: 5}},
		geminiserver.Turn{Calls: []geminiserver.Call{{Name: "echo", Args: map[string]any{"text": "Q3 revenue grew 12%"}}}, Usage: geminiserver.Usage{Prompt: 70, Candidates: 6}},
		geminiserver.Turn{Text: "Q3 revenue grew 12%.", Usage: geminiserver.Usage{Prompt: 90, Candidates: 7}},
	)
	m, err := gemini.New(context.Background(), gemini.Config{APIKey: geminiKey, BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, harnessOpts{model: m})

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
		t.Errorf("usage %+v: want the sums of the orchestrator's usageMetadata (450, 42)", res.Usage)
	}
	if w := toolCall(&res, "write_note"); w == nil || w.Status != "stubbed" {
		t.Errorf("write_note: %+v", w)
	}
	if got := h.rec.Calls(); len(got) != 1 || got[0] != "echo" {
		t.Errorf("upstream calls %v; want the one allowed echo", got)
	}

	var orch, res2 []geminiserver.Request
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
	// The denial went back to the model as a function response it could act on.
	fr := res2[1].LastFunctionResponse()
	if fr == nil || fr.Name != "echo" {
		t.Fatalf("researcher's second request carries no function response for echo: %+v", fr)
	}
	e, _ := fr.Response["error"].(map[string]any)
	if e["code"] != "denied" || !strings.Contains(e["message"].(string), "salaries are private") {
		t.Errorf("denial sent to the model: %v", fr.Response)
	}
	if fr := orch[1].LastFunctionResponse(); fr == nil || fr.ID != "c1" || fr.Name != "researcher" {
		t.Errorf("orchestrator's function response: %+v", fr)
	}
	if !strings.HasPrefix(orch[0].System, "Coordinates research and writes notes.") {
		t.Errorf("system instruction %q: want the agent's composed prompt", orch[0].System)
	}
}

// A provider error ends the invocation as a model failure; the key never shows.
func TestGeminiErrors(t *testing.T) {
	srv := geminiserver.New(geminiKey)
	t.Cleanup(srv.Close)
	srv.Push(geminiserver.Turn{Status: 429, Message: "Resource has been exhausted (e.g. check quota)."})
	m, err := gemini.New(context.Background(), gemini.Config{APIKey: geminiKey, BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, harnessOpts{model: m})
	code, res, body := h.chat("researcher", aliceKey, "hi")
	if code != 502 || res.Status != "error" || !strings.Contains(res.Error, "429 RESOURCE_EXHAUSTED") {
		t.Fatalf("got %d %s", code, body)
	}
	if strings.Contains(string(body), geminiKey) {
		t.Error("the API key leaked into the answer")
	}
}

// Neither the model's API key nor a delegation token (a JWS: "eyJ…") reaches the logs, the
// decision log or the spans, through a whole orchestrator → researcher run.
func TestSecretsStayOut(t *testing.T) {
	srv := geminiserver.New(geminiKey, geminiserver.WithRouter(geminiserver.RouteBySystemPrefix("Coordinates", "Finds")))
	t.Cleanup(srv.Close)
	srv.PushFor("Coordinates",
		geminiserver.Turn{Calls: []geminiserver.Call{{Name: "researcher", Args: map[string]any{"message": "Q3?"}}}},
		geminiserver.Turn{Text: "done"})
	srv.PushFor("Finds",
		geminiserver.Turn{Calls: []geminiserver.Call{{Name: "echo", Args: map[string]any{"text": "Q3"}}}},
		geminiserver.Turn{Text: "Q3 is fine"})
	m, err := gemini.New(context.Background(), gemini.Config{APIKey: geminiKey, BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, harnessOpts{model: m})
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
		for _, a := range s.Attributes() {
			everything.WriteString(a.Value.String())
		}
	}
	if everything.Len() < 1000 {
		t.Fatalf("too little was captured to be a check (%d bytes)", everything.Len())
	}
	for _, secret := range []string{geminiKey, "eyJ", aliceKey} {
		if strings.Contains(everything.String(), secret) {
			t.Errorf("%q appears in the logs, decision log or spans", secret)
		}
	}
}
