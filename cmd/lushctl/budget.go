package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/gateway/budgethttp"
	"github.com/lush-agents/lush/policies/budget"
)

func newBudgetCmd() *cobra.Command {
	c := &apiClient{api: "the budgets API"}
	cmd := &cobra.Command{
		Use:     "budget",
		Aliases: []string{"budgets"},
		Short:   "Show budget usage and top budgets up on a running server",
		Long: `Budget talks to a running Lush server (lushctl run or serve) about the project's budgets
(lush.yaml budgets): tokens, tool calls or credits per agent or per principal, per hour, day, week
or month (UTC). A call over an exhausted budget is denied (lush.budget.exhausted), and an agent
whose budget is exhausted is not started, until the period resets or someone tops the budget up.

Every request is authenticated (--token or LUSH_TOKEN; a dev-mode server needs none) and decided by
the project's policy: show needs the budget or audit role, top-up the budget role (lush.yaml
roles:). Each request is a decision in the decision log; a top-up's grant is recorded with it.

Exit codes: 0 success; 1 denied by policy or no such budget; 2 usage; 3 the server could not be
reached or failed.`,
		Example: `  lushctl budget show
  lushctl budget show --budget researcher-tokens -o json
  lushctl budget top-up researcher-tokens --amount 50000 --reason "quarter-end report"
  lushctl budget top-up contractor-calls --subject user:carl --amount 100 --reason "OPS-142"`,
	}
	c.flags(cmd)
	cmd.AddCommand(budgetShowCmd(c), budgetTopUpCmd(c))
	return cmd
}

func budgetShowCmd(c *apiClient) *cobra.Command {
	var name, subject string
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show the usage of the current period of every budget (or one), by subject",
		Example: `  lushctl budget show
  lushctl budget show --budget contractor-calls --subject user:carl
  lushctl budget show -o json`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			if name != "" {
				q.Set("budget", name)
			}
			if subject != "" {
				q.Set("subject", subject)
			}
			path := "/budgets"
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			var list budgethttp.List
			if err := c.do(cmd.Context(), "GET", path, nil, &list); err != nil {
				return err
			}
			if c.output == "json" {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list.Budgets) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "No budget usage in the current period.")
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BUDGET\tSUBJECT\tUNIT\tUSED\tLIMIT\tGRANTED\tREMAINING\tRESETS")
			for _, s := range list.Budgets {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d/%s\t%d\t%d\t%s\n", s.Budget, s.Subject, budget.UnitName(s.Unit), s.Used, s.Limit, s.Per,
					s.Granted, s.Remaining, s.Resets.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&name, "budget", "", "only this budget")
	cmd.Flags().StringVar(&subject, "subject", "", "only this subject (an agent or a principal id)")
	return cmd
}

func budgetTopUpCmd(c *apiClient) *cobra.Command {
	var subject, reason string
	var amount int64
	cmd := &cobra.Command{
		Use:   "top-up BUDGET --amount N --reason TEXT [--subject ID]",
		Short: "Add units to a budget's current period",
		Long: `Top-up adds --amount units (tokens, tool calls or credits) to the current period of a budget, for
one subject: the agent of an agent budget, the principal of a budget of one principal (both the
default), or --subject, a principal id, for a budget of a group or "*". The grant lasts until the
period ends. --reason is required: it is kept in the decision log with who topped up, and how much.`,
		Example: `  lushctl budget top-up researcher-tokens --amount 50000 --reason "quarter-end report"
  lushctl budget top-up contractor-calls --subject user:carl --amount 100 --reason "OPS-142"`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if amount < 1 {
				return usage("--amount must be a positive whole number")
			}
			if strings.TrimSpace(reason) == "" {
				return usage("--reason is required: say why the budget is topped up (it is kept in the decision log)")
			}
			body, _ := json.Marshal(budgethttp.TopUp{Subject: subject, Amount: amount, Reason: reason})
			var res budgethttp.TopUpResult
			if err := c.do(cmd.Context(), "POST", "/budgets/"+url.PathEscape(argv[0])+"/top-up", body, &res); err != nil {
				return err
			}
			if c.output == "json" {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			s := res.Status
			fmt.Fprintf(cmd.OutOrStdout(), "✓ budget %s topped up by %d %s for %s (decision %s)\n  %d of %d used this %s, %d remaining; the period resets at %s\n",
				s.Budget, res.Amount, budget.UnitName(s.Unit), s.Subject, res.DecisionID, s.Used, s.Limit+s.Granted, s.Per, s.Remaining,
				s.Resets.UTC().Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVar(&subject, "subject", "", "whose usage: an agent, or a principal id (default: the budget's one subject)")
	cmd.Flags().Int64Var(&amount, "amount", 0, "units to add (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; kept in the decision log)")
	return cmd
}
