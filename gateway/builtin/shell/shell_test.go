package shell

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// workspace makes a root with a subdirectory, a file, a symlink that stays inside and one that
// escapes to a directory outside.
func workspace(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(root, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello\n"), 0o644)
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("outside\n"), 0o644)
	os.Symlink(filepath.Join(root, "sub"), filepath.Join(root, "inside-link"))
	os.Symlink(outside, filepath.Join(root, "escape"))
	return root, outside
}

func TestRun(t *testing.T) {
	root, outside := workspace(t)
	allow := Config{Mode: ModeAllowlist, Allowed: []string{"echo", "ls", "cat hello.txt", "pwd", "sleep", "env"}, Roots: []string{root}}
	full := Config{Mode: ModeFull, Roots: []string{root}}
	for _, tc := range []struct {
		name   string
		cfg    Config
		req    Request
		ok     bool
		code   string // Error.Code, "" when the command ran
		output string // part of the output
	}{
		{"allowed", allow, Request{Cmd: "echo hello world"}, true, "", "hello world\n"},
		{"allowed prefix with more arguments", allow, Request{Cmd: "ls -1"}, true, "", "hello.txt"},
		{"quoted argument", allow, Request{Cmd: `echo "a  b" 'c;d'`}, true, "", "a  b c;d\n"},
		{"multi-token prefix", allow, Request{Cmd: "cat hello.txt"}, true, "", "hello\n"},
		{"multi-token prefix, other argument", allow, Request{Cmd: "cat /etc/passwd"}, false, "not_allowed", ""},
		{"blocked", allow, Request{Cmd: "rm -rf /"}, false, "not_allowed", ""},
		{"prefix is a token, not a string prefix", allow, Request{Cmd: "echoo x"}, false, "not_allowed", ""},
		{"a path is not the allowed name", allow, Request{Cmd: "/bin/echo x"}, false, "not_allowed", ""},
		{"injection: list", allow, Request{Cmd: "echo x; rm -rf /"}, false, "syntax", ""},
		{"injection: and", allow, Request{Cmd: "echo x && rm -rf /"}, false, "syntax", ""},
		{"injection: pipe", allow, Request{Cmd: "echo x | sh"}, false, "syntax", ""},
		{"injection: substitution", allow, Request{Cmd: "echo $(id)"}, false, "syntax", ""},
		{"injection: backticks", allow, Request{Cmd: "echo `id`"}, false, "syntax", ""},
		{"injection: newline", allow, Request{Cmd: "echo x\nrm -rf /"}, false, "syntax", ""},
		{"injection: redirect", allow, Request{Cmd: "echo x > hello.txt"}, false, "syntax", ""},
		{"quoted operators are plain text", allow, Request{Cmd: `echo 'x; rm -rf /'`}, true, "", "x; rm -rf /\n"},
		{"exit code", full, Request{Cmd: "ls no-such-file"}, false, "", "no-such-file"},
		{"not found", full, Request{Cmd: "no-such-command-lush"}, false, "not_found", ""},
		{"off", Config{Mode: ModeOff}, Request{Cmd: "echo x"}, false, "disabled", ""},
		{"cwd inside", allow, Request{Cmd: "pwd", Cwd: "sub"}, true, "", filepath.Join("ws", "sub")},
		{"cwd through a symlink that stays inside", allow, Request{Cmd: "pwd", Cwd: "inside-link"}, true, "", filepath.Join("ws", "sub")},
		{"cwd ..", allow, Request{Cmd: "pwd", Cwd: "../outside"}, false, "cwd", ""},
		{"cwd absolute outside", allow, Request{Cmd: "pwd", Cwd: outside}, false, "cwd", ""},
		{"cwd sub/../..", allow, Request{Cmd: "pwd", Cwd: "sub/../.."}, false, "cwd", ""},
		{"cwd symlink escape", allow, Request{Cmd: "pwd", Cwd: "escape"}, false, "cwd", ""},
		{"cwd missing", allow, Request{Cmd: "pwd", Cwd: "nope"}, false, "cwd", ""},
		{"cwd is a file", allow, Request{Cmd: "pwd", Cwd: "hello.txt"}, false, "cwd", ""},
		{"empty", allow, Request{Cmd: "  "}, false, "syntax", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.cfg.Run(context.Background(), tc.req)
			code := ""
			if res.Error != nil {
				code = res.Error.Code
			}
			if res.OK != tc.ok || code != tc.code || !strings.Contains(res.Output, tc.output) {
				t.Fatalf("%+v (error %+v)", res, res.Error)
			}
			if res.Error != nil && res.Error.Message == "" {
				t.Error("an error without a message")
			}
		})
	}
}

// refusals are command lines and how a configuration refuses them ("" code: it may run).
var refusals = []struct {
	name string
	cfg  Config
	cmd  string
	code string
	msg  string // the whole message
}{
	{"another subcommand", gitLs, "git log --oneline", "not_allowed", `"git log" is not allowed; allowed: git status, ls, echo 'a b'`},
	{"too short for its prefix", gitLs, "git", "not_allowed", `"git" is not allowed; allowed: git status, ls, echo 'a b'`},
	{"another command", gitLs, "rm -rf /", "not_allowed", `"rm" is not allowed; allowed: git status, ls, echo 'a b'`},
	{"an argument with a space", gitLs, "echo 'a c'", "not_allowed", `"echo 'a c'" is not allowed; allowed: git status, ls, echo 'a b'`},
	{"an empty argument", gitLs, "echo ''", "not_allowed", `"echo ''" is not allowed; allowed: git status, ls, echo 'a b'`},
	{"a long argument is cut", gitLs, "git " + strings.Repeat("x", 1000), "not_allowed", `"git ` + strings.Repeat("x", 64) + `…" is not allowed; allowed: git status, ls, echo 'a b'`},
	{"allowed", gitLs, "git status --short", "", ""},
	{"allowed with quotes", gitLs, "echo 'a b' c", "", ""},
	{"syntax", gitLs, "ls; rm -rf /", "syntax", `at byte 2: ';' is shell syntax, and commands run without a shell: run one command, and quote the character if it is part of an argument`},
	{"off", Config{Mode: ModeOff}, "ls", "disabled", "the shell tool is off"},
	{"unset mode is off", Config{}, "ls", "disabled", "the shell tool is off"},
	{"full", Config{Mode: ModeFull}, "rm -rf /", "", ""},
}

var gitLs = Config{Mode: ModeAllowlist, Allowed: []string{"git status", "ls", "echo 'a b'"}}

// TestRefusedMessage: a refused command's message says exactly which part was refused and what
// is allowed.
func TestRefusedMessage(t *testing.T) {
	for _, tc := range refusals {
		if tc.code == "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			res := tc.cfg.Run(context.Background(), Request{Cmd: tc.cmd})
			if res.OK || res.ExitCode != -1 || res.Error == nil || res.Error.Code != tc.code || res.Error.Message != tc.msg {
				t.Fatalf("Run = %+v %+v\nwant %s: %s", res, res.Error, tc.code, tc.msg)
			}
		})
	}
	// What a refusal quotes splits back into the arguments it shows.
	if argv, err := Split(gitLs.refused([]string{"echo", "it's a \"b\""})); err != nil || !slices.Equal(argv, []string{"echo", "it's a \"b\""}) {
		t.Errorf("the refused part does not split back: %q %v", argv, err)
	}
}

// TestRefusal: Refusal refuses what Run refuses, with the same error, looking at nothing but the
// command line.
func TestRefusal(t *testing.T) {
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.cfg.Refusal(tc.cmd)
			if tc.code == "" && got != nil || tc.code != "" && (got == nil || got.Code != tc.code || got.Message != tc.msg) {
				t.Fatalf("Refusal = %+v, want %q: %s", got, tc.code, tc.msg)
			}
		})
	}
}

func TestTimeoutKillsTheProcessGroup(t *testing.T) {
	root, _ := workspace(t)
	pidFile := filepath.Join(root, "child.pid")
	c := Config{Mode: ModeFull, Roots: []string{root}, MaxTimeout: time.Second}
	// sh starts a background child that outlives it unless the whole group is killed.
	start := time.Now()
	res := c.Run(context.Background(), Request{Cmd: `sh -c 'sleep 30 & echo $! > child.pid; echo started; sleep 30'`, TimeoutMs: 300})
	if !res.TimedOut || res.Error == nil || res.Error.Code != "timeout" || !strings.Contains(res.Output, "started") {
		t.Fatalf("%+v %+v", res, res.Error)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("took %s", elapsed)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, c := range strings.TrimSpace(string(data)) {
		pid = pid*10 + int(c-'0')
	}
	deadline := time.Now().Add(2 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the background child %d is still running", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A request cannot ask for more than MaxTimeout.
	res = c.Run(context.Background(), Request{Cmd: "sleep 5", TimeoutMs: 60000})
	if !res.TimedOut || res.DurationMs > 3000 {
		t.Errorf("MaxTimeout not applied: %+v", res)
	}
}

func TestOutputTruncated(t *testing.T) {
	root, _ := workspace(t)
	c := Config{Mode: ModeFull, Roots: []string{root}, MaxOutputLimit: 100}
	res := c.Run(context.Background(), Request{Cmd: `sh -c 'i=0; while [ $i -lt 1000 ]; do echo "ééééé $i"; i=$((i+1)); done'`, MaxOutputChars: 50})
	if !res.OK || !res.Truncated || res.OutputSize < 10000 || !strings.Contains(res.Output, "[output truncated: ") {
		t.Fatalf("%+v", res)
	}
	kept, _, _ := strings.Cut(res.Output, "\n[output truncated")
	if len(kept) > 50 || !strings.HasPrefix(kept, "ééééé 0") || !utf8ValidString(kept) {
		t.Errorf("kept %q", kept)
	}
	// The request's size is capped by MaxOutputLimit.
	res = c.Run(context.Background(), Request{Cmd: `sh -c 'head -c 5000 /dev/zero | tr "\0" x'`, MaxOutputChars: 1 << 20})
	if kept, _, _ := strings.Cut(res.Output, "\n[output"); len(kept) != 100 || !res.Truncated {
		t.Errorf("limit not capped: %d bytes kept", len(kept))
	}
}

func utf8ValidString(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// TestEnvironmentIsNotInherited: credentials in the server's environment never reach commands.
func TestEnvironmentIsNotInherited(t *testing.T) {
	root, _ := workspace(t)
	t.Setenv("VAULT_TOKEN", "hvs.super-secret-token")
	c := Config{Mode: ModeAllowlist, Allowed: []string{"env"}, Roots: []string{root}}
	res := c.Run(context.Background(), Request{Cmd: "env"})
	if !res.OK || strings.Contains(res.Output, "super-secret") || !strings.Contains(res.Output, "PATH=") {
		t.Fatalf("%+v", res)
	}
}

func TestCancel(t *testing.T) {
	root, _ := workspace(t)
	c := Config{Mode: ModeFull, Roots: []string{root}}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res := c.Run(ctx, Request{Cmd: "sleep 10"})
	if res.OK || res.Error == nil || res.Error.Code != "cancelled" {
		t.Fatalf("%+v %+v", res, res.Error)
	}
}

func TestFromEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	base := Config{Mode: ModeOff}
	c, err := FromEnv(env(map[string]string{"SHELL_TOOL_MODE": "allowlist", "SHELL_TOOL_ALLOWED_PREFIXES": "git status, ls ,",
		"SHELL_TOOL_TIMEOUT_MS": "1500", "SHELL_TOOL_MAX_OUTPUT_CHARS": "2000"}), base)
	if err != nil || c.Mode != ModeAllowlist || !slices.Equal(c.Allowed, []string{"git status", "ls"}) || c.Timeout != 1500*time.Millisecond || c.MaxOutput != 2000 {
		t.Fatalf("%+v %v", c, err)
	}
	if c, err := FromEnv(env(map[string]string{"SHELL_TOOL_MODE": "full", "SHELL_TOOL_ENABLED": "false"}), base); err != nil || c.Mode != ModeOff {
		t.Errorf("enabled=false: %+v %v", c, err)
	}
	for _, bad := range []map[string]string{
		{"SHELL_TOOL_MODE": "sometimes"},
		{"SHELL_TOOL_ENABLED": "yes please"},
		{"SHELL_TOOL_TIMEOUT_MS": "-5"},
		{"SHELL_TOOL_MAX_OUTPUT_CHARS": "lots"},
		{"SHELL_TOOL_MODE": "allowlist"},
		{"SHELL_TOOL_MODE": "allowlist", "SHELL_TOOL_ALLOWED_PREFIXES": "echo;x"},
	} {
		if _, err := FromEnv(env(bad), base); err == nil {
			t.Errorf("%v: accepted", bad)
		} else {
			for k := range bad {
				if strings.HasPrefix(k, "SHELL_TOOL_") && !strings.Contains(err.Error(), "SHELL_TOOL_") && !strings.Contains(err.Error(), "mode") && !strings.Contains(err.Error(), "prefix") {
					t.Errorf("%v: %v does not say what is wrong", bad, err)
				}
			}
		}
	}
}
