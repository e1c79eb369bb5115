package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/compiler/skills"
	"github.com/lush-agents/lush/internal/diag"
)

func newSkillsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "skills",
		Short: "Manage the skills a project uses",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "lock [dir]",
		Short: "Pin the skills the agents use in skills.lock",
		Long: `Lock resolves every skill the project's agents reference from the skills directory
(skills/<registry>/<namespace>/<name>/<version>/SKILL.md) and writes skills.lock with the digest of
each skill's folder. lushctl build then refuses a skill whose folder no longer matches.
Review a skill's change before locking it again.`,
		Example: `  lushctl skills lock
  lushctl skills lock examples/quickstart`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			dir := projectDir(a)
			used, ds, err := compiler.UsedSkills(dir)
			if err != nil {
				return err
			}
			var errs []diag.Diagnostic
			for _, d := range ds {
				if d.Severity == diag.Error {
					errs = append(errs, d)
				}
			}
			if len(errs) > 0 {
				if err := diag.WriteText(cmd.ErrOrStderr(), errs); err != nil {
					return err
				}
				return failed("skills.lock not written: fix the errors above")
			}
			if err := skills.WriteLock(dir, used); err != nil {
				return err
			}
			for _, s := range used {
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", s.Ref, s.Digest)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "✓ %s pins %s\n", skills.LockFile, diag.Plural(len(used), "skill"))
			return nil
		},
	})
	return cmd
}
