package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/test/anthropicserver"
	"github.com/lush-agents/lush/test/geminiserver"
	"github.com/lush-agents/lush/test/openaiserver"
)

// The quickstart conversation, as every provider's stand-in is scripted to hold it: the
// orchestrator asks the researcher (lush://researcher), which reads q3.md; the orchestrator then
// writes over q3.md (denied by the project's policy), then under drafts/ (allowed, stubbed while
// live writes are off), and answers. Each model turn has fixed token counts, so the tokens the
// decision log records are known.
type scriptedTurn struct {
	calls  []scriptedCall
	text   string
	input  int
	output int
}

type scriptedCall struct {
	id, name string
	args     map[string]any
}

// The agents' system prompts start with their descriptions; the stand-ins route on them.
const (
	orchestratorPrompt = "You coordinate research"
	researcherPrompt   = "You answer questions"
)

var (
	orchestratorTurns = []scriptedTurn{
		{calls: []scriptedCall{{"c1", "researcher", map[string]any{"message": "What does q3.md say? Quote the figures."}}}, input: 300, output: 20},
		{calls: []scriptedCall{{"c2", "write_file", map[string]any{"path": "q3.md", "content": "# Q3 summary\n"}}}, input: 400, output: 30},
		{calls: []scriptedCall{{"c3", "write_file", map[string]any{"path": "drafts/q3-summary.md", "content": "# Q3 summary\n\nRevenue grew 4%.\n"}}}, input: 500, output: 40},
		{text: "Drafted drafts/q3-summary.md (stubbed: live writes are off).", input: 600, output: 15},
	}
	researcherTurns = []scriptedTurn{
		{calls: []scriptedCall{{"r1", "read_text_file", map[string]any{"path": "q3.md"}}}, input: 100, output: 10},
		{text: "From q3.md: revenue grew 4% quarter over quarter.", input: 200, output: 12},
	}
)

// sum is the tokens of an agent's turns.
func sum(turns []scriptedTurn) (in, out int) {
	for _, t := range turns {
		in, out = in+t.input, out+t.output
	}
	return in, out
}

// providerRun is a provider's stand-in, scripted with the conversation.
type providerRun struct {
	env    []string // lushctl's environment: keys, base URLs
	models string   // lines added to lush.yaml (a models: entry), "" for none
	keys   []string // keys to store with lushctl auth add model://<provider>, as "<address>=<key>"
	// seen reports what the models were sent: how many requests each agent made, and the tool
	// results the orchestrator's model received (as text), in order.
	seen func() (orchestrator, researcher int, orchestratorResults []string)
	// secrets must appear nowhere in lushctl's output or the decision log.
	secrets []string
}

// providers are the providers the conversation runs on. Another provider is another row: start
// its stand-in, script the turns, say how lushctl reaches it.
var providers = []struct {
	name  string
	start func(t *testing.T) providerRun
}{
	{"gemini", func(t *testing.T) providerRun {
		const key = "AIza-e2e-gemini-key-0123456789"
		srv := geminiserver.New(key, geminiserver.WithRouter(geminiserver.RouteBySystemPrefix(orchestratorPrompt, researcherPrompt)))
		t.Cleanup(srv.Close)
		push := func(queue string, turns []scriptedTurn) {
			for _, st := range turns {
				gt := geminiserver.Turn{Text: st.text, Usage: geminiserver.Usage{Prompt: st.input, Candidates: st.output}}
				for _, c := range st.calls {
					gt.Calls = append(gt.Calls, geminiserver.Call{ID: c.id, Name: c.name, Args: c.args})
				}
				srv.PushFor(queue, gt)
			}
		}
		push(orchestratorPrompt, orchestratorTurns)
		push(researcherPrompt, researcherTurns)
		return providerRun{
			// The agents name gemini-2.5-flash, a bare name: Gemini, with today's variables.
			env: []string{"GOOGLE_API_KEY=" + key, "LUSH_GEMINI_BASE_URL=" + srv.URL()},
			seen: func() (o, r int, results []string) {
				for _, req := range srv.Requests() {
					switch req.Queue {
					case orchestratorPrompt:
						o++
						if fr := req.LastFunctionResponse(); fr != nil {
							b, _ := json.Marshal(fr.Response)
							results = append(results, string(b))
						}
					case researcherPrompt:
						r++
					}
				}
				return o, r, results
			},
			secrets: []string{key},
		}
	}},
	{"openai", func(t *testing.T) providerRun {
		const key = "sk-e2e-openai-key-0123456789abcdef"
		srv := openaiserver.New(key, openaiserver.WithRouter(openaiserver.RouteBySystemPrefix(orchestratorPrompt, researcherPrompt)))
		t.Cleanup(srv.Close)
		push := func(queue string, turns []scriptedTurn) {
			for _, st := range turns {
				ot := openaiserver.Turn{Text: st.text, Usage: openaiserver.Usage{Prompt: st.input, Completion: st.output}}
				for _, c := range st.calls {
					ot.Calls = append(ot.Calls, openaiserver.Call{ID: c.id, Name: c.name, Args: c.args})
				}
				srv.PushFor(queue, ot)
			}
		}
		push(orchestratorPrompt, orchestratorTurns)
		push(researcherPrompt, researcherTurns)
		return providerRun{
			// The specs stay as they are: lush.yaml maps their model name to an OpenAI-compatible
			// endpoint, and the key comes from the credential broker (the local file).
			models: fmt.Sprintf("models:\n  - gemini-2.5-flash-lite\n  - name: gemini-2.5-flash\n    provider: openai\n    model: gpt-4.1-mini\n    base_url: %s\n    credential: openai\n    organization: org-e2e\n", srv.URL()),
			keys:   []string{"model://openai=" + key},
			env:    []string{"OPENAI_API_KEY=", "GOOGLE_API_KEY="},
			seen: func() (o, r int, results []string) {
				for _, req := range srv.Requests() {
					if req.Header.Get("Authorization") != "Bearer "+key || req.Header.Get("OpenAI-Organization") != "org-e2e" || req.Model != "gpt-4.1-mini" {
						t.Errorf("request to %s with Authorization %q, organization %q", req.Model, req.Header.Get("Authorization"), req.Header.Get("OpenAI-Organization"))
					}
					switch req.Queue {
					case orchestratorPrompt:
						o++
						if m := req.Messages[len(req.Messages)-1]; m.Role == "tool" {
							results = append(results, string(m.Content))
						}
					case researcherPrompt:
						r++
					}
				}
				return o, r, results
			},
			secrets: []string{key},
		}
	}},
	{"anthropic", func(t *testing.T) providerRun {
		const key = "sk-ant-e2e-anthropic-key-0123456789"
		srv := anthropicserver.New(key, anthropicserver.WithRouter(anthropicserver.RouteBySystemPrefix(orchestratorPrompt, researcherPrompt)))
		t.Cleanup(srv.Close)
		push := func(queue string, turns []scriptedTurn) {
			for _, st := range turns {
				// A quarter of the prompt read from the cache: Lush counts it as input.
				at := anthropicserver.Turn{Text: st.text, Usage: anthropicserver.Usage{Input: st.input - st.input/4, CacheRead: st.input / 4, Output: st.output}}
				for _, c := range st.calls {
					at.Calls = append(at.Calls, anthropicserver.Call{ID: "toolu_" + c.id, Name: c.name, Input: c.args})
				}
				srv.PushFor(queue, at)
			}
		}
		push(orchestratorPrompt, orchestratorTurns)
		push(researcherPrompt, researcherTurns)
		return providerRun{
			// lush.yaml maps the specs' model name to Anthropic at the stand-in, with max_tokens;
			// the key comes from the credential broker (the local file).
			models: fmt.Sprintf("models:\n  - gemini-2.5-flash-lite\n  - name: gemini-2.5-flash\n    provider: anthropic\n    model: claude-sonnet-4-5\n    base_url: %s\n    credential: anthropic\n    max_tokens: 2048\n", srv.URL()),
			keys:   []string{"model://anthropic=" + key},
			env:    []string{"ANTHROPIC_API_KEY=", "GOOGLE_API_KEY="},
			seen: func() (o, r int, results []string) {
				for _, req := range srv.Requests() {
					if req.Header.Get("x-api-key") != key || req.Model != "claude-sonnet-4-5" || req.MaxTokens != 2048 {
						t.Errorf("request to %s with max_tokens %d, the key in x-api-key: %v", req.Model, req.MaxTokens, req.Header.Get("x-api-key") == key)
					}
					switch req.Queue {
					case orchestratorPrompt:
						o++
						for _, b := range req.LastToolResults() {
							results = append(results, b.ResultText())
						}
					case researcherPrompt:
						r++
					}
				}
				return o, r, results
			},
			secrets: []string{key},
		}
	}},
}

// decision is a tool decision of the decision log.
type decision struct{ Agent, Tool, Outcome string }

// TestSameConversationOnEveryProvider runs the quickstart's orchestrator (which calls the
// researcher through lush://) with `lushctl run`, unchanged but for where its model runs, on each
// provider's stand-in spoken to by the provider's real client, through the real gateway and the
// project's policy; the tool decisions in the decision log and the tokens it records are the
// same on every provider, and the models receive the tool results (the denial included).
func TestSameConversationOnEveryProvider(t *testing.T) {
	tools := nodeTools(t)
	const aliceKey = "alice-e2e-key-0123456789"
	wantDecisions := []decision{ // sorted; an agent tool (lush://) has no MCP tool name
		{"orchestrator", "lush://researcher ", "allow"},
		{"orchestrator", "mcp://npx/@modelcontextprotocol/server-filesystem write_file", "deny"},
		{"orchestrator", "mcp://npx/@modelcontextprotocol/server-filesystem write_file", "stub"},
		{"researcher", "mcp://npx/@modelcontextprotocol/server-filesystem read_text_file", "allow"},
	}
	oIn, oOut := sum(orchestratorTurns)
	rIn, rOut := sum(researcherTurns)
	wantTokens := map[string][2]int{"orchestrator": {oIn, oOut}, "researcher": {rIn, rOut}}

	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			run := p.start(t)
			dir := filepath.Join(t.TempDir(), "quickstart")
			if err := os.CopyFS(dir, os.DirFS("../examples/quickstart")); err != nil {
				t.Fatal(err)
			}
			os.RemoveAll(filepath.Join(dir, ".lush"))
			if run.models != "" {
				f, err := os.OpenFile(filepath.Join(dir, "lush.yaml"), os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.WriteString("\n" + run.models)
				f.Close()
			}
			for _, k := range run.keys {
				addr, key, _ := strings.Cut(k, "=")
				cmd := exec.Command(lushctlBin, "auth", "add", addr, "-C", dir)
				cmd.Stdin = strings.NewReader(key + "\n")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("auth add %s: %v\n%s", addr, err, out)
				}
			}
			config := filepath.Join(t.TempDir(), "gateway.yaml")
			os.WriteFile(config, []byte("auth:\n  api_keys:\n    - {name: alice, sha256: "+sha256hex(aliceKey)+", principal: user:alice, groups: [group:engineering]}\n"), 0o644)
			ready := filepath.Join(t.TempDir(), "ready")
			proc := startProc(t, append(run.env, "LUSH_MODEL_PROVIDER=", "LUSH_DECISION_LOG="), lushctlBin, "run", dir, "--listen", "127.0.0.1:0",
				"--ready-file", ready, "--config", config, "--node-prefix", tools)
			base := waitRunReady(t, proc, ready)

			code, res := chatHTTP(t, base+"/agents/orchestrator/chat", aliceKey, "Summarize Q3")
			if code != 200 || res["status"] != "ok" || res["response"] != orchestratorTurns[3].text {
				t.Fatalf("chat: %d %v", code, res)
			}
			o, r, results := run.seen()
			if o != len(orchestratorTurns) || r != len(researcherTurns) {
				t.Errorf("model requests: orchestrator %d, researcher %d; want %d, %d", o, r, len(orchestratorTurns), len(researcherTurns))
			}
			if len(results) != 3 || !strings.Contains(results[0], "revenue grew 4%") || !strings.Contains(results[1], "denied") ||
				!strings.Contains(results[1], "drafts/") {
				t.Errorf("tool results the orchestrator's model received: %q", results)
			}

			log := filepath.Join(dir, ".lush", "decisions.db")
			var got []decision
			tokens := map[string][2]int{}
			var all strings.Builder
			for _, e := range auditEvents(t, log) {
				all.WriteString(e.raw)
				switch e.Event.Input.Action {
				case "tools/call":
					got = append(got, decision{e.Event.Input.Agent, e.Event.Input.Tool.Ref + " " + e.Event.Input.Tool.Name, e.Event.Result.Outcome})
				case "agent/invoke":
					if e.Completion != nil {
						tokens[e.Event.Input.Agent] = [2]int{e.Completion.TokensInput, e.Completion.TokensOutput}
					}
				}
			}
			slices.SortFunc(got, func(a, b decision) int { return strings.Compare(a.Agent+a.Tool+a.Outcome, b.Agent+b.Tool+b.Outcome) })
			if !slices.Equal(got, wantDecisions) {
				t.Errorf("tool decisions:\n%v\nwant\n%v", got, wantDecisions)
			}
			if fmt.Sprint(tokens) != fmt.Sprint(wantTokens) {
				t.Errorf("tokens recorded: %v, want %v", tokens, wantTokens)
			}
			// A key removed from the broker is missed at the next request, without a restart: the
			// invocation fails saying where to put it.
			for _, k := range run.keys {
				addr, _, _ := strings.Cut(k, "=")
				if out, err := exec.Command(lushctlBin, "auth", "remove", addr, "-C", dir).CombinedOutput(); err != nil {
					t.Fatalf("auth remove %s: %v\n%s", addr, err, out)
				}
				code, res := chatHTTP(t, base+"/agents/researcher/chat", aliceKey, "Q3?")
				if msg, _ := res["error"].(string); code != 502 || res["status"] != "error" || !strings.Contains(msg, "lushctl auth add "+addr) {
					t.Errorf("chat without the key: %d %v", code, res)
				}
			}
			if code := proc.stop(t); code != 0 {
				t.Errorf("run exited %d", code)
			}
			for _, s := range run.secrets {
				if strings.Contains(proc.out.String(), s) || strings.Contains(all.String(), s) {
					t.Errorf("the provider's key is in lushctl's output or the decision log")
				}
			}
		})
	}
}

// waitRunReady waits for `lushctl run` to write its address and returns its base URL.
func waitRunReady(t *testing.T, p *proc, ready string) string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if addr, err := os.ReadFile(ready); err == nil && len(addr) > 0 {
			return "http://" + string(addr)
		}
		select {
		case <-p.done:
			t.Fatalf("run exited:\n%s", p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("run did not start:\n%s", p.out.String())
	return ""
}

// auditEvent is a line of `lushctl audit query -o json`, the fields this test reads.
type auditEvent struct {
	Event struct {
		Input struct {
			Action string `json:"action"`
			Agent  string `json:"agent"`
			Tool   struct {
				Ref  string `json:"ref"`
				Name string `json:"name"`
			} `json:"tool"`
		} `json:"input"`
		Result struct {
			Outcome string `json:"outcome"`
		} `json:"result"`
	} `json:"event"`
	Completion *struct {
		TokensInput  int `json:"tokens_input"`
		TokensOutput int `json:"tokens_output"`
	} `json:"completion"`
	raw string
}

// auditEvents reads every decision of a log with lushctl audit query.
func auditEvents(t *testing.T, log string) []auditEvent {
	t.Helper()
	out, err := exec.Command(lushctlBin, "audit", "query", "--log", log, "--oldest", "-o", "json").Output()
	if err != nil {
		t.Fatalf("audit query: %v", err)
	}
	var events []auditEvent
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit query line %q: %v", sc.Text(), err)
		}
		e.raw = sc.Text()
		events = append(events, e)
	}
	return events
}
