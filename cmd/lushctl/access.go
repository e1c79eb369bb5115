package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/audit/review"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
)

func newAccessCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "access",
		Short: "Review who can do what under a build",
		Args:  args(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newAccessReviewCmd())
	return cmd
}

func newAccessReviewCmd() *cobra.Command {
	var build, subject, output, diff string
	cmd := &cobra.Command{
		Use:   "review [dir] | review --diff OLD NEW [dir]",
		Short: "List, for every principal and group, the agent × tool × access they can exercise",
		Long: `Review asks the build's own compiled policy, for every principal and group the build names (ACLs,
grants, loops, credentials, service accounts), which tools of which agents they may call and at
what access: each row is a decision of the policy (a direct call, no arguments, live writes off),
with the ACL entries and tool grants that give it. Outcomes: allow; stub (a write, stubbed unless
live writes are on); approval_required; conditional (the base library grants it, and the
project's policies decide each call by its arguments: the rules are listed).

Each subject is reviewed as itself: what a user gets through the groups an identity provider
gives it is in those groups' rows. Rows of group:everyone are in every subject's rows.

--diff OLD NEW compares two kept builds (hashes or prefixes): what the change grants (+), revokes
(-) and changes (~).`,
		Example: `  lushctl access review examples/quickstart
  lushctl access review --subject group:engineering -o json .
  lushctl access review --diff 3fa9c1e2 78a98df5 .   # what does this deploy grant and revoke?`,
		Args: args(cobra.MaximumNArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if diff != "" {
				if len(a) == 0 {
					return usage("--diff takes two builds: --diff OLD NEW [dir]")
				}
				dir := projectDir(a[1:])
				old, err := reviewBuild(cmd, dir, diff)
				if err != nil {
					return err
				}
				next, err := reviewBuild(cmd, dir, a[0])
				if err != nil {
					return err
				}
				changes := review.Diff(filterSubject(old, subject), filterSubject(next, subject))
				if output == "json" {
					return writeJSON(cmd.OutOrStdout(), changes)
				}
				return writeChanges(cmd.OutOrStdout(), old.Revision, next.Revision, changes)
			}
			if len(a) > 1 {
				return usage("lushctl access review: accepts at most 1 arg(s) without --diff, received %d", len(a))
			}
			dir := projectDir(a)
			rv, err := reviewBuild(cmd, dir, build)
			if err != nil {
				return err
			}
			rv = filterSubject(rv, subject)
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), rv)
			}
			return writeReview(cmd.OutOrStdout(), rv)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&build, "build", "", "review this kept build (hash or prefix) instead of the project built in memory")
	fl.StringVar(&diff, "diff", "", "compare kept build OLD with NEW (the first argument): --diff OLD NEW [dir]")
	fl.StringVar(&subject, "subject", "", "only this principal or group")
	outputFlag(cmd, &output)
	return cmd
}

// reviewBuild reviews a kept build (hash or prefix), or the project built in memory ("").
func reviewBuild(cmd *cobra.Command, dir, build string) (*review.Review, error) {
	var m *manifest.Manifest
	var bundle []byte
	if build == "" {
		res, err := compileForPolicy(cmd, dir)
		if err != nil {
			return nil, err
		}
		m, bundle = res.Manifest, res.Bundle
	} else {
		store := buildstore.ForProject(dir)
		hash, err := store.Resolve(build)
		if err != nil {
			return nil, usage("build %s: %v", build, err)
		}
		if m, bundle, err = store.Load(hash); err != nil {
			return nil, &exitError{code: exitRuntime, msg: err.Error()}
		}
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	eng, err := authz.FromBytes(ctx, bundle, authz.Timeout(offlineDecisionTimeout))
	if err != nil {
		return nil, &exitError{code: exitRuntime, msg: fmt.Sprintf("load the build's policy: %v", err)}
	}
	rv, err := review.Compute(ctx, m, eng)
	if err != nil {
		return nil, &exitError{code: exitRuntime, msg: err.Error()}
	}
	return rv, nil
}

func filterSubject(rv *review.Review, subject string) *review.Review {
	if subject == "" {
		return rv
	}
	out := &review.Review{Revision: rv.Revision}
	for _, r := range rv.Rows {
		if r.Subject == subject {
			out.Rows = append(out.Rows, r)
		}
	}
	return out
}

func rowTool(r review.Row) string {
	switch r.Action {
	case authz.ActionAuditRead:
		return "the decision log (audit/read)"
	case authz.ActionApprovalRead:
		return "approvals (approval/read)"
	case authz.ActionApprovalDecide:
		return "approve or deny calls (approval/decide)"
	case authz.ActionBudgetRead:
		return "budget usage (budget/read)"
	case authz.ActionBudgetTopUp:
		return "top budgets up (budget/top-up)"
	}
	if r.Name == "" {
		return r.Tool
	}
	if r.Name == review.AnyOtherTool {
		return r.Tool + " (any other tool)"
	}
	return r.Tool + " (" + r.Name + ")"
}

func rowWhy(r review.Row) string {
	why := strings.Join(r.GrantedBy, "; ")
	if len(r.Conditions) > 0 {
		why += "; decided per call by " + strings.Join(r.Conditions, ", ")
	}
	return why
}

func writeReview(w io.Writer, rv *review.Review) error {
	fmt.Fprintf(w, "access review of build %s: %d rows\n", manifest.Short(rv.Revision), len(rv.Rows))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tAGENT\tTOOL\tACCESS\tOUTCOME\tGRANTED BY")
	for _, r := range rv.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Subject, cmp.Or(r.Agent, "-"), rowTool(r), r.Access, r.Outcome, rowWhy(r))
	}
	return tw.Flush()
}

func writeChanges(w io.Writer, old, next string, changes []review.Change) error {
	fmt.Fprintf(w, "from build %s to %s: %d changes\n", manifest.Short(old), manifest.Short(next), len(changes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range changes {
		switch c.Change {
		case "granted":
			fmt.Fprintf(tw, "+\t%s\t%s\t%s\t%s %s\t%s\n", c.New.Subject, cmp.Or(c.New.Agent, "-"), rowTool(*c.New), c.New.Access, c.New.Outcome, rowWhy(*c.New))
		case "revoked":
			fmt.Fprintf(tw, "-\t%s\t%s\t%s\t%s %s\t%s\n", c.Old.Subject, cmp.Or(c.Old.Agent, "-"), rowTool(*c.Old), c.Old.Access, c.Old.Outcome, rowWhy(*c.Old))
		default:
			fmt.Fprintf(tw, "~\t%s\t%s\t%s\t%s %s → %s %s\t%s\n", c.New.Subject, cmp.Or(c.New.Agent, "-"), rowTool(*c.New), c.Old.Access, c.Old.Outcome,
				c.New.Access, c.New.Outcome, rowWhy(*c.New))
		}
	}
	return tw.Flush()
}
