package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/cmd/lushctl/stack"
	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/manifest"
)

type chatFlags struct {
	config, as, decisionLog, output, logLevel string
	groups, liveWrites, nodePrefix            []string
	model                                     modelConfig
	maxTurns                                  int
	timeout                                   time.Duration
}

func newChatCmd() *cobra.Command {
	var f chatFlags
	cmd := &cobra.Command{
		Use:   "chat <agent> [dir]",
		Short: "Talk to an agent of a project, with no server to run",
		Long: `Chat builds the project in dir (default .), starts what the agent needs in this process (the
gateway, on a loopback port, and agentd) and talks to the agent: interactively when stdin is a
terminal, or once with all of stdin as the message when it is piped.

The agent runs as --as (default user:<your login>) with its --group memberships, under the
project's compiled policy: every tool call goes through the gateway, is decided and written to the
decision log (<dir>/.lush/decisions.db), and writes are stubbed unless --live-writes says
otherwise. Tool calls are shown as they happen.

The model runs on the provider the agent's model: names (Gemini for a bare name, openai/…,
anthropic/…, or a lush.yaml models: entry, e.g. a local OpenAI-compatible server), with the key
from lushctl auth add model://<provider> (or Vault), else GOOGLE_API_KEY, OPENAI_API_KEY or
ANTHROPIC_API_KEY. Offline, the scripted provider (--provider scripted) replays
<dir>/scripts/<agent>.yaml: for demos and tests, no model runs.

In an interactive session, /exit (or Ctrl-D) ends it and /reset starts a new conversation.`,
		Example: `  # Offline, with the quickstart's scripted model turns
  lushctl chat orchestrator examples/quickstart --provider scripted

  # On Gemini, as a member of group:engineering
  GOOGLE_API_KEY=... lushctl chat researcher examples/quickstart --group group:engineering

  # One question from a script; the result as JSON
  echo "What were Q3's numbers?" | lushctl chat researcher --provider scripted -o json`,
		Args: args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			return runChat(cmd, a[0], projectDir(a[1:]), &f)
		},
	}
	fl := cmd.Flags()
	agentFlags(fl, &f.model, &f.maxTurns, &f.timeout)
	fl.StringVar(&f.config, "config", "", "gateway config file (YAML; credentials, upstreams; see docs/gateway.md)")
	fl.StringVar(&f.as, "as", "", "the principal the agent acts for (default user:<your login>)")
	fl.StringArrayVar(&f.groups, "group", nil, "a group of that principal, e.g. group:engineering (repeatable)")
	fl.StringArrayVar(&f.liveWrites, "live-writes", nil, "run writes for real: --live-writes for every tool, --live-writes=<tool ref> per tool (repeatable)")
	fl.Lookup("live-writes").NoOptDefVal = "all"
	fl.StringVar(&f.decisionLog, "decision-log", "", "decision log (SQLite file; default <dir>/.lush/decisions.db)")
	fl.StringArrayVar(&f.nodePrefix, "node-prefix", nil, "npm prefix with installed MCP servers (repeatable; default $LUSH_NODE_PREFIX)")
	fl.StringVar(&f.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	outputFlag(cmd, &f.output)
	return cmd
}

// agentFlags adds the flags every command that runs agents has.
func agentFlags(fl interface {
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
	DurationVar(*time.Duration, string, time.Duration, string)
}, m *modelConfig, maxTurns *int, timeout *time.Duration) {
	fl.StringVar(&m.provider, "provider", os.Getenv("LUSH_MODEL_PROVIDER"), "model provider: empty runs each agent on the provider its model names; gemini, openai (or anthropic) runs only that one's models; scripted replays scripts offline")
	fl.StringVar(&m.scripts, "scripts", os.Getenv("LUSH_SCRIPTS"), "the scripted provider's directory of <agent>.yaml files (default <dir>/scripts)")
	fl.IntVar(maxTurns, "max-turns", agentd.DefaultMaxTurns, "model turns per invocation before it stops")
	fl.DurationVar(timeout, "timeout", agentd.DefaultTimeout, "wall-clock limit of one invocation")
}

func runChat(cmd *cobra.Command, agent, dir string, f *chatFlags) error {
	ctx := cmd.Context()
	if err := checkOutput(f.output); err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	logger, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return err
	}
	m, hash, bundle, err := buildForServing(cmd, dir)
	if err != nil {
		return err
	}
	if _, ok := m.Agent(agent); !ok {
		var names []string
		for _, a := range m.Agents {
			names = append(names, a.Name)
		}
		return usage("no agent %q in %s; agents: %s", agent, dir, strings.Join(names, ", "))
	}
	cfg, err := loadGatewayConfig(f.config)
	if err != nil {
		return err
	}
	mdl, provider, closeModel, err := newModel(ctx, f.model, dir, cfg.Credentials)
	if err != nil {
		return err
	}
	defer closeModel()
	gf := gatewayFlags{liveWrites: f.liveWrites, decisionLog: f.decisionLog, nodePrefix: f.nodePrefix}
	if err := gf.apply(&cfg, dir); err != nil {
		return err
	}
	principal := f.as
	if principal == "" {
		principal = "user:" + login()
	}
	// Requests to the in-process gateway come from agentd only, with delegation tokens; nothing
	// else listens.
	cfg.Listen = "127.0.0.1:0"
	caller := identity.Caller{ID: principal, Groups: f.groups, Method: identity.MethodDev, Subject: "lushctl chat"}

	abs, _ := filepath.Abs(dir)
	st, err := startStack(ctx, stack.Config{ProjectDir: abs, Gateway: cfg, Model: mdl, Logger: logger, Version: buildVersion(),
		Agents: &agentd.Config{MaxTurns: f.maxTurns, Timeout: f.timeout}})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		st.Shutdown(sctx)
	}()
	if err := st.Deploy(ctx, m, hash, bundle); err != nil {
		return err
	}
	if f.output == "text" {
		fmt.Fprintf(stderr, "lush chat: agent %s of %s (build %s) as %s; model: %s\n", agent, m.Project, manifest.Short(hash), principal, provider)
	}
	settle(ctx, st.Gateway, stderr, f.output == "text")

	stdin := cmd.InOrStdin()
	if file, ok := stdin.(*os.File); ok && term.IsTerminal(int(file.Fd())) && f.output == "text" {
		return chatInteractive(ctx, st.Agents, agent, caller, stdin, cmd.OutOrStdout(), stderr)
	}
	msg, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	if strings.TrimSpace(string(msg)) == "" {
		return usage("stdin is empty: pipe the message to send, or run lushctl chat in a terminal")
	}
	res, err := chatOnce(ctx, st.Agents, agent, caller, string(msg), nil, &lineWriter{w: cmd.OutOrStdout()}, stderr, f.output == "text")
	if err != nil {
		return err
	}
	if f.output == "json" {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	if res.Status != "ok" {
		return failed("the invocation ended with %s: %s", res.Status, res.Error)
	}
	return nil
}

// buildForServing builds the project offline and keeps the build, so that decision-log events
// name a revision lushctl builds can show.
func buildForServing(cmd *cobra.Command, dir string) (*manifest.Manifest, string, []byte, error) {
	res, err := compiler.Build(cmd.Context(), dir, compiler.Offline(true))
	if err != nil {
		return nil, "", nil, err
	}
	if !res.OK() {
		if err := diag.WriteText(cmd.ErrOrStderr(), res.Diagnostics); err != nil {
			return nil, "", nil, err
		}
		return nil, "", nil, failed("the project does not build (%s)", diag.Summary(res.Errors, res.Warnings))
	}
	if err := buildstore.ForProject(dir).Save(res.Hash, res.ManifestJSON, res.Bundle); err != nil {
		return nil, "", nil, err
	}
	return res.Manifest, res.Hash, res.Bundle, nil
}

// settle waits for the build's MCP servers' first connection attempts, saying so when that takes
// more than a moment (npx may download a server).
func settle(ctx context.Context, gw *gateway.Gateway, w io.Writer, show bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		gw.WaitSettled(wctx)
	}()
	select {
	case <-done:
		return
	case <-time.After(time.Second):
	}
	if show {
		fmt.Fprintln(w, "starting MCP servers…")
	}
	<-done
}

// lineWriter writes a chat's output and remembers whether the last text written left a line
// open, so that a line of its own (a tool call) starts on a new line after streamed text.
type lineWriter struct {
	w    io.Writer
	open bool // the last text written did not end its line
}

// text writes s as it comes.
func (l *lineWriter) text(s string) {
	if s == "" {
		return
	}
	fmt.Fprint(l.w, s)
	l.open = !strings.HasSuffix(s, "\n")
}

// line writes s on a line of its own.
func (l *lineWriter) line(s string) {
	l.endLine()
	fmt.Fprintln(l.w, s)
}

// endLine ends the open line, if there is one.
func (l *lineWriter) endLine() {
	if l.open {
		fmt.Fprintln(l.w)
		l.open = false
	}
}

// chatOnce runs one invocation, showing tool calls and the answer as they come when show is set.
func chatOnce(ctx context.Context, a *agentd.Server, agent string, caller identity.Caller, msg string, history []model.Message,
	stdout *lineWriter, stderr io.Writer, show bool) (*agentd.Result, error) {
	streamed := false
	inv := agentd.Invocation{Agent: agent, Caller: caller, Message: msg, History: history}
	if show {
		inv.OnEvent = func(e agentd.Event) {
			switch e.Type {
			case "text":
				streamed = true
				stdout.text(e.Text)
			case "tool_result":
				stdout.line(toolLine(e.Tool))
			}
		}
	}
	res, err := a.Invoke(ctx, inv)
	var denied *agentd.DeniedError
	if errors.As(err, &denied) {
		return nil, failed("%v", err)
	}
	if err != nil {
		return nil, err
	}
	if show {
		if !streamed {
			stdout.text(res.Response)
		}
		stdout.endLine()
		fmt.Fprintf(stderr, "(%s: %s, %d turns, %d tool calls, tokens %d in / %d out)\n", res.ID, res.Status, res.Turns, len(res.Tools), res.Usage.Input, res.Usage.Output)
	}
	return res, nil
}

// toolLine describes a tool call in one line, and the calls of a called agent below it.
func toolLine(t *agentd.ToolCall) string { return toolLineAt(t, "  ") }

func toolLineAt(t *agentd.ToolCall, indent string) string {
	line := fmt.Sprintf("%s→ %s", indent, t.Name)
	if t.Tool != "" {
		line += fmt.Sprintf(" (%s, %s)", t.Tool, t.Access)
	}
	line += ": " + t.Status
	if t.Outcome != "" && t.Outcome != "allow" {
		line += " [" + t.Outcome + "]"
	}
	line += fmt.Sprintf(" %.0fms", t.LatencyMS)
	if t.DecisionID != "" {
		line += " decision " + t.DecisionID
	}
	if t.Error != "" {
		msg := t.Error
		if len(msg) > 160 {
			msg = msg[:160] + "…"
		}
		line += "\n" + indent + "    " + msg
	}
	if t.Invocation != "" {
		line += fmt.Sprintf("\n%s    invocation %s:", indent, t.Invocation)
	}
	for i := range t.Calls {
		line += "\n" + toolLineAt(&t.Calls[i], indent+"    ")
	}
	return line
}

func chatInteractive(ctx context.Context, a *agentd.Server, agent string, caller identity.Caller, stdin io.Reader, stdout, stderr io.Writer) error {
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	out := &lineWriter{w: stdout}
	var history []model.Message
	for {
		out.endLine()
		fmt.Fprint(stdout, "you> ") // the user's Enter ends this line
		if !in.Scan() {
			fmt.Fprintln(stdout)
			return in.Err()
		}
		line := strings.TrimSpace(in.Text())
		switch line {
		case "":
			continue
		case "/exit", "/quit":
			return nil
		case "/reset":
			history = nil
			fmt.Fprintln(stderr, "(new conversation)")
			continue
		}
		out.text(agent + "> ")
		res, err := chatOnce(ctx, a, agent, caller, line, history, out, stderr, true)
		if err != nil {
			fmt.Fprintln(stderr, "lushctl:", err)
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		history = res.History
	}
}

func login() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "dev"
}
