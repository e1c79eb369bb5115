package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/audit/replay"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

func newAuditReplayCmd() *cobra.Command {
	var f auditFlags
	var bundle, project string
	var failOnChange bool
	cmd := &cobra.Command{
		Use:   "replay --bundle HASH",
		Short: "Decide logged calls again under another build, and list the decisions that would change",
		Long: `Replay reads the logged decisions that match the filters (as for audit query), decides each logged
input again with the policy of a kept build (--bundle: a hash or prefix of a build of --project),
and lists those whose outcome would change: a what-if for a policy change before it is deployed.

Inputs are replayed as the log kept them: a decision whose whole input the policy masked is
skipped (counted), and one with masked fields is decided without them.

Exit codes: 0 (with --fail-on-change: 1 when a decision would change), 2 usage error, 3 the log
or the build cannot be read.`,
		Example: `  lushctl build && lushctl audit replay --bundle $(lushctl build -q) --since 7d
  lushctl audit replay --bundle 3fa9c1e2 --tool mcp://npx/@modelcontextprotocol/server-filesystem -o json`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if bundle == "" {
				return usage("--bundle is required: the kept build to decide with (lushctl builds lists them)")
			}
			filter, r, err := f.open()
			if err != nil {
				return err
			}
			defer r.Close()
			store := buildstore.ForProject(project)
			hash, err := store.Resolve(bundle)
			if err != nil {
				return usage("--bundle: %v", err)
			}
			_, data, err := store.Load(hash)
			if err != nil {
				return &exitError{code: exitRuntime, msg: err.Error()}
			}
			eng, err := authz.FromBytes(cmd.Context(), data, authz.Timeout(offlineDecisionTimeout))
			if err != nil {
				return &exitError{code: exitRuntime, msg: fmt.Sprintf("load build %s: %v", manifest.Short(hash), err)}
			}
			recs, err := r.Query(cmd.Context(), filter)
			if err != nil {
				return err
			}
			sum := replay.Run(cmd.Context(), eng, recs)
			if f.output == "json" {
				err = writeJSON(cmd.OutOrStdout(), sum)
			} else {
				err = writeReplay(cmd.OutOrStdout(), sum)
			}
			if err == nil && failOnChange && len(sum.Changed) > 0 {
				return &exitError{code: exitFailed}
			}
			return err
		},
	}
	f.register(cmd, decisionlog.MaxLimit, fmt.Sprintf("replay at most this many decisions (up to %d), newest first", decisionlog.MaxLimit))
	cmd.Flags().StringVar(&bundle, "bundle", "", "the kept build whose policy decides (hash or prefix)")
	cmd.Flags().StringVarP(&project, "project", "C", ".", "the project whose builds --bundle names")
	cmd.Flags().BoolVar(&failOnChange, "fail-on-change", false, "exit 1 when a decision would change")
	return cmd
}

func writeReplay(w io.Writer, sum replay.Summary) error {
	fmt.Fprintf(w, "replayed %d logged decisions under build %s (%d skipped: input not logged): %d would change\n",
		sum.Replayed, manifest.Short(sum.Bundle), sum.Skipped, len(sum.Changed))
	if len(sum.Changed) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tDECISION ID\tPRINCIPAL\tAGENT\tACTION\tTOOL\tWAS\tNOW\tRULES")
	for _, c := range sum.Changed {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Time, c.DecisionID, c.Principal, c.Agent, c.Action, c.Tool, c.Was, c.Now,
			strings.Join(c.Rules, ","))
	}
	return tw.Flush()
}
