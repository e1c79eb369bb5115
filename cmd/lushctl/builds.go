package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/audit/review"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/manifest"
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
	cmd.AddCommand(newBuildsShowCmd())
	return cmd
}

// buildShown is a kept build and what its policy allowed.
type buildShown struct {
	Hash     string   `json:"hash"`
	Project  string   `json:"project"`
	Deployed bool     `json:"deployed"`
	Agents   []string `json:"agents"`
	Loops    []string `json:"loops"`
	Tools    []string `json:"tools"`
	// Limits are the build's rate limits (lush.yaml rate_limits), as "who rate burst N".
	Limits []string `json:"rate_limits"`
	// Budgets are the build's budgets (lush.yaml budgets), as "name: who, N unit per period".
	Budgets []string            `json:"budgets"`
	Roles   map[string][]string `json:"roles"`
	Access  *review.Review      `json:"access"`
}

func newBuildsShowCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "show <hash> [project-dir]",
		Short: "Show a kept build and what its policy allowed",
		Long: `Show prints a kept build (any unique prefix of its hash): its project, agents, loops and tools,
whether it is the deployed build, and its access review (lushctl access review): for every
principal and group, the agent × tool × access its policy allowed. Decision-log events name the
build that decided them (revision), so this answers "what did that revision allow?".`,
		Example: `  lushctl builds show 3fa9c1e2
  lushctl builds show 3fa9c1e2 examples/quickstart -o json`,
		Args: args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			dir := projectDir(a[1:])
			store := buildstore.ForProject(dir)
			hash, err := store.Resolve(a[0])
			if err != nil {
				return usage("%v", err)
			}
			m, _, err := store.Manifest(hash)
			if err != nil {
				return &exitError{code: exitRuntime, msg: err.Error()}
			}
			rv, err := reviewBuild(cmd, dir, hash)
			if err != nil {
				return err
			}
			current, _ := store.Current()
			shown := buildShown{Hash: hash, Project: m.Project, Deployed: current == hash, Access: rv}
			for _, ag := range m.Agents {
				shown.Agents = append(shown.Agents, ag.Name)
			}
			for _, l := range m.Loops {
				shown.Loops = append(shown.Loops, l.Name)
			}
			for _, t := range m.Tools {
				shown.Tools = append(shown.Tools, t.Ref)
			}
			shown.Limits, shown.Roles = []string{}, m.Roles
			for _, r := range m.RateLimits {
				shown.Limits = append(shown.Limits, r.String())
			}
			shown.Budgets = []string{}
			for _, b := range m.Budgets {
				shown.Budgets = append(shown.Budgets, b.String())
			}
			if shown.Roles == nil {
				shown.Roles = map[string][]string{}
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), shown)
			}
			w := cmd.OutOrStdout()
			deployed := ""
			if shown.Deployed {
				deployed = " (deployed)"
			}
			fmt.Fprintf(w, "build %s of %s%s\n", hash, m.Project, deployed)
			fmt.Fprintf(w, "  agents: %s\n  loops:  %s\n  tools:  %s\n", strings.Join(shown.Agents, ", "), strings.Join(shown.Loops, ", "), strings.Join(shown.Tools, ", "))
			for _, role := range slices.Sorted(maps.Keys(shown.Roles)) {
				fmt.Fprintf(w, "  role %s: %s\n", role, strings.Join(shown.Roles[role], ", "))
			}
			if len(shown.Limits) > 0 {
				fmt.Fprintf(w, "  rate limits: %s\n", strings.Join(shown.Limits, "; "))
			}
			for _, b := range shown.Budgets {
				fmt.Fprintf(w, "  budget %s\n", b)
			}
			fmt.Fprintln(w)
			return writeReview(w, rv)
		},
	}
	outputFlag(cmd, &output)
	return cmd
}
