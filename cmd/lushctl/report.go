package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/audit/report"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/decisionlog"
)

func newAuditReportCmd() *cobra.Command {
	var f auditFlags
	var project, build string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Usage report: calls, errors, latency and read/write mix per tool; invocations and tokens per agent",
		Long: `Report summarises the decisions the filters select (the whole log by default; --since for a
period): per tool, the calls and their outcomes, the error rate of the calls that ran, upstream
latency p50/p95 and the read/write mix; per agent, invocations, denials and model tokens; per
principal, calls and denied attempts.

With -C (a project; --build for a kept build, else the project built in memory) it also lists
the tools agents declare but never used in the period, the tools used more than 3× the mean, and
the grants no allowed call used.`,
		Example: `  lushctl audit report --since 7d
  lushctl audit report --since 30d -C . -o json`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, r, err := f.open()
			if err != nil {
				return err
			}
			defer r.Close()
			var m *manifest.Manifest
			if project != "" {
				if build != "" {
					store := buildstore.ForProject(project)
					hash, err := store.Resolve(build)
					if err != nil {
						return usage("--build: %v", err)
					}
					if m, _, err = store.Manifest(hash); err != nil {
						return &exitError{code: exitRuntime, msg: err.Error()}
					}
				} else {
					res, err := compileForPolicy(cmd, project)
					if err != nil {
						return err
					}
					m = res.Manifest
				}
			}
			rep, err := report.Compute(cmd.Context(), r, filter, m)
			if err != nil {
				return err
			}
			if f.output == "json" {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			return writeReport(cmd.OutOrStdout(), rep)
		},
	}
	f.register(cmd, decisionlog.MaxLimit, "ignored: a report reads every decision the filters select")
	cmd.Flags().StringVarP(&project, "project", "C", "", "also check this project's build: unused tools and grants, over-used tools")
	cmd.Flags().StringVar(&build, "build", "", "with -C: a kept build (hash or prefix) instead of the project built in memory")
	return cmd
}

func writeReport(w io.Writer, rep *report.Report) error {
	fmt.Fprintf(w, "%d decisions\n\nTOOLS\n", rep.Decisions)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tCALLS\tALLOWED\tSTUBBED\tDENIED\tERRORS\tERROR RATE\tP50\tP95\tREADS/WRITES")
	for _, t := range rep.Tools {
		name := t.Tool
		if t.Name != "" {
			name += " (" + t.Name + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t%.1fms\t%.1fms\t%d/%d\n", name, t.Calls, t.Allowed, t.Stubbed, t.Denied, t.Errors,
			100*t.ErrRate, t.P50MS, t.P95MS, t.Reads, t.Writes)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nAGENTS")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tINVOCATIONS\tDENIED\tTOKENS IN\tTOKENS OUT")
	for _, a := range rep.Agents {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", a.Agent, a.Invocations, a.Denied, a.TokensIn, a.TokensOut)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nPRINCIPALS")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tCALLS\tDENIED")
	for _, p := range rep.Principals {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", p.Principal, p.Calls, p.Denied)
	}
	tw.Flush()
	for _, sec := range []struct {
		title string
		items []string
	}{{"DECLARED BUT NOT USED", rep.Unused}, {"OVER-USED", rep.Overused}, {"GRANTS NOT USED", rep.UnusedGrants}} {
		if len(sec.items) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s\n", sec.title)
		for _, it := range sec.items {
			fmt.Fprintf(w, "  %s\n", it)
		}
	}
	return nil
}
