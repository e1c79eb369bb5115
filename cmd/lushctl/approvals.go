package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/gateway/approvalhttp"
	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/decisionlog"
)

func newApprovalsCmd() *cobra.Command {
	c := &apiClient{api: "the approvals API"}
	cmd := &cobra.Command{
		Use:     "approvals",
		Aliases: []string{"approval"},
		Short:   "List, approve and deny the calls that wait for a person's approval",
		Long: `Approvals talks to a running Lush server (lushctl run, serve or gateway) about the tool calls that
wait for a person: calls the policy answered "approval required" (destructive tools by default,
lush.yaml authorization.approval_required_for, or a project policy's approval rule).

A waiting call runs once a holder of the approve role (lush.yaml roles: approve) approves it, still
subject to the write stub; a denial, or no decision before the approval expires, refuses it with a
message the model can read. An approval is bound to the exact call (tool, arguments, principal and
agent) and lets it run once. Nobody approves their own call.

Every request is authenticated (--token or LUSH_TOKEN; a dev-mode server needs none) and decided by
the project's policy: listing needs the approve or audit role, approving and denying the approve
role. Each decision, with its reason, is in the decision log.

Exit codes: 0 success; 1 denied by policy, no such approval, or already decided; 2 usage; 3 the
server could not be reached or failed.`,
		Example: `  lushctl approvals list
  lushctl approvals show 0193a2c4-5d6e-7f80-9a1b-2c3d4e5f6a7b
  lushctl approvals approve 0193a2c4-5d6e-7f80-9a1b-2c3d4e5f6a7b --reason "ticket OPS-142"
  lushctl approvals deny 0193a2c4-5d6e-7f80-9a1b-2c3d4e5f6a7b --reason "wrong host"
  LUSH_URL=https://lush.internal LUSH_TOKEN=$TOKEN lushctl approvals list --status all -o json`,
	}
	c.flags(cmd)
	cmd.AddCommand(approvalsListCmd(c), approvalsShowCmd(c), approvalsDecideCmd(c, "approve"), approvalsDecideCmd(c, "deny"))
	return cmd
}

func approvalsListCmd(c *apiClient) *cobra.Command {
	var status string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List approvals (pending ones by default), newest first",
		Example: `  lushctl approvals list
  lushctl approvals list --status denied --limit 20
  lushctl approvals list --status all -o json`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{"status": {status}, "limit": {strconv.Itoa(limit)}}
			var page approvalhttp.Page
			if err := c.do(cmd.Context(), "GET", "/approvals?"+q.Encode(), nil, &page); err != nil {
				return err
			}
			if c.output == "json" {
				return writeJSON(cmd.OutOrStdout(), page)
			}
			if len(page.Approvals) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No %s approvals.\n", strings.ReplaceAll(status, "all", "recorded"))
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tASKED\tPRINCIPAL\tAGENT\tTOOL\tARGUMENTS\tDECIDED BY")
			for _, ap := range page.Approvals {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ap.ID, ap.Status, ap.Created.Local().Format(time.DateTime), ap.Principal,
					ap.Agent, approval.ToolLabel(ap.Approval), oneLine(string(ap.Arguments), 48), orDash(ap.DecidedBy))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&status, "status", decisionlog.ApprovalPending, "pending, approved, denied, expired, consumed or all")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many (1 to 1000)")
	return cmd
}

func approvalsShowCmd(c *apiClient) *cobra.Command {
	return &cobra.Command{
		Use:     "show <id>",
		Short:   "Show one approval: the call, why it needs approval, and what was decided",
		Example: "  lushctl approvals show 0193a2c4-5d6e-7f80-9a1b-2c3d4e5f6a7b\n  lushctl approvals show 0193a2c4-5d6e-7f80-9a1b-2c3d4e5f6a7b -o json",
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			var item approvalhttp.Item
			if err := c.do(cmd.Context(), "GET", "/approvals/"+url.PathEscape(a[0]), nil, &item); err != nil {
				return err
			}
			if c.output == "json" {
				return writeJSON(cmd.OutOrStdout(), item)
			}
			printApproval(cmd.OutOrStdout(), item)
			return nil
		},
	}
}

func approvalsDecideCmd(c *apiClient, decision string) *cobra.Command {
	var reason string
	verb := map[string]string{"approve": "Approve a waiting call: it runs (still subject to the write stub)",
		"deny": "Deny a waiting call: the model is told it was refused, with your reason"}[decision]
	cmd := &cobra.Command{
		Use:   decision + " <id>",
		Short: verb,
		Example: fmt.Sprintf("  lushctl approvals %s 0193a2c4-5d6e-7f80-9a1b-2c3d4e5f6a7b --reason %q", decision,
			map[string]string{"approve": "ticket OPS-142", "deny": "wrong host"}[decision]),
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			body, _ := json.Marshal(approvalhttp.Decision{Decision: decision, Reason: reason})
			var item approvalhttp.Item
			if err := c.do(cmd.Context(), "POST", "/approvals/"+url.PathEscape(a[0]), body, &item); err != nil {
				return err
			}
			if c.output == "json" {
				return writeJSON(cmd.OutOrStdout(), item)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Approval %s %s: %s by %s for agent %s.\n", item.ID, item.Status, approval.ToolLabel(item.Approval),
				item.Principal, item.Agent)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (kept in the decision log; the model sees a denial's reason)")
	return cmd
}

func printApproval(w io.Writer, item approvalhttp.Item) {
	ap := item.Approval
	fmt.Fprintf(w, "Approval %s: %s\n", ap.ID, ap.Status)
	fmt.Fprintf(w, "  call        %s by %s through agent %s\n", approval.ToolLabel(ap), ap.Principal, ap.Agent)
	fmt.Fprintf(w, "  arguments   %s\n", orDash(string(item.Arguments)))
	var reasons []struct{ Rule, Message string }
	json.Unmarshal(ap.Reasons, &reasons)
	for _, r := range reasons {
		fmt.Fprintf(w, "  needs       %s (%s)\n", r.Message, r.Rule)
	}
	fmt.Fprintf(w, "  asked       %s\n", ap.Created.Local().Format(time.DateTime))
	fmt.Fprintf(w, "  expires     %s\n", ap.Expires.Local().Format(time.DateTime))
	if ap.DecidedAt != nil {
		fmt.Fprintf(w, "  decided     %s by %s (decision %s)\n", ap.DecidedAt.Local().Format(time.DateTime), ap.DecidedBy, ap.Decision)
	}
	if ap.Note != "" {
		fmt.Fprintf(w, "  reason      %s\n", ap.Note)
	}
	if ap.UsedBy != "" {
		fmt.Fprintf(w, "  ran as      decision %s\n", ap.UsedBy)
	}
}
