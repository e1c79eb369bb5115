package notes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.uber.org/goleak"

	"github.com/lush-agents/lush/test/syncbuf"
)

const (
	aliceToken   = "alice-secret-token-0001"
	bobToken     = "bob-secret-token-0002"
	unknownToken = "mallory-guessed-token-0003"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// secrets are the tokens that must never show up in logs or 401 bodies.
var secrets = []string{aliceToken, bobToken, unknownToken}

const twoAccounts = "# accounts of the notes tests\nalice " + aliceToken + "\n\n  bob\t" + bobToken + "\n"

type fixture struct {
	srv    *Server
	url    string // of /mcp
	logs   *syncbuf.Buffer
	tokens string // the tokens file
}

// start serves a Server with the given tokens file content over httptest. When the test ends
// it checks that no token reached the logs.
func start(t *testing.T, tokensFile string, seed map[string][]string) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, tokensFile)
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := New(Options{TokensFile: path, Seed: seed, Logger: logger})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		s.Close()
		ts.Close()
		for i, secret := range secrets {
			if strings.Contains(logs.String(), secret) {
				t.Errorf("secrets[%d] appears in the logs:\n%s", i, logs.String())
			}
		}
	})
	return &fixture{srv: s, url: ts.URL + "/mcp", logs: logs, tokens: path}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// connect starts and initializes an MCP client sending the Authorization header auth ("" for
// none).
func connect(t *testing.T, url, auth string) (*client.Client, error) {
	t.Helper()
	var opts []transport.StreamableHTTPCOption
	if auth != "" {
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": auth}))
	}
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	req := mcp.InitializeRequest{}
	req.Params.ClientInfo = mcp.Implementation{Name: "notes-test", Version: "1"}
	if _, err := c.Initialize(ctx, req); err != nil {
		return nil, err
	}
	return c, nil
}

func mustConnect(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := connect(t, url, "Bearer "+token)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return c
}

// call calls a tool and returns its result and the result's text.
func call(t *testing.T, c *client.Client, tool string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = tool, args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	var texts []string
	for _, content := range res.Content {
		if tc, ok := mcp.AsTextContent(content); ok {
			texts = append(texts, tc.Text)
		}
	}
	return res, strings.Join(texts, "\n")
}

// post sends a raw initialize request with the given Authorization header ("" for none).
func post(t *testing.T, url, auth string) (*http.Response, []byte) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",` +
		`"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, got
}

func TestAuthorizationHeader(t *testing.T) {
	f := start(t, twoAccounts, nil)
	tests := []struct {
		name, auth  string
		wantProblem string // "" means the request gets through
	}{
		{"bearer token of alice", "Bearer " + aliceToken, ""},
		{"scheme in lower case", "bearer " + bobToken, ""},
		{"no header", "", "missing Authorization header"},
		{"unknown token", "Bearer " + unknownToken, "unknown bearer token"},
		{"token of alice with a suffix", "Bearer " + aliceToken + "x", "unknown bearer token"},
		{"basic auth", "Basic YWxpY2U6cHc=", "not a bearer token"},
		{"bearer without token", "Bearer", "not a bearer token"},
		{"token without scheme", aliceToken, "not a bearer token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rejectedBefore := f.srv.Requests()
			resp, body := post(t, f.url, tt.auth)
			if tt.wantProblem == "" {
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d, want 200; body %s", resp.StatusCode, body)
				}
				return
			}
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401; body %s", resp.StatusCode, body)
			}
			if got, want := resp.Header.Get("WWW-Authenticate"), `Bearer realm="notes", error="invalid_token"`; got != want {
				t.Errorf("WWW-Authenticate = %q, want %q", got, want)
			}
			var got struct {
				Error       string `json:"error"`
				Description string `json:"error_description"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("401 body %s: %v", body, err)
			}
			if got.Error != "invalid_token" || !strings.Contains(got.Description, tt.wantProblem) {
				t.Errorf("401 body %s, want error invalid_token and a description saying %q", body, tt.wantProblem)
			}
			for i, secret := range secrets {
				if bytes.Contains(body, []byte(secret)) {
					t.Errorf("401 body contains secrets[%d]: %s", i, body)
				}
			}
			if n := f.srv.Requests(); n != rejectedBefore+1 {
				t.Errorf("Requests() = %d, want %d", n, rejectedBefore+1)
			}
		})
	}
}

func TestClientWithoutAKnownTokenCannotConnect(t *testing.T) {
	f := start(t, twoAccounts, nil)
	for _, auth := range []string{"", "Bearer " + unknownToken} {
		_, err := connect(t, f.url, auth)
		if !errors.Is(err, transport.ErrAuthorizationRequired) {
			t.Errorf("connect with Authorization %q: err = %v, want %v", strings.ReplaceAll(auth, unknownToken, "<unknown>"),
				err, transport.ErrAuthorizationRequired)
		}
	}
	if got := f.srv.Seen(); len(got) != 0 {
		t.Errorf("Seen() = %q, want nothing", got)
	}
	if f.srv.Requests() < 2 {
		t.Errorf("Requests() = %d, want at least 2", f.srv.Requests())
	}
}

func TestAccountsSeeOnlyTheirOwnNotes(t *testing.T) {
	f := start(t, twoAccounts, map[string][]string{
		"alice": {"buy milk", "Plan the offsite"},
		"bob":   {"review the budget"},
	})
	clients := map[string]*client.Client{"alice": mustConnect(t, f.url, aliceToken), "bob": mustConnect(t, f.url, bobToken)}
	tests := []struct {
		account, tool string
		args          map[string]any
		wantText      string
		wantNotes     []string // search_notes' structured notes
	}{
		{"alice", "whoami", nil, "alice", nil},
		{"bob", "whoami", nil, "bob", nil},
		{"alice", "search_notes", nil, "notes of alice matching \"\":\n- buy milk\n- Plan the offsite",
			[]string{"buy milk", "Plan the offsite"}},
		{"alice", "search_notes", map[string]any{"query": "plan"}, "notes of alice matching \"plan\":\n- Plan the offsite",
			[]string{"Plan the offsite"}},
		{"alice", "search_notes", map[string]any{"query": "budget"}, `no notes of alice match "budget"`, []string{}},
		{"bob", "search_notes", map[string]any{"query": "budget"}, "notes of bob matching \"budget\":\n- review the budget",
			[]string{"review the budget"}},
		{"bob", "search_notes", map[string]any{"query": "milk"}, `no notes of bob match "milk"`, []string{}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s/%v", tt.account, tt.tool, tt.args["query"]), func(t *testing.T) {
			res, text := call(t, clients[tt.account], tt.tool, tt.args)
			if res.IsError || text != tt.wantText {
				t.Fatalf("%s %v as %s = %q (error %v), want %q", tt.tool, tt.args, tt.account, text, res.IsError, tt.wantText)
			}
			if tt.tool != "search_notes" {
				return
			}
			got, _ := json.Marshal(res.StructuredContent)
			want, _ := json.Marshal(searchResult{Account: tt.account, Notes: tt.wantNotes})
			if !bytes.Equal(got, want) {
				t.Errorf("structured content %s, want %s", got, want)
			}
		})
	}
}

func TestToolsAreListedWithSchemas(t *testing.T) {
	f := start(t, twoAccounts, nil)
	c := mustConnect(t, f.url, aliceToken)
	res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]mcp.Tool{}
	for _, tool := range res.Tools {
		tools[tool.Name] = tool
	}
	if got := slices.Sorted(maps.Keys(tools)); !slices.Equal(got, []string{"post_note", "search_notes", "whoami"}) {
		t.Fatalf("tools %q", got)
	}
	if out := tools["search_notes"].OutputSchema; out.Type != "object" || out.Properties["account"] == nil || out.Properties["notes"] == nil {
		t.Errorf("search_notes output schema %+v, want an object with account and notes", out)
	}
	if !slices.Contains(tools["post_note"].InputSchema.Required, "text") {
		t.Errorf("post_note input schema %+v, want text required", tools["post_note"].InputSchema)
	}
}

func TestPostNote(t *testing.T) {
	f := start(t, twoAccounts, map[string][]string{"alice": {"old note"}})
	alice, bob := mustConnect(t, f.url, aliceToken), mustConnect(t, f.url, bobToken)
	tests := []struct {
		name      string
		args      map[string]any
		wantText  string
		wantError bool
	}{
		{"a note", map[string]any{"text": "ship v1"}, "posted note 2 for alice", false},
		{"another", map[string]any{"text": "ship v2"}, "posted note 3 for alice", false},
		{"the longest note", map[string]any{"text": strings.Repeat("é", maxNoteLen)}, "posted note 4 for alice", false},
		{"too long", map[string]any{"text": strings.Repeat("x", maxNoteLen+1)}, "the limit is 10000", true},
		{"empty", map[string]any{"text": "  "}, "the text is empty", true},
		{"no text", map[string]any{}, "needs a text argument", true},
		{"text not a string", map[string]any{"text": 7}, "needs a text argument", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, text := call(t, alice, "post_note", tt.args)
			if res.IsError != tt.wantError || !strings.Contains(text, tt.wantText) {
				t.Errorf("post_note = %.80q (error %v), want %q (error %v)", text, res.IsError, tt.wantText, tt.wantError)
			}
		})
	}
	if _, text := call(t, alice, "search_notes", map[string]any{"query": "SHIP"}); text != "notes of alice matching \"SHIP\":\n- ship v1\n- ship v2" {
		t.Errorf("alice's search after posting = %q", text)
	}
	if _, text := call(t, bob, "search_notes", map[string]any{"query": "ship"}); text != `no notes of bob match "ship"` {
		t.Errorf("bob's search after alice posted = %q", text)
	}
}

func TestSeenRecordsWhoseCredentialArrived(t *testing.T) {
	f := start(t, twoAccounts, nil)
	for _, token := range []string{aliceToken, bobToken} {
		call(t, mustConnect(t, f.url, token), "whoami", nil)
	}
	if _, err := connect(t, f.url, "Bearer "+unknownToken); err == nil {
		t.Fatal("connected with an unknown token")
	}
	// Each client sends several requests (initialize, initialized, the call), in this order.
	if got := slices.Compact(f.srv.Seen()); !slices.Equal(got, []string{"alice", "bob"}) {
		t.Errorf("Seen() compacted = %q, want [alice bob]", got)
	}
}

func TestTokensFileIsReloaded(t *testing.T) {
	tests := []struct {
		name        string
		every       time.Duration
		wantBobGets bool
	}{
		{"looked at again", 0, true},
		{"not looked at within the interval", time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := start(t, "alice "+aliceToken+"\n", nil)
			f.srv.tokens.mu.Lock()
			f.srv.tokens.every = tt.every
			f.srv.tokens.mu.Unlock()
			if _, err := connect(t, f.url, "Bearer "+bobToken); err == nil {
				t.Fatal("bob connected before he was in the tokens file")
			}

			writeFile(t, f.tokens, twoAccounts)
			later := time.Now().Add(2 * time.Second) // a new mtime even on a coarse file system
			if err := os.Chtimes(f.tokens, later, later); err != nil {
				t.Fatal(err)
			}
			_, err := connect(t, f.url, "Bearer "+bobToken)
			if got := err == nil; got != tt.wantBobGets {
				t.Fatalf("bob connects after he was added: %v (err %v), want %v", got, err, tt.wantBobGets)
			}
			if tt.wantBobGets && f.srv.Accounts() != 2 {
				t.Errorf("Accounts() = %d, want 2", f.srv.Accounts())
			}
		})
	}
}

func TestBrokenTokensFileKeepsTheAccountsBefore(t *testing.T) {
	f := start(t, twoAccounts, nil)
	f.srv.tokens.mu.Lock()
	f.srv.tokens.every = 0
	f.srv.tokens.mu.Unlock()

	writeFile(t, f.tokens, "alice "+aliceToken+"\nbob "+bobToken+" trailing-garbage\n")
	later := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(f.tokens, later, later); err != nil {
		t.Fatal(err)
	}
	c := mustConnect(t, f.url, bobToken)
	if _, text := call(t, c, "whoami", nil); text != "bob" {
		t.Errorf("whoami = %q, want bob", text)
	}
	if want := f.tokens + ":2: want 2 fields"; !strings.Contains(f.logs.String(), want) {
		t.Errorf("logs do not say %q:\n%s", want, f.logs.String())
	}
	if n := strings.Count(f.logs.String(), "does not load"); n != 1 {
		t.Errorf("the broken file was reported %d times, want once:\n%s", n, f.logs.String())
	}
}

func TestTokensFileErrors(t *testing.T) {
	tests := []struct {
		name, content string
		want          string // the error; "" means no error
		wantAccounts  int
	}{
		{"accounts, comments, blank lines, tabs", twoAccounts, "", 2},
		{"no accounts", "# nobody yet\n", "", 0},
		{"account without token", "alice\n", `tokens:1: want 2 fields, "<account> <token>"; found 1`, 0},
		{"three fields", "# c\n\nalice " + aliceToken + " extra\n", `tokens:3: want 2 fields, "<account> <token>"; found 3`, 0},
		{"account twice", "alice " + aliceToken + "\nbob " + bobToken + "\nalice " + unknownToken + "\n",
			`tokens:3: account "alice" is already given on line 1`, 0},
		{"token twice", "alice " + aliceToken + "\nbob " + aliceToken + "\n",
			`tokens:2: account "bob" has the same token as account "alice" (line 1)`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			accounts, err := parseTokens("tokens", strings.NewReader(tt.content))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("error %v, want %s", err, tt.want)
			case len(accounts) != tt.wantAccounts:
				t.Fatalf("%d accounts, want %d", len(accounts), tt.wantAccounts)
			}
			for i, secret := range secrets {
				if err != nil && strings.Contains(err.Error(), secret) {
					t.Errorf("error contains secrets[%d]: %v", i, err)
				}
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	writeFile(t, bad, "alice "+aliceToken+"\n\nbob\n")
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no tokens file", Options{}, "no tokens file"},
		{"missing tokens file", Options{TokensFile: filepath.Join(dir, "nope")}, "no such file"},
		{"tokens file with an error", Options{TokensFile: bad}, bad + ":3: want 2 fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), aliceToken) {
				t.Errorf("error contains a token: %v", err)
			}
		})
	}
}

func TestCloseEndsEventStreams(t *testing.T) {
	f := start(t, twoAccounts, nil)
	req, err := http.NewRequest(http.MethodGet, f.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /mcp: status %d, want 200", resp.StatusCode)
	}
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()

	f.srv.Close()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("stream ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the event stream is still open 5s after Close")
	}
}
