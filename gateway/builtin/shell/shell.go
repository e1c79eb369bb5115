// Package shell runs commands for Lush's built-in shell tool (seed 001). A command line is split
// into arguments (Split) and executed without a shell, under a mode (off, allowlist, full): in
// allowlist mode its leading arguments must equal one of the allowed prefixes, token by token,
// so `echo x; rm -rf /` cannot pass an `echo` allowlist. Its working directory must resolve,
// symlinks followed, inside one of the configured roots (real paths are compared, not strings).
// A hard timeout kills the whole process group; output is bounded and truncated with a marker;
// the environment is the configured one only, never the server's (which holds credentials).
// Every outcome, failures included, is a Result the model can read.
package shell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// Mode says which commands may run.
type Mode string

const (
	ModeOff       Mode = "off"       // none
	ModeAllowlist Mode = "allowlist" // those that start with an allowed prefix
	ModeFull      Mode = "full"      // any (for a developer's own machine)
)

// Defaults and bounds.
const (
	DefaultTimeout   = 30 * time.Second
	DefaultMaxOutput = 16 << 10
	// waitDelay bounds how long Run waits for the output pipes after the process is killed (a
	// grandchild that left the process group may hold them open).
	waitDelay = 2 * time.Second
)

// Config is the shell tool's configuration.
type Config struct {
	Mode Mode
	// Allowed are the command prefixes allowlist mode accepts, each split like a command line:
	// "git status" allows `git status --short` but not `git push`.
	Allowed []string
	// Roots confine working directories: a cwd must resolve (symlinks followed) to a root or
	// below one. Empty: any directory.
	Roots []string
	// Dir is the working directory when a request names none (default: the first root), and
	// what a relative cwd is relative to.
	Dir string
	// Timeout is the default and MaxTimeout the most a request may ask for.
	Timeout, MaxTimeout time.Duration
	// MaxOutput is the default and MaxOutputLimit the most output (bytes) a request may ask for.
	MaxOutput, MaxOutputLimit int
	// Env is the commands' whole environment (default: PATH=/usr/local/bin:/usr/bin:/bin,
	// LANG=C.UTF-8). The server's own environment is never passed on.
	Env []string
}

// Request is the tool's input.
type Request struct {
	Cmd            string `json:"cmd"`
	Cwd            string `json:"cwd,omitempty"`
	TimeoutMs      int    `json:"timeoutMs,omitempty"`
	MaxOutputChars int    `json:"maxOutputChars,omitempty"`
}

// Result is the tool's output. Error is set when the command did not run to an exit (refused,
// not found, timed out); a command that ran and failed has OK false and its exit code.
type Result struct {
	OK         bool   `json:"ok"`
	ExitCode   int    `json:"exitCode"`
	Output     string `json:"output"` // stdout and stderr, interleaved as written
	Truncated  bool   `json:"truncated"`
	OutputSize int    `json:"outputBytes"` // the whole output's size, also when truncated
	DurationMs int64  `json:"durationMs"`
	TimedOut   bool   `json:"timedOut,omitempty"`
	Error      *Error `json:"error,omitempty"`
}

// Error is why a command did not run, or did not finish.
type Error struct {
	Code    string `json:"code"` // disabled, syntax, not_allowed, cwd, not_found, timeout, start
	Message string `json:"message"`
}

func failed(code, format string, args ...any) Result {
	return Result{ExitCode: -1, Error: &Error{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// Check validates the configuration.
func (c *Config) Check() error {
	var problems []string
	switch c.Mode {
	case ModeOff, ModeFull:
	case ModeAllowlist:
		if len(c.Allowed) == 0 {
			problems = append(problems, "mode allowlist needs at least one allowed prefix")
		}
	default:
		problems = append(problems, fmt.Sprintf("mode must be off, allowlist or full, not %q", c.Mode))
	}
	for _, p := range c.Allowed {
		if _, err := Split(p); err != nil {
			problems = append(problems, fmt.Sprintf("allowed prefix %q: %v", p, err))
		}
	}
	for _, r := range c.Roots {
		if !filepath.IsAbs(r) {
			problems = append(problems, fmt.Sprintf("root %q is not an absolute path", r))
		}
	}
	if c.Timeout < 0 || c.MaxTimeout < 0 || c.MaxOutput < 0 || c.MaxOutputLimit < 0 {
		problems = append(problems, "timeouts and output limits must not be negative")
	}
	if len(problems) > 0 {
		return errors.New("shell tool: " + strings.Join(problems, "; "))
	}
	return nil
}

// FromEnv applies the SHELL_TOOL_* variables of seed 001 to base: SHELL_TOOL_ENABLED
// (true|false; false is mode off), SHELL_TOOL_MODE (off|allowlist|full), SHELL_TOOL_TIMEOUT_MS,
// SHELL_TOOL_MAX_OUTPUT_CHARS and SHELL_TOOL_ALLOWED_PREFIXES (comma-separated). A malformed
// value is an error naming the variable.
func FromEnv(getenv func(string) string, base Config) (Config, error) {
	c := base
	if v := getenv("SHELL_TOOL_MODE"); v != "" {
		c.Mode = Mode(strings.ToLower(strings.TrimSpace(v)))
		if !slices.Contains([]Mode{ModeOff, ModeAllowlist, ModeFull}, c.Mode) {
			return base, fmt.Errorf("SHELL_TOOL_MODE: %q is not off, allowlist or full", v)
		}
	}
	if v := getenv("SHELL_TOOL_ENABLED"); v != "" {
		on, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return base, fmt.Errorf("SHELL_TOOL_ENABLED: %q is not true or false", v)
		}
		if !on {
			c.Mode = ModeOff
		}
	}
	for _, n := range []struct {
		name string
		set  func(int)
	}{
		{"SHELL_TOOL_TIMEOUT_MS", func(ms int) { c.Timeout = time.Duration(ms) * time.Millisecond }},
		{"SHELL_TOOL_MAX_OUTPUT_CHARS", func(n int) { c.MaxOutput = n }},
	} {
		if v := getenv(n.name); v != "" {
			i, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || i <= 0 {
				return base, fmt.Errorf("%s: %q is not a positive whole number", n.name, v)
			}
			n.set(i)
		}
	}
	if v := getenv("SHELL_TOOL_ALLOWED_PREFIXES"); v != "" {
		c.Allowed = nil
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.Allowed = append(c.Allowed, p)
			}
		}
	}
	if err := c.Check(); err != nil {
		return base, err
	}
	return c, nil
}

// Refusal is why the configuration refuses a command line before anything runs: the shell is
// off (disabled), the line does not split into arguments (syntax), or the allowlist does not
// admit it (not_allowed); nil when it may run. It looks at nothing but the line and the
// configuration, so a gateway can ask before deciding a call, and deny a command that could never
// run instead of asking a person to approve it first. Run refuses the same commands.
func (c *Config) Refusal(cmd string) *Error {
	_, refusal := c.admit(cmd)
	return refusal
}

// admit splits a command line into its arguments, or says why the configuration refuses it.
func (c *Config) admit(cmd string) ([]string, *Error) {
	if c.Mode == ModeOff || c.Mode == "" {
		return nil, &Error{Code: "disabled", Message: "the shell tool is off"}
	}
	argv, err := Split(cmd)
	if err != nil {
		return nil, &Error{Code: "syntax", Message: err.Error()}
	}
	if c.Mode == ModeAllowlist && !c.allowed(argv) {
		return nil, &Error{Code: "not_allowed", Message: fmt.Sprintf("%q is not allowed; allowed: %s", c.refused(argv), strings.Join(c.Allowed, ", "))}
	}
	return argv, nil
}

// Run runs one request. It never returns an error: every failure is a Result.
func (c *Config) Run(ctx context.Context, req Request) Result {
	argv, refusal := c.admit(req.Cmd)
	if refusal != nil {
		return Result{ExitCode: -1, Error: refusal}
	}
	dir, err := c.workdir(req.Cwd)
	if err != nil {
		return failed("cwd", "%v", err)
	}
	env := c.Env
	if env == nil {
		env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
	}
	path, err := lookPath(argv[0], dir, env)
	if err != nil {
		return failed("not_found", "%v", err)
	}
	timeout := bounded(time.Duration(req.TimeoutMs)*time.Millisecond, c.Timeout, DefaultTimeout, c.MaxTimeout)
	limit := int(bounded(time.Duration(req.MaxOutputChars), time.Duration(c.MaxOutput), DefaultMaxOutput, time.Duration(c.MaxOutputLimit)))

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Dir, cmd.Env = dir, env
	out := &boundedBuffer{limit: limit}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, killed whole: a command's children die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	start := time.Now()
	err = cmd.Run()
	if cmd.Process != nil {
		// What the command left running in its group (background children) goes with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	res := Result{DurationMs: time.Since(start).Milliseconds(), OutputSize: out.total}
	res.Output, res.Truncated = out.text()
	var exit *exec.ExitError
	switch {
	case runCtx.Err() == context.DeadlineExceeded:
		res.ExitCode, res.TimedOut = -1, true
		res.Error = &Error{Code: "timeout", Message: fmt.Sprintf("killed after %s (the timeout); its output so far is kept", timeout)}
	case ctx.Err() != nil:
		res.ExitCode = -1
		res.Error = &Error{Code: "cancelled", Message: "the call was cancelled"}
	case errors.As(err, &exit):
		res.ExitCode = exit.ExitCode()
	case errors.Is(err, exec.ErrWaitDelay): // it exited; something it started kept the output open
		res.ExitCode, res.OK = cmd.ProcessState.ExitCode(), cmd.ProcessState.Success()
	case err != nil:
		res.ExitCode = -1
		res.Error = &Error{Code: "start", Message: fmt.Sprintf("could not run %s: %v", argv[0], err)}
	default:
		res.OK = true
	}
	return res
}

// allowed reports whether argv starts with an allowed prefix, token by token.
func (c *Config) allowed(argv []string) bool {
	for _, p := range c.Allowed {
		prefix, err := Split(p)
		if err == nil && len(prefix) <= len(argv) && slices.Equal(prefix, argv[:len(prefix)]) {
			return true
		}
	}
	return false
}

// maxShownArg bounds each argument a refusal shows.
const maxShownArg = 64

// refused is the part of argv the allowlist refuses, as a command line: its arguments up to and
// including the first one that no allowed prefix matches there (all of argv when it is shorter
// than the prefixes it matches), each bounded. With "git status" allowed, `git log --oneline` is
// refused as "git log", and `git` alone as "git".
func (c *Config) refused(argv []string) string {
	matched := 0
	for _, p := range c.Allowed {
		prefix, err := Split(p)
		if err != nil {
			continue
		}
		n := 0
		for n < len(prefix) && n < len(argv) && prefix[n] == argv[n] {
			n++
		}
		matched = max(matched, n)
	}
	shown := make([]string, 0, matched+1)
	for _, a := range argv[:min(matched+1, len(argv))] {
		shown = append(shown, quoteArg(boundedArg(a)))
	}
	return strings.Join(shown, " ")
}

// boundedArg cuts an argument to maxShownArg bytes (at a rune boundary), marking the cut.
func boundedArg(a string) string {
	if len(a) <= maxShownArg {
		return a
	}
	i := maxShownArg
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	return a[:i] + "…"
}

// quoteArg writes an argument so that Split reads it back: as it is when it needs no quotes,
// else in single quotes.
func quoteArg(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t'\"\\"+operators) {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// workdir resolves a request's cwd (relative to Dir) to a real directory inside a root.
func (c *Config) workdir(cwd string) (string, error) {
	base := c.Dir
	if base == "" && len(c.Roots) > 0 {
		base = c.Roots[0]
	}
	dir := cwd
	switch {
	case dir == "" && base == "":
		return "", errors.New("no working directory: give cwd")
	case dir == "":
		dir = base
	case !filepath.IsAbs(dir):
		if base == "" {
			return "", fmt.Errorf("cwd %q is relative and there is no workspace to resolve it in", cwd)
		}
		dir = filepath.Join(base, dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("cwd %q does not exist", cwd)
		}
		return "", fmt.Errorf("cwd %q: %v", cwd, err)
	}
	if info, err := os.Stat(real); err != nil || !info.IsDir() {
		return "", fmt.Errorf("cwd %q is not a directory", cwd)
	}
	if len(c.Roots) == 0 {
		return real, nil
	}
	for _, root := range c.Roots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(r, real); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return real, nil
		}
	}
	return "", fmt.Errorf("cwd %q is outside the workspace (it resolves to %s; allowed: %s)", cwd, real, strings.Join(c.Roots, ", "))
}

// lookPath finds argv[0] on the commands' PATH (not the server's); a name with a slash is
// taken relative to dir.
func lookPath(name, dir string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if info, err := os.Stat(p); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not an executable file", name)
		}
		return p, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if info, err := os.Stat(p); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found on PATH %s", name, path)
}

// bounded picks asked (or def, or fallback) and caps it at max when max is set.
func bounded(asked, def, fallback, max time.Duration) time.Duration {
	v := asked
	if v <= 0 {
		v = def
	}
	if v <= 0 {
		v = fallback
	}
	if max > 0 && v > max {
		v = max
	}
	return v
}

// boundedBuffer keeps the first limit bytes written and counts the rest; it never blocks the
// writer, so a chatty command is not stalled by a full pipe.
type boundedBuffer struct {
	buf   bytes.Buffer
	limit int
	total int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.total += len(p)
	if room := b.limit - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// text returns the kept output, cut at a UTF-8 boundary and marked when truncated.
func (b *boundedBuffer) text() (string, bool) {
	kept := b.buf.Bytes()
	if b.total <= len(kept) {
		return string(kept), false
	}
	// Drop a rune the limit cut in two (at most 3 bytes).
	for i := 0; i < utf8.UTFMax-1 && len(kept) > 0; i++ {
		if r, size := utf8.DecodeLastRune(kept); r != utf8.RuneError || size != 1 {
			break
		}
		kept = kept[:len(kept)-1]
	}
	return string(kept) + fmt.Sprintf("\n[output truncated: %d of %d bytes shown]", len(kept), b.total), true
}
