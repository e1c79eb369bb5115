package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
)

// jsA2AAgent is test/node/a2a-agent.mjs running: a remote A2A agent served by the A2A
// JavaScript SDK that requires a bearer token and records what reached it.
type jsA2AAgent struct {
	url string // its base URL, http://127.0.0.1:<port>/echo
}

// a2aReceived is what reached the JS agent: every JSON-RPC request (how it was authenticated)
// and every message its executor ran.
type a2aReceived struct {
	Requests []struct {
		Auth string `json:"auth"` // bearer (the right token), missing or wrong
	} `json:"requests"`
	Messages []struct {
		Text     string         `json:"text"`
		Metadata map[string]any `json:"metadata"`
	} `json:"messages"`
}

func startJSA2AAgent(t *testing.T, token string) *jsA2AAgent {
	t.Helper()
	tools := nodeTools(t)
	if _, err := os.Stat(filepath.Join(tools, "node_modules", "@a2a-js", "sdk")); err != nil {
		t.Fatalf("@a2a-js/sdk is missing from %s: run make node-tools", tools)
	}
	dir := t.TempDir()
	src, err := os.ReadFile("node/a2a-agent.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a2a-agent.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(tools, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, []string{"A2A_AGENT_TOKEN=" + token}, node22(t), filepath.Join(dir, "a2a-agent.mjs"))
	waitFor(t, p, "a2a agent listening on", 30*time.Second)
	u := regexp.MustCompile(`http://127\.0\.0\.1:\d+/echo`).FindString(p.out.String())
	if u == "" {
		t.Fatalf("a2a-agent.mjs printed no URL:\n%s", p.out.String())
	}
	return &jsA2AAgent{url: u}
}

func (a *jsA2AAgent) received(t *testing.T) a2aReceived {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(a.url, "/echo") + "/received")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r a2aReceived
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("GET /received: %v", err)
	}
	return r
}

// TestA2ARemoteJSAgent: a Lush agent's tool is a remote A2A agent served by the A2A JavaScript
// SDK (in its A2A 0.3 compatibility mode, which Lush's a2a-go client speaks), behind `lushctl
// serve`, called as an MCP client through the gateway and through a chat with the agent:
//   - stubbed (live writes off): the remote agent receives nothing, the caller gets the stub;
//   - denied (a principal with no grant on the agent): nothing arrives, the deny is logged;
//   - allowed with live writes on: the message arrives with the credential stored by
//     `lushctl auth add` as Authorization: Bearer, and the principal and chain in its
//     dev.lush/delegation metadata; the answer is the tool result (and the chat's answer);
//   - the credential appears in neither the decision log nor lushctl's output.
func TestA2ARemoteJSAgent(t *testing.T) {
	const token = "a2a-remote-token-7f3e9b21c4"
	const botKey, carolKey = "bot-key-a2a-0123456789", "carol-key-a2a-012345678"
	agent := startJSA2AAgent(t, token)
	ref := "a2a+http://" + strings.TrimPrefix(agent.url, "http://")

	dir := t.TempDir()
	for rel, content := range map[string]string{
		"agents/assistant/spec.yaml": "name: assistant\nmodel: gemini-2.5-flash\ndescription: Asks a remote agent.\ntools:\n  - server: " + ref + "\n    access: write\n" +
			"acl:\n  - {principal: serviceaccount:bot, role: execute}\n  - {principal: group:eng, role: execute}\n",
		"lush.yaml": "project: a2a-remote\nservice_accounts: [bot]\ntool_grants:\n  - tool: " + ref + "\n    grants:\n      - {principal: serviceaccount:bot, access: write}\n" +
			"mcp_credentials:\n  " + ref + ":\n    serviceaccount:bot: {type: bearer}\n",
		"scripts/assistant.yaml": "turns:\n  - calls: [{name: echo, args: {message: from the chat}}]\n  - text: \"The agent said: {{result}}\"\n",
		"gateway.yaml": "auth:\n  api_keys:\n" +
			"    - {name: bot, sha256: " + sha256hex(botKey) + ", principal: serviceaccount:bot}\n" +
			"    - {name: carol, sha256: " + sha256hex(carolKey) + ", principal: user:carol, groups: [group:eng]}\n",
	} {
		writeProjectFile(t, dir, rel, content)
	}
	// The build fetches and checks the JS agent's card (no --offline).
	out, err := exec.Command(lushctlBin, "build", "-q", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	hash := strings.TrimSpace(string(out))
	add := exec.Command(lushctlBin, "auth", "add", ref, "--principal", "serviceaccount:bot", "-C", dir)
	add.Stdin = strings.NewReader(token + "\n")
	addOut, err := add.CombinedOutput()
	if err != nil {
		t.Fatalf("auth add: %v\n%s", err, addOut)
	}

	var outputs []string // every output of lushctl, scanned for the token at the end
	serve := func(liveWrites string) (string, *proc) {
		port := freePort(t)
		p := startProc(t, []string{fmt.Sprintf("PORT=%d", port), "LUSH_LISTEN_HOST=127.0.0.1", "LUSH_PROJECT=" + dir, "LUSH_BUILD=" + hash[:12],
			"LUSH_CONFIG=" + filepath.Join(dir, "gateway.yaml"), "LUSH_MODEL_PROVIDER=scripted", "LUSH_LIVE_WRITES=" + liveWrites, "LOG_LEVEL=debug"},
			lushctlBin, "serve")
		waitFor(t, p, "lush: build "+hash[:12], 60*time.Second)
		return fmt.Sprintf("http://127.0.0.1:%d", port), p
	}
	stop := func(p *proc) {
		if code := p.stop(t); code != 0 {
			t.Fatalf("serve exited %d on SIGTERM:\n%s", code, p.out.String())
		}
		outputs = append(outputs, p.out.String())
	}
	callEcho := func(c *client.Client, message string) (string, bool) {
		text, isErr := call(t, c, "echo", map[string]any{"message": message})
		outputs = append(outputs, text)
		return text, isErr
	}
	nothingArrived := func(when string) {
		if got := agent.received(t); len(got.Requests) != 0 || len(got.Messages) != 0 {
			t.Fatalf("%s: the remote agent received %+v", when, got)
		}
	}

	// Live writes off: the send is a write, so it is stubbed; a principal without a grant is
	// denied. Nothing reaches the remote agent.
	base, p := serve("")
	text, isErr := callEcho(mcpClient(t, base+"/gateway/agents/assistant/mcp", botKey), "hello")
	if isErr || !strings.Contains(text, "stub") {
		t.Errorf("stubbed call: isError %v %q", isErr, text)
	}
	nothingArrived("stubbed")
	text, isErr = callEcho(mcpClient(t, base+"/gateway/agents/assistant/mcp", carolKey), "hello")
	if !isErr || !strings.Contains(text, "denied") {
		t.Errorf("carol's call: isError %v %q, want a denial", isErr, text)
	}
	nothingArrived("denied")
	stop(p)

	// Live writes on for the agent: the message arrives, with the credential and the delegation.
	base, p = serve(ref)
	text, isErr = callEcho(mcpClient(t, base+"/gateway/agents/assistant/mcp", botKey), "hello")
	if isErr || !strings.Contains(text, "echo: hello (from serviceaccount:bot)") {
		t.Errorf("live call: isError %v %q", isErr, text)
	}
	text, isErr = callEcho(mcpClient(t, base+"/gateway/agents/assistant/mcp", carolKey), "hello")
	if !isErr || !strings.Contains(text, "denied") {
		t.Errorf("carol's live call: isError %v %q, want a denial", isErr, text)
	}
	code, chat := chatHTTP(t, base+"/agents/assistant/chat", botKey, "Ask the remote agent")
	if code != 200 || chat["response"] != "The agent said: echo: from the chat (from serviceaccount:bot)" {
		t.Errorf("chat: %d %v", code, chat)
	}
	outputs = append(outputs, fmt.Sprint(chat))
	stop(p)

	got := agent.received(t)
	if len(got.Requests) != 2 || got.Requests[0].Auth != "bearer" || got.Requests[1].Auth != "bearer" {
		t.Errorf("JSON-RPC requests at the remote agent: %+v, want two with the bearer token", got.Requests)
	}
	if len(got.Messages) != 2 || got.Messages[0].Text != "hello" || got.Messages[1].Text != "from the chat" {
		t.Fatalf("messages at the remote agent: %+v", got.Messages)
	}
	for _, m := range got.Messages {
		d, _ := m.Metadata["dev.lush/delegation"].(map[string]any)
		if d["principal"] != "serviceaccount:bot" || fmt.Sprint(d["chain"]) != "[assistant]" || d["depth"] != 1.0 {
			t.Errorf("delegation metadata: %v", m.Metadata)
		}
	}

	// The decision log: stub, deny, deny, allow (with a credential), allow through the chat.
	type decided struct {
		principal, outcome string
		credential         bool
	}
	var calls []decided
	logPath := filepath.Join(dir, ".lush", "decisions.db")
	for _, r := range readDecisions(t, logPath) {
		if ev := r.Event; ev.Action == "tools/call" {
			if ev.Outcome != "deny" && ev.Tool != ref {
				t.Errorf("decision %s names tool %q, want %s", ev.DecisionID, ev.Tool, ref)
			}
			calls = append(calls, decided{ev.Principal, ev.Outcome, ev.Credential != nil})
		}
	}
	want := []decided{{"serviceaccount:bot", "stub", false}, {"user:carol", "deny", false}, {"serviceaccount:bot", "allow", true},
		{"user:carol", "deny", false}, {"serviceaccount:bot", "allow", true}}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("tools/call decisions:\n got %v\nwant %v", calls, want)
	}

	audit := runLushctl(t, "audit", "query", "--log", logPath, "-o", "json")
	var db []string
	for _, f := range []string{logPath, logPath + "-wal"} {
		b, _ := os.ReadFile(f)
		db = append(db, string(b))
	}
	for where, out := range map[string]string{"lushctl serve's output": strings.Join(outputs, "\n"), "decision log files": strings.Join(db, ""),
		"audit query": audit, "auth add": string(addOut)} {
		if strings.Contains(out, token) {
			t.Errorf("the %s holds the credential", where)
		}
	}
	if !strings.Contains(audit, "echo: hello") {
		t.Error("the audit output lacks the write's response, so the scan proves little")
	}
}
