package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/policytest"
)

// offlineDecisionTimeout bounds one decision of the commands that evaluate a build's policy
// offline (policy eval, access review, replay). A server fails a slow decision closed
// (authz.DefaultTimeout); an analysis must not report a decision that merely ran slow on a busy
// machine as a denial.
const offlineDecisionTimeout = 30 * time.Second

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Test and evaluate the policy that decides every call",
		Long: `The policy is OPA Rego: Lush's base library (package lush.authz) plus the project's own
policies (packages lush.policies.<name> in policies/*.rego). docs/policy.md documents the input
document, the decision object and how project policies extend the base library.`,
	}
	cmd.AddCommand(newPolicyTestCmd(), newPolicyEvalCmd())
	return cmd
}

// compileForPolicy builds the project in memory (offline, nothing written) for policy commands.
func compileForPolicy(cmd *cobra.Command, dir string) (*compiler.Result, error) {
	res, err := compiler.Build(cmd.Context(), dir, compiler.Offline(true))
	if err != nil {
		return nil, err
	}
	if !res.OK() {
		if err := diag.WriteText(cmd.ErrOrStderr(), res.Diagnostics); err != nil {
			return nil, err
		}
		return nil, failed("the project does not build (%s): fix it first", diag.Summary(res.Errors, res.Warnings))
	}
	return res, nil
}

func newPolicyTestCmd() *cobra.Command {
	var (
		run, output string
		threshold   float64
		verbose     bool
	)
	cmd := &cobra.Command{
		Use:   "test [dir]",
		Short: "Run the project's Rego unit tests with coverage",
		Long: `Test builds the project (offline, writing nothing), then runs every test rule (test_*) in
policies/**/*_test.rego with OPA's tester, in-process, against the bundle's modules and data: tests
see the project's real agents, grants and classes (data.lush.project) and can call
data.lush.authz.decision. Coverage is measured over the project's own policies.

Exits 1 when a test fails or errors, or when coverage is below --threshold.`,
		Example: `  lushctl policy test examples/quickstart
  lushctl policy test --threshold 90 --run 'drafts'
  lushctl policy test -o json | jq .coverage`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if threshold < 0 || threshold > 100 {
				return usage("--threshold must be between 0 and 100")
			}
			dir := projectDir(a)
			res, err := compileForPolicy(cmd, dir)
			if err != nil {
				return err
			}
			var l diag.List
			p, err := spec.Load(dir, &l)
			if err != nil {
				return err
			}
			var tests []policytest.TestFile
			for _, f := range p.PolicyTests {
				tests = append(tests, policytest.TestFile{Path: f.Path, Source: f.Source})
			}
			rep, err := policytest.Run(cmd.Context(), res.Bundle, tests, policytest.Options{Run: run})
			var perr *policytest.ParseError
			if errors.As(err, &perr) {
				for _, e := range perr.Errors {
					loc := "policies"
					if e.Location != nil {
						loc = fmt.Sprintf("%s:%d:%d", e.Location.File, e.Location.Row, e.Location.Col)
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "%s\n  ✗ %s\n", loc, e.Message)
				}
				return failed("the tests do not compile")
			}
			if err != nil {
				return err
			}
			short := rep.Coverage < threshold
			if output == "json" {
				out := struct {
					*policytest.Report
					Threshold float64 `json:"threshold"`
					OK        bool    `json:"ok"`
				}{rep, threshold, rep.OK() && !short}
				if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else {
				writeTestReport(cmd.OutOrStdout(), rep, verbose, threshold, run)
			}
			switch {
			case !rep.OK():
				return &exitError{code: exitFailed}
			case short:
				return failed("coverage %.2f%% is below the threshold %.2f%%", rep.Coverage, threshold)
			case len(rep.Tests) == 0 && run != "":
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&run, "run", "", "run only tests whose package.name matches this regular expression")
	fl.Float64Var(&threshold, "threshold", 0, "fail when coverage of the project's policies is below this percentage")
	fl.BoolVarP(&verbose, "verbose", "v", false, "list every test, not only failures")
	outputFlag(cmd, &output)
	return cmd
}

func writeTestReport(w io.Writer, rep *policytest.Report, verbose bool, threshold float64, run string) {
	for _, t := range rep.Tests {
		if t.Outcome == "pass" && !verbose {
			continue
		}
		fmt.Fprintf(w, "%s:%d: %-5s %s.%s (%.1fms)\n", t.File, t.Line, strings.ToUpper(t.Outcome), t.Package, t.Name, t.Seconds*1000)
		if t.FailedAt != "" {
			fmt.Fprintf(w, "    failed at %s\n", t.FailedAt)
		}
		if t.Message != "" {
			fmt.Fprintf(w, "    %s\n", t.Message)
		}
		if t.Output != "" {
			fmt.Fprintf(w, "    output: %s\n", strings.TrimSpace(t.Output))
		}
	}
	switch {
	case len(rep.Tests) == 0 && run != "":
		fmt.Fprintf(w, "no test matches --run %q\n", run)
		return
	case len(rep.Tests) == 0:
		fmt.Fprintln(w, "no Rego tests found in policies/**/*_test.rego")
	}
	fmt.Fprintf(w, "PASS: %d/%d", rep.Passed, len(rep.Tests))
	if rep.Failed > 0 {
		fmt.Fprintf(w, "  FAIL: %d", rep.Failed)
	}
	if rep.Errored > 0 {
		fmt.Fprintf(w, "  ERROR: %d", rep.Errored)
	}
	if rep.Skipped > 0 {
		fmt.Fprintf(w, "  SKIP: %d", rep.Skipped)
	}
	fmt.Fprintln(w)
	if len(rep.Files) == 0 {
		fmt.Fprintln(w, "coverage: the project has no policies of its own")
		return
	}
	fmt.Fprintf(w, "coverage: %.2f%% of the project's policies", rep.Coverage)
	if threshold > 0 {
		fmt.Fprintf(w, " (threshold %.2f%%)", threshold)
	}
	fmt.Fprintln(w)
	for _, f := range rep.Files {
		fmt.Fprintf(w, "  %-40s %6.2f%% (%d/%d lines)", f.File, f.Coverage, f.Covered, f.Total)
		if len(f.NotCovered) > 0 {
			fmt.Fprintf(w, " not covered: %s", lineList(f.NotCovered))
		}
		fmt.Fprintln(w)
	}
}

func lineList(lines []int) string {
	parts := make([]string, len(lines))
	for i, l := range lines {
		parts[i] = fmt.Sprint(l)
	}
	return strings.Join(parts, ", ")
}

type evalFlags struct {
	build, input, output, explain                    string
	action, principal, agent, tool, toolName, access string
	risk, args, environment, loop                    string
	groups, chain                                    []string
	depth                                            int
	liveWrites, failOnDeny                           bool
}

func newPolicyEvalCmd() *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use:   "eval [dir]",
		Short: "Evaluate one decision and explain it",
		Long: `Eval builds the project (offline, in memory) or loads a kept build (--build), evaluates
data.lush.authz.decision for one input, and prints the decision, the reasons for a denial and the
rules that decided. The input comes from flags or from a JSON file (--input, "-" for stdin) in the
format docs/policy.md documents.

Exit status is 0 whatever the decision, unless --fail-on-deny is given (then 1 when denied).`,
		Example: `  # May bob (an engineer) write through the orchestrator agent?
  lushctl policy eval examples/quickstart --principal user:bob --group group:engineering \
    --agent orchestrator --tool mcp://npx/@modelcontextprotocol/server-filesystem \
    --tool-name write_file --args '{"path":"drafts/x.md"}'

  # May olga, in group:ops, trigger a loop by hand?
  lushctl policy eval --action loop/trigger --loop weekday-digest --principal user:olga --group group:ops

  # From a logged input, with OPA's full trace:
  lushctl policy eval --input input.json --explain full`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			if f.explain != "" && f.explain != "full" && f.explain != "notes" {
				return usage("--explain must be full or notes")
			}
			in, err := f.inputDoc(cmd)
			if err != nil {
				return err
			}
			dir := projectDir(a)
			bundleBytes, err := f.bundle(cmd, dir)
			if err != nil {
				return err
			}
			eng, err := authz.FromBytes(cmd.Context(), bundleBytes, authz.Timeout(offlineDecisionTimeout))
			if err != nil {
				return err
			}
			var d authz.Decision
			var trace string
			if f.explain != "" {
				d, trace = eng.Explain(cmd.Context(), in)
			} else {
				d = eng.Decide(cmd.Context(), in)
			}
			if f.output == "json" {
				out := struct {
					Input    authz.Input    `json:"input"`
					Decision authz.Decision `json:"decision"`
					Trace    string         `json:"trace,omitempty"`
				}{in, d, trace}
				if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else {
				authz.WriteExplanation(cmd.OutOrStdout(), in, d)
				if trace != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "\ntrace:\n%s", authz.FilterTrace(trace, f.explain))
				}
			}
			if f.failOnDeny && !d.Allow {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.build, "build", "", "evaluate a kept build (hash or prefix) instead of building the project")
	fl.StringVar(&f.input, "input", "", `read the whole input document from this JSON file ("-" for stdin)`)
	fl.StringVar(&f.action, "action", "", "action: "+strings.Join(authz.Actions, ", ")+" (default tools/call, or loop/trigger with --loop)")
	fl.StringVar(&f.principal, "principal", "", "calling principal, e.g. user:alice or serviceaccount:digest-bot")
	fl.StringArrayVar(&f.groups, "group", nil, "a group the principal is in, e.g. group:engineering (repeatable)")
	fl.StringVar(&f.agent, "agent", "", "the agent acting (or being invoked)")
	fl.StringSliceVar(&f.chain, "chain", nil, "agent call chain from the outermost caller, comma-separated (default: the agent)")
	fl.IntVar(&f.depth, "depth", 0, "call depth (default: length of the chain)")
	fl.StringVar(&f.tool, "tool", "", "tool reference, e.g. mcp://npx/@modelcontextprotocol/server-filesystem")
	fl.StringVar(&f.toolName, "tool-name", "", "the MCP tool's name within the server, e.g. write_file")
	fl.StringVar(&f.access, "access", "", "access the call needs: read or write (the tool's class decides when stricter)")
	fl.StringVar(&f.risk, "risk", "", "risk hint: read, write, network or destructive")
	fl.StringVar(&f.args, "args", "", "the call's arguments as a JSON object")
	fl.BoolVar(&f.liveWrites, "live-writes", false, "evaluate as if live writes were on for this tool")
	fl.StringVar(&f.environment, "environment", "dev", "environment name")
	fl.StringVar(&f.loop, "loop", "", "loop name (for loop/trigger and loop/read)")
	fl.StringVar(&f.explain, "explain", "", "also print OPA's evaluation trace: full or notes")
	fl.BoolVar(&f.failOnDeny, "fail-on-deny", false, "exit 1 when the decision denies")
	outputFlag(cmd, &f.output)
	return cmd
}

// inputDoc assembles the input from --input or the flags.
func (f *evalFlags) inputDoc(cmd *cobra.Command) (authz.Input, error) {
	var in authz.Input
	if f.input != "" {
		if cmd.Flags().NFlag() > 0 && (f.principal != "" || f.agent != "" || f.tool != "") {
			return in, usage("--input replaces --principal, --agent and --tool: give one or the other")
		}
		var r io.Reader = cmd.InOrStdin()
		if f.input != "-" {
			data, err := os.ReadFile(f.input)
			if err != nil {
				return in, usage("--input: %v", err)
			}
			r = bytes.NewReader(data)
		}
		dec := json.NewDecoder(r)
		dec.DisallowUnknownFields()
		dec.UseNumber()
		if err := dec.Decode(&in); err != nil {
			return in, usage("--input %s is not a valid input document: %v (see docs/policy.md)", f.input, err)
		}
		return in, nil
	}
	if f.principal == "" {
		return in, usage("--principal is required (or give --input)")
	}
	in = authz.Input{Action: f.action, Principal: authz.Principal{ID: f.principal, Groups: f.groups}, Agent: f.agent,
		Chain: f.chain, Depth: f.depth, LiveWrites: f.liveWrites, Environment: f.environment, Loop: f.loop}
	if in.Principal.Groups == nil {
		in.Principal.Groups = []string{}
	}
	if in.Action == "" {
		in.Action = authz.ActionToolsCall
		if f.loop != "" {
			in.Action = authz.ActionLoopTrigger
		} else if f.tool == "" && f.agent != "" {
			in.Action = authz.ActionAgentInvoke
		}
	}
	if !slices.Contains(authz.Actions, in.Action) {
		return in, usage("--action %q is not one of %s", in.Action, strings.Join(authz.Actions, ", "))
	}
	if len(in.Chain) == 0 && in.Agent != "" {
		in.Chain = []string{in.Agent}
	}
	if in.Depth == 0 {
		in.Depth = len(in.Chain)
	}
	if f.tool != "" {
		in.Tool = &authz.Tool{Ref: f.tool, Name: f.toolName, Access: f.access, Risk: f.risk}
	}
	if f.args != "" {
		dec := json.NewDecoder(strings.NewReader(f.args))
		dec.UseNumber()
		var args any
		if err := dec.Decode(&args); err != nil {
			return in, usage("--args is not JSON: %v", err)
		}
		if _, ok := args.(map[string]any); !ok {
			return in, usage("--args must be a JSON object")
		}
		in.Arguments = args
	}
	return in, nil
}

// bundle returns the bundle to evaluate: a kept build, or the project built in memory.
func (f *evalFlags) bundle(cmd *cobra.Command, dir string) ([]byte, error) {
	if f.build == "" {
		res, err := compileForPolicy(cmd, dir)
		if err != nil {
			return nil, err
		}
		return res.Bundle, nil
	}
	store := buildstore.ForProject(dir)
	hash, err := store.Resolve(f.build)
	if err != nil {
		return nil, usage("--build: %v", err)
	}
	data, err := os.ReadFile(store.BundlePath(hash))
	if err != nil {
		return nil, fmt.Errorf("read bundle of build %s: %w", manifest.Short(hash), err)
	}
	return data, nil
}
