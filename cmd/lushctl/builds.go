package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/buildstore"
	"github.com/lush-agents/lush/manifest"
)

func newBuildsCmd() *cobra.Command {
	var output, dir string
	cmd := &cobra.Command{
		Use:   "builds [project-dir]",
		Short: "List the builds kept in .lush/build, newest first",
		Long: `Builds lists the content-addressed builds of a project, most recently built first, so a
deployment can roll back by hash. Any unique prefix of at least 4 characters names a build.`,
		Example: `  lushctl builds
  lushctl builds examples/quickstart -o json`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			store := buildstore.ForProject(projectDir(a))
			if dir != "" {
				store = buildstore.Open(dir)
			} else if _, err := os.Stat(projectDir(a)); err != nil {
				return fmt.Errorf("list builds: %w", err)
			}
			list, err := store.List()
			if err != nil {
				return err
			}
			if output == "json" {
				if list == nil {
					list = []buildstore.Entry{}
				}
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no builds in %s (run lushctl build)\n", store.Path())
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "HASH\tPROJECT\tAGENTS\tLOOPS\tTOOLS\tBUILT")
			for _, e := range list {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", manifest.Short(e.Hash), e.Project, e.Agents, e.Loops, e.Tools, e.BuiltAt.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "build directory (default <project-dir>/.lush/build)")
	outputFlag(cmd, &output)
	return cmd
}
