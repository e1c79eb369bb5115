// Command lushctl is Lush's single binary: it builds projects into content-addressed manifests
// and OPA bundles, tests and evaluates policy, and (in later releases) serves the gateway.
//
// Exit codes: 0 success; 1 the command ran and found a failure (build errors, failing policy
// tests, a denied decision with --fail-on-deny); 2 usage error; 3 the command could not run
// (unreadable files, internal errors).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	exitRuntime = 3
)

// exitError carries an exit code; an empty message means the command already said why.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func failed(format string, args ...any) error {
	return &exitError{code: exitFailed, msg: fmt.Sprintf(format, args...)}
}

func usage(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	gcCtx, gcStop := context.WithCancel(ctx)
	gcWait := serverGC(gcCtx, os.Args[1:])
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	gcStop()
	gcWait()
	stop()
	os.Exit(code)
}

// run executes lushctl with args and returns the exit code. Tests call it directly.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return exitCode(root.ExecuteContext(ctx), stderr)
}

// exitCode says on stderr why a command failed and returns the exit code its error means.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if strings.HasPrefix(err.Error(), "unknown command") {
		ee = &exitError{code: exitUsage, msg: err.Error()}
	}
	if ee != nil || errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "lushctl:", ee.msg)
		}
		if ee.code == exitUsage {
			fmt.Fprintln(stderr, "Run 'lushctl --help' for usage.")
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "lushctl:", err)
	return exitRuntime
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "lushctl",
		Short: "Lush: a policy-centric authorization gateway for AI agents",
		Long: `lushctl builds Lush projects (agents/*/spec.yaml, loops/*.yaml, lush.yaml, policies/*.rego)
into a content-addressed manifest and a standard OPA bundle, and tests and explains the policy
that decides every tool call.

Exit codes: 0 success, 1 failure found (build errors, failing tests, denied with --fail-on-deny),
2 usage error, 3 could not run.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage("%v", err) })
	root.AddCommand(newA2ACmd(), newAccessCmd(), newApprovalsCmd(), newAuditCmd(), newAuthCmd(), newBudgetCmd(), newBuildCmd(), newBuildsCmd(), newChatCmd(), newDeployCmd(), newGatewayCmd(), newGraphCmd(), newHealthCmd(), newLoopCmd(), newMCPCmd(), newMeshCmd(), newPolicyCmd(), newRunCmd(), newServeCmd(), newSkillsCmd(), newStatusCmd(), newVersionCmd())
	return root
}

// args wraps a cobra positional-argument check so that a wrong count is a usage error.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return usage("%s: %v", cmd.CommandPath(), err)
		}
		return nil
	}
}

// projectDir returns the project directory argument, "." by default.
func projectDir(a []string) string {
	if len(a) > 0 {
		return a[0]
	}
	return "."
}
