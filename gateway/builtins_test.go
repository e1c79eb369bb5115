package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/test/mcpserver"
)

// shellHarness serves a project whose assistant may use builtin/shell (group:eng holds a write
// grant). approvals sets authorization.approval_required_for (nil: the default, destructive).
func shellHarness(t *testing.T, cfg gateway.Config, approvals []string, opts ...func(*gateway.Options)) *harness {
	t.Helper()
	url, rec := mcpserver.StartRecordedHTTP(t.Cleanup)
	h := &harness{t: t, rec: rec, url: url}
	extra := "  - tool: builtin/shell\n    grants:\n      - {principal: group:eng, access: write}\n"
	if approvals != nil {
		extra += "authorization:\n  approval_required_for: [" + strings.Join(approvals, ", ") + "]\n"
	}
	h.dir = project(t, url, extra)
	p := filepath.Join(h.dir, "agents/assistant/spec.yaml")
	spec, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, []byte(strings.Replace(string(spec), "acl:\n", "  - name: builtin/shell\n    access: write\nacl:\n", 1)), 0o644)
	os.MkdirAll(filepath.Join(h.dir, "work"), 0o755)
	h.serve(cfg, opts...)
	return h
}

// shellResult is builtin/shell's structuredContent.
type shellResult struct {
	OK        bool   `json:"ok"`
	ExitCode  int    `json:"exitCode"`
	Output    string `json:"output"`
	Truncated bool   `json:"truncated"`
	Error     *struct {
		Code string `json:"code"`
	} `json:"error"`
}

func structured(t *testing.T, res *mcp.CallToolResult) shellResult {
	t.Helper()
	data, _ := json.Marshal(res.StructuredContent)
	var out shellResult
	if err := json.Unmarshal(data, &out); err != nil || res.StructuredContent == nil {
		t.Fatalf("no structured result: %s %v (%s)", data, err, text(res))
	}
	return out
}

func TestBuiltinShell(t *testing.T) {
	cfg := gateway.Config{Builtins: gateway.BuiltinsConfig{Shell: gateway.ShellConfig{Mode: "allowlist", Allowed: []string{"echo", "pwd", "touch"}}}}
	cfg.LiveWrites.Tools = []string{"builtin/shell"}
	h := shellHarness(t, cfg, []string{})
	alice := h.client("assistant", aliceKey)
	if names := toolNames(t, alice); !strings.Contains(strings.Join(names, ","), "shell") {
		t.Fatalf("tools/list: %v", names)
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		ok   bool
		code string // the shell's error code
		out  string
	}{
		{"allowed", map[string]any{"cmd": "echo hello world"}, true, "", "hello world"},
		{"in a subdirectory", map[string]any{"cmd": "pwd", "cwd": "work"}, true, "", "/work"},
		{"outside the project", map[string]any{"cmd": "pwd", "cwd": "../.."}, false, "cwd", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := callTool(t, alice, "shell", tc.args)
			got := structured(t, res)
			code := ""
			if got.Error != nil {
				code = got.Error.Code
			}
			if got.OK != tc.ok || res.IsError == tc.ok || code != tc.code || !strings.Contains(got.Output, tc.out) {
				t.Fatalf("%+v isError=%v %q", got, res.IsError, text(res))
			}
		})
	}
	// Commands the shell refuses are denied by the decision, with the shell's reason.
	for _, tc := range []struct{ cmd, reason string }{
		{"rm -rf work", `not_allowed: "rm" is not allowed; allowed: echo, pwd, touch`},
		{"echo x; rm -rf work", "syntax: at byte 6: ';' is shell syntax"},
	} {
		res := callTool(t, alice, "shell", map[string]any{"cmd": tc.cmd})
		if !res.IsError || !strings.Contains(text(res), "Lush denied this call: builtin/shell refuses these arguments: "+tc.reason) {
			t.Errorf("%s: %s", tc.cmd, text(res))
		}
	}
	if _, err := os.Stat(filepath.Join(h.dir, "work")); err != nil {
		t.Fatal("a refused command ran")
	}
	// Arguments that do not match the tool's schema never reach the shell.
	res := callTool(t, alice, "shell", map[string]any{"cmd": 5})
	if !res.IsError || !strings.Contains(text(res), "lush.schema.invalid_arguments") && !strings.Contains(text(res), "input schema") {
		t.Errorf("bad arguments: %s", text(res))
	}
	// Every command is in the log: allowed by the decision, with its exit code, duration and
	// truncation flag in the completion.
	recs := h.events(decisionlog.Filter{Tool: "builtin/shell", Action: "tools/call"})
	var ran int
	for _, r := range recs {
		if r.Completion == nil {
			continue
		}
		ran++
		var body struct {
			StructuredContent map[string]any `json:"structuredContent"`
		}
		json.Unmarshal(r.Completion.Response, &body)
		for _, k := range []string{"exitCode", "durationMs", "truncated"} {
			if _, ok := body.StructuredContent[k]; !ok {
				t.Errorf("completion of %s lacks %s: %s", r.Event.DecisionID, k, r.Completion.Response)
			}
		}
	}
	if ran != 3 {
		t.Errorf("%d completed shell calls in the log, want 3", ran)
	}
}

// TestBuiltinShellIsAWrite: without live writes the command is stubbed, and by default (a
// destructive tool) it needs an approval; either way nothing runs.
func TestBuiltinShellIsAWrite(t *testing.T) {
	shellCfg := gateway.ShellConfig{Mode: "allowlist", Allowed: []string{"touch"}}
	for _, tc := range []struct {
		name      string
		live      bool
		approvals []string
		want      string
	}{
		{"stubbed", false, []string{}, "NOT executed"},
		{"approval", true, nil, "approval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := gateway.Config{Builtins: gateway.BuiltinsConfig{Shell: shellCfg}}
			if tc.live {
				cfg.LiveWrites.Tools = []string{"builtin/shell"}
			}
			h := shellHarness(t, cfg, tc.approvals)
			res := callTool(t, h.client("assistant", aliceKey), "shell", map[string]any{"cmd": "touch created"})
			if !strings.Contains(text(res), tc.want) {
				t.Errorf("%s", text(res))
			}
			if _, err := os.Stat(filepath.Join(h.dir, "created")); err == nil {
				t.Error("the command ran")
			}
		})
	}
}

// approvalShellHarness serves builtin/shell live, allowing touch, with approvals of destructive
// calls (the default) kept in store.
func approvalShellHarness(t *testing.T) (h *harness, store *decisionlog.Approvals) {
	t.Helper()
	cfg := gateway.Config{Builtins: gateway.BuiltinsConfig{Shell: gateway.ShellConfig{Mode: "allowlist", Allowed: []string{"touch"}}},
		Approvals: approval.Config{Wait: 20 * time.Second, Poll: 10 * time.Millisecond}}
	cfg.LiveWrites.Tools = []string{"builtin/shell"}
	h = shellHarness(t, cfg, nil, func(o *gateway.Options) {
		var err error
		if store, err = decisionlog.OpenApprovals(o.Policy.Log().Path()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		o.Approvals = store
	})
	return h, store
}

// callAwaitingApproval starts a shell call of cmd that waits for a person, and returns the
// approval it waits on and where its result will come.
func callAwaitingApproval(t *testing.T, h *harness, store *decisionlog.Approvals, cmd string) (decisionlog.Approval, <-chan *mcp.CallToolResult) {
	t.Helper()
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		done <- callTool(t, h.client("assistant", aliceKey), "shell", map[string]any{"cmd": cmd})
	}()
	var pending []decisionlog.Approval
	for deadline := time.Now().Add(10 * time.Second); len(pending) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var err error
		if pending, err = store.List(context.Background(), decisionlog.ApprovalFilter{Status: decisionlog.ApprovalPending}); err != nil {
			t.Fatal(err)
		}
	}
	if len(pending) != 1 || pending[0].Tool != "builtin/shell" || pending[0].Principal != "user:alice" {
		t.Fatalf("pending approvals: %+v", pending)
	}
	return pending[0], done
}

// TestBuiltinShellApproved: the shell's command waits for a person and, approved, runs (live
// writes on), under a decision that names the approver.
func TestBuiltinShellApproved(t *testing.T) {
	h, store := approvalShellHarness(t)
	pending, done := callAwaitingApproval(t, h, store, "touch created")
	if _, err := os.Stat(filepath.Join(h.dir, "created")); err == nil {
		t.Fatal("the command ran before it was approved")
	}
	if _, err := store.Decide(context.Background(), pending.ID, true, "user:bob", "fine", "d-1"); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if got := structured(t, res); !got.OK {
		t.Fatalf("the approved command: %s", text(res))
	}
	if _, err := os.Stat(filepath.Join(h.dir, "created")); err != nil {
		t.Errorf("the approved command did not run: %v", err)
	}
	h.log.Sync(context.Background())
	recs, _ := h.log.Query(context.Background(), decisionlog.Filter{Tool: "builtin/shell", Outcome: "allow"})
	if len(recs) != 1 || !slices.Contains(recs[0].Event.Rules, "lush.approval.granted") {
		t.Errorf("the decision the command ran under: %+v", recs)
	}
}

// TestBuiltinShellRefusedBeforeApproval: a command the shell's allowlist (or mode, or syntax)
// refuses is denied by its decision at once, with the shell's reason, and no person is asked to
// approve it; a command the allowlist admits still waits for an approval.
func TestBuiltinShellRefusedBeforeApproval(t *testing.T) {
	h, store := approvalShellHarness(t)
	for _, tc := range []struct{ cmd, reason string }{
		{"rm -rf work", `not_allowed: "rm" is not allowed; allowed: touch`},
		{"touch a; rm -rf work", "syntax: at byte 7: ';' is shell syntax"},
	} {
		res := callTool(t, h.client("assistant", aliceKey), "shell", map[string]any{"cmd": tc.cmd})
		if !res.IsError || !strings.Contains(text(res), "Lush denied this call: builtin/shell refuses these arguments: "+tc.reason) {
			t.Errorf("%s: %s", tc.cmd, text(res))
		}
	}
	if all, err := store.List(context.Background(), decisionlog.ApprovalFilter{}); err != nil || len(all) != 0 {
		t.Fatalf("approvals of refused commands: %+v %v", all, err)
	}
	var outcomes []string
	for _, r := range h.events(decisionlog.Filter{Tool: "builtin/shell", Action: "tools/call"}) {
		outcomes = append(outcomes, r.Event.Outcome+":"+strings.Join(r.Event.Rules, ","))
	}
	if want := []string{"deny:lush.tool.refused", "deny:lush.tool.refused"}; !slices.Equal(outcomes, want) {
		t.Errorf("logged = %v, want %v", outcomes, want)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "work")); err != nil {
		t.Fatal("a refused command ran")
	}

	// An allowed command asks; denied by the person, it does not run.
	pending, done := callAwaitingApproval(t, h, store, "touch created")
	if _, err := store.Decide(context.Background(), pending.ID, false, "user:bob", "no", "d-1"); err != nil {
		t.Fatal(err)
	}
	if res := <-done; !res.IsError {
		t.Errorf("the command denied by a person: %s", text(res))
	}
	if _, err := os.Stat(filepath.Join(h.dir, "created")); err == nil {
		t.Error("the command ran although a person denied it")
	}
}

func TestBuiltinShellConfig(t *testing.T) {
	t.Setenv("SHELL_TOOL_MODE", "off")
	cfg := gateway.Config{Builtins: gateway.BuiltinsConfig{Shell: gateway.ShellConfig{Mode: "full"}}}
	cfg.LiveWrites.Tools = []string{"builtin/shell"}
	h := shellHarness(t, cfg, []string{})
	if res := callTool(t, h.client("assistant", aliceKey), "shell", map[string]any{"cmd": "echo x"}); !res.IsError ||
		!strings.Contains(text(res), "builtin/shell refuses these arguments: disabled: the shell tool is off") {
		t.Errorf("SHELL_TOOL_MODE=off: %s", text(res))
	}
	t.Setenv("SHELL_TOOL_MODE", "sometimes")
	auth, err := identity.New(context.Background(), identity.Config{APIKeys: []identity.APIKeyConfig{{Name: "a", SHA256: sha(aliceKey), Principal: "user:alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()
	if _, err := gateway.New(cfg, gateway.Options{Policy: enforce.NewPolicy(enforce.Config{Log: h.log}), Auth: auth}); err == nil || !strings.Contains(err.Error(), "SHELL_TOOL_MODE") {
		t.Errorf("a bad SHELL_TOOL_MODE: %v", err)
	}
}

// TestBuiltinFileTools: the file tools work inside the paths the agent's allowlist gives each of
// them and refuse everything else; file_write is a write (live here).
func TestBuiltinFileTools(t *testing.T) {
	url, rec := mcpserver.StartRecordedHTTP(t.Cleanup)
	h := &harness{t: t, rec: rec, url: url}
	extra := ""
	for _, g := range []string{"file_read read", "file_write write", "file_list read"} {
		name, access, _ := strings.Cut(g, " ")
		extra += "  - tool: builtin/" + name + "\n    grants:\n      - {principal: group:eng, access: " + access + "}\n"
	}
	h.dir = project(t, url, extra)
	p := filepath.Join(h.dir, "agents/assistant/spec.yaml")
	spec, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.Replace(string(spec), "acl:\n", `  - name: builtin/file_read
    access: read
    paths: [data]
  - name: builtin/file_write
    access: write
    paths: [drafts]
  - name: builtin/file_list
    access: read
    paths: [data]
acl:
`, 1)), 0o644)
	for rel, content := range map[string]string{"data/q3.md": "revenue +4%", "secret/key.txt": "s3cr3t"} {
		os.MkdirAll(filepath.Join(h.dir, filepath.Dir(rel)), 0o755)
		os.WriteFile(filepath.Join(h.dir, rel), []byte(content), 0o644)
	}
	os.Symlink(filepath.Join(h.dir, "secret"), filepath.Join(h.dir, "data", "linked"))
	cfg := gateway.Config{}
	cfg.LiveWrites.Tools = []string{"builtin/file_write"}
	h.serve(cfg)
	alice := h.client("assistant", aliceKey)
	for _, tc := range []struct {
		tool string
		args map[string]any
		ok   bool
		want string // in the text
	}{
		{"file_read", map[string]any{"path": "data/q3.md"}, true, "revenue +4%"},
		{"file_read", map[string]any{"path": "secret/key.txt"}, false, "outside"},
		{"file_read", map[string]any{"path": "data/linked/key.txt"}, false, "outside"},
		{"file_read", map[string]any{"path": "data/../secret/key.txt"}, false, "invalid_path"},
		{"file_read", map[string]any{"path": "/etc/nonexistent-lush-test"}, false, "outside"}, // as /etc/passwd: existence is not told
		{"file_read", map[string]any{"path": "secret/missing.txt"}, false, "outside"},
		{"file_list", map[string]any{"path": "data"}, true, "q3.md"},
		{"file_list", map[string]any{"path": "."}, false, "outside"},
		{"file_write", map[string]any{"path": "drafts/digest.md", "content": "Q3: +4%"}, true, "wrote drafts/digest.md"},
		{"file_write", map[string]any{"path": "data/q3.md", "content": "changed"}, false, "outside"},
	} {
		res := callTool(t, alice, tc.tool, tc.args)
		if res.IsError == tc.ok || !strings.Contains(text(res), tc.want) || strings.Contains(text(res), "s3cr3t") {
			t.Errorf("%s %v: isError=%v %q", tc.tool, tc.args, res.IsError, text(res))
		}
	}
	if data, err := os.ReadFile(filepath.Join(h.dir, "drafts/digest.md")); err != nil || string(data) != "Q3: +4%" {
		t.Errorf("the written file: %q %v", data, err)
	}
	if data, _ := os.ReadFile(filepath.Join(h.dir, "data/q3.md")); string(data) != "revenue +4%" {
		t.Error("a file outside file_write's paths was changed")
	}
}
