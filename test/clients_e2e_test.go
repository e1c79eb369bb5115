package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The API keys of the official clients' test: alice calls tools, sam approves.
const (
	clientsAliceKey = "alice-key-0123456789"
	clientsSamKey   = "sam-key-01234567890"
)

// TestOfficialClients: the official clients (the v1 TypeScript SDK @modelcontextprotocol/sdk
// 1.32, the v2 client @modelcontextprotocol/client 2.4 as it connects by default (2025-11-25) and
// negotiating the era (2026-07-28), through test/node/clients.mjs, and the Go SDK
// github.com/modelcontextprotocol/go-sdk 1.8 (2026-07-28)) each, through a real `lushctl gateway` in front
// of an mcp-go server: list the tools, call one, answer the server's elicitation during a call
// (a form the client fills), and complete an in-band approval: the destructive tool's call needs
// a person, the client is pointed at the approval's page (an elicitation in URL mode, or an
// input_required result, by protocol version), the test approves it through the approvals API as
// sam when the client shows the URL, and the call runs.
func TestOfficialClients(t *testing.T) {
	node, scripts := nodeForClients(t)
	upstream := startElicitingServer(t)
	dir := writeProject(t, map[string]string{
		"lush.yaml": `project: clients-e2e
roles:
  approve: [user:sam]
servers:
  mcp://clients.internal/mcp:
    url: ` + upstream + `
tool_classes:
  mcp://clients.internal/mcp:
    echo: read
    ask_name: read
    purge: {access: write, risk: destructive}
tool_grants:
  - tool: mcp://clients.internal/mcp
    grants:
      - {principal: group:eng, access: write}
`,
		"agents/assistant/spec.yaml": "name: assistant\nmodel: gemini-2.5-flash\ndescription: Helps.\ntools:\n  - server: mcp://clients.internal/mcp\n    access: write\n" +
			"acl:\n  - principal: group:eng\n    role: execute\n",
		"gateway.yaml": "approvals:\n  wait: 2m\n  poll: 50ms\nauth:\n  api_keys:\n" +
			"    - {name: alice, sha256: " + sha256hex(clientsAliceKey) + ", principal: user:alice, groups: [group:eng]}\n" +
			"    - {name: sam, sha256: " + sha256hex(clientsSamKey) + ", principal: user:sam}\n",
	})
	base, gw := startGateway(t, dir, "--config", filepath.Join(dir, "gateway.yaml"), "--live-writes")
	endpoint := base + "/agents/assistant/mcp"

	nodeClient := func(sdk string) func(ctx context.Context, target string, emit func(clientEvent)) error {
		return func(ctx context.Context, target string, emit func(clientEvent)) error {
			return runNodeClient(ctx, node, filepath.Join(scripts, "clients.mjs"), sdk, endpoint, clientSteps(target), emit)
		}
	}
	for _, tc := range []struct {
		name     string
		protocol string // the version the client speaks with the gateway
		run      func(ctx context.Context, target string, emit func(clientEvent)) error
	}{
		{"typescript-sdk-v1", "2025-11-25", nodeClient("v1")},
		{"typescript-client-v2", "2025-11-25", nodeClient("v2")},
		{"typescript-client-v2-negotiated", "2026-07-28", nodeClient("v2-auto")},
		{"go-sdk", "2026-07-28", func(ctx context.Context, target string, emit func(clientEvent)) error {
			return runGoSDKClient(ctx, endpoint, clientSteps(target), emit)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			events := make(chan clientEvent, 16)
			done := make(chan error, 1)
			go func() {
				defer close(events)
				done <- tc.run(ctx, tc.name, func(e clientEvent) {
					select {
					case events <- e:
					case <-ctx.Done():
					}
				})
			}()
			var results []map[string]any
			var asked []string
			for e := range events {
				switch {
				case e.Error != "":
					t.Errorf("a step failed: %s", e.Error)
					results = append(results, nil)
				case e.Tools != nil:
					for _, want := range []string{"echo", "ask_name", "purge"} {
						if !slices.Contains(e.Tools, want) {
							t.Errorf("tools/list: %v, without %s", e.Tools, want)
						}
					}
				case e.Elicitation != nil && e.Elicitation.Mode == "url":
					asked = append(asked, "url")
					approveFromURL(t, base, e.Elicitation.URL, tc.name)
				case e.Elicitation != nil:
					asked = append(asked, "form")
				case e.Result != nil:
					results = append(results, e.Result)
				case e.Connected != nil:
					if e.Connected["protocol"] != tc.protocol {
						t.Errorf("connected with protocol %v, want %s", e.Connected["protocol"], tc.protocol)
					}
				}
			}
			if err := <-done; err != nil {
				t.Fatalf("the client: %v\ngateway:\n%s", err, gw.out.String())
			}
			want := []string{"echo: hi from " + tc.name, "Hello, Ada", "purged " + tc.name}
			if len(results) != len(want) {
				t.Fatalf("results %v, want %d", results, len(want))
			}
			for i, res := range results {
				if got := resultText(res); res == nil || res["isError"] == true || !strings.Contains(got, want[i]) {
					t.Errorf("call %d: %v, want %q", i, res, want[i])
				}
			}
			if !slices.Equal(asked, []string{"form", "url"}) {
				t.Errorf("elicitations the client answered: %v, want a form (the server's) then a URL (the approval)", asked)
			}
		})
	}
}

// clientEvent is one line of test/node/clients.mjs, or the same from the Go SDK's client.
type clientEvent struct {
	Connected   map[string]any `json:"connected"`
	Tools       []string       `json:"tools"`
	Result      map[string]any `json:"result"`
	Error       string         `json:"error"`
	Elicitation *struct {
		Mode          string `json:"mode"`
		Message       string `json:"message"`
		URL           string `json:"url"`
		ElicitationID string `json:"elicitationId"`
	} `json:"elicitation"`
}

// clientSteps are the client's steps: list, a plain call, a call the server elicits during, and
// a call that needs approval (of target: each client's is its own).
func clientSteps(target string) []map[string]any {
	return []map[string]any{{"list": true}, {"call": "echo", "arguments": map[string]any{"text": "hi from " + target}},
		{"call": "ask_name"}, {"call": "purge", "arguments": map[string]any{"target": target}}}
}

func resultText(res map[string]any) string {
	var parts []string
	content, _ := res["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "text" {
			parts = append(parts, fmt.Sprint(m["text"]))
		}
	}
	return strings.Join(parts, "\n")
}

// approveFromURL checks the in-band approval's URL is the page of a pending approval of purge
// for target, as sam sees it, and approves it through the approvals API.
func approveFromURL(t *testing.T, base, pageURL, target string) {
	t.Helper()
	u, err := url.Parse(pageURL)
	if err != nil || !strings.HasPrefix(pageURL, base+"/approvals/") || !strings.HasSuffix(u.Path, "/page") {
		t.Errorf("the approval's URL %q is not a page of %s", pageURL, base)
		return
	}
	id := strings.TrimSuffix(strings.TrimPrefix(u.Path, "/approvals/"), "/page")
	code, page := samRequest(t, http.MethodGet, pageURL, "")
	if code != 200 || !strings.Contains(page, "user:alice") || !strings.Contains(page, target) || !strings.Contains(page, `value="approve"`) {
		t.Errorf("the approval page: %d\n%s", code, page)
	}
	if code, body := samRequest(t, http.MethodPost, base+"/approvals/"+id, `{"decision": "approve", "reason": "e2e"}`); code != 200 {
		t.Errorf("approving %s: %d %s", id, code, body)
	}
}

func samRequest(t *testing.T, method, u, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	req.Header.Set("X-API-Key", clientsSamKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// nodeForClients returns Node 22 and a directory holding test/node/clients.mjs beside the
// project's npm packages (a link to them), so that the script's imports resolve.
func nodeForClients(t *testing.T) (node, dir string) {
	t.Helper()
	tools := nodeTools(t)
	for _, p := range []string{"sdk", "client"} {
		if _, err := os.Stat(filepath.Join(tools, "node_modules", "@modelcontextprotocol", p)); err != nil {
			t.Fatalf("@modelcontextprotocol/%s is missing: run make node-tools", p)
		}
	}
	dir = t.TempDir()
	src, err := os.ReadFile("node/clients.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "clients.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(tools, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return node22(t), dir
}

// runNodeClient runs clients.mjs and passes each line it prints to emit, as it comes.
func runNodeClient(ctx context.Context, node, script, sdk, endpoint string, steps []map[string]any, emit func(clientEvent)) error {
	s, _ := json.Marshal(steps)
	h, _ := json.Marshal(map[string]string{"X-API-Key": clientsAliceKey})
	cmd := exec.CommandContext(ctx, node, script, sdk, endpoint, string(h), string(s))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e clientEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			e.Error = "not a JSON line: " + sc.Text()
		}
		emit(e)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("node clients.mjs %s: %w\n%s", sdk, err, stderr.String())
	}
	return nil
}

// runGoSDKClient does what clients.mjs does, with the Go SDK's client.
func runGoSDKClient(ctx context.Context, endpoint string, steps []map[string]any, emit func(clientEvent)) error {
	elicit := func(_ context.Context, req *gosdk.ElicitRequest) (*gosdk.ElicitResult, error) {
		p := req.Params
		e := clientEvent{}
		e.Elicitation = &struct {
			Mode          string `json:"mode"`
			Message       string `json:"message"`
			URL           string `json:"url"`
			ElicitationID string `json:"elicitationId"`
		}{Mode: p.Mode, Message: p.Message, URL: p.URL, ElicitationID: p.ElicitationID}
		if p.Mode == "url" {
			emit(e)
			return &gosdk.ElicitResult{Action: "accept"}, nil
		}
		e.Elicitation.Mode = "form"
		emit(e)
		return &gosdk.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
	}
	c := gosdk.NewClient(&gosdk.Implementation{Name: "lush-e2e-go-sdk", Version: "1.0.0"}, &gosdk.ClientOptions{
		Capabilities: &gosdk.ClientCapabilities{Elicitation: &gosdk.ElicitationCapabilities{
			Form: &gosdk.FormElicitationCapabilities{}, URL: &gosdk.URLElicitationCapabilities{}}},
		ElicitationHandler: elicit,
	})
	hc := &http.Client{Transport: apiKeyTransport{key: clientsAliceKey}}
	cs, err := c.Connect(ctx, &gosdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer cs.Close()
	emit(clientEvent{Connected: map[string]any{"protocol": cs.InitializeResult().ProtocolVersion}})
	for _, step := range steps {
		if step["list"] == true {
			res, err := cs.ListTools(ctx, nil)
			if err != nil {
				emit(clientEvent{Error: err.Error()})
				continue
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
			}
			emit(clientEvent{Tools: names})
			continue
		}
		res, err := cs.CallTool(ctx, &gosdk.CallToolParams{Name: step["call"].(string), Arguments: step["arguments"]})
		if err != nil {
			emit(clientEvent{Error: err.Error()})
			continue
		}
		b, _ := json.Marshal(res)
		var out map[string]any
		json.Unmarshal(b, &out)
		emit(clientEvent{Result: out})
	}
	return nil
}

// apiKeyTransport sends an API key with every request.
type apiKeyTransport struct{ key string }

func (a apiKeyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-API-Key", a.key)
	return http.DefaultTransport.RoundTrip(r)
}

// startElicitingServer serves an mcp-go server on loopback (stopped with the test) with echo,
// ask_name (which asks the client for a name, with an elicitation in form mode: a request of its
// own for clients before 2026-07-28, an input_required result for later ones) and purge, and
// returns its URL.
func startElicitingServer(t *testing.T) string {
	t.Helper()
	s := server.NewMCPServer("clients-e2e", "1.0.0", server.WithElicitation())
	s.AddTool(mcp.NewTool("echo", mcp.WithDescription("Echoes."), mcp.WithString("text", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("echo: " + req.GetString("text", "")), nil
		})
	s.AddTool(mcp.NewTool("ask_name", mcp.WithDescription("Asks the user's name, then greets.")),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if answer := server.ElicitationResponse(req.Params.InputResponses, "name"); answer != nil {
				content, _ := answer.Content.(map[string]any)
				if answer.Action != mcp.ElicitationResponseActionAccept || content["name"] == nil {
					return mcp.NewToolResultError("no name was given"), nil
				}
				return mcp.NewToolResultText(fmt.Sprintf("Hello, %v", content["name"])), nil
			}
			return server.NewInputRequestBuilder("").Elicit("name", mcp.ElicitationParams{Message: "What is your name?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}},
					"required": []string{"name"}}}).ToolResult(), nil
		})
	s.AddTool(mcp.NewTool("purge", mcp.WithDescription("Purges a cache."), mcp.WithString("target", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("purged " + req.GetString("target", "")), nil
		})
	srv := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}
