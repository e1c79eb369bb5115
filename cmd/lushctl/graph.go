package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/audit/graph"
	"github.com/lush-agents/lush/internal/buildstore"
)

func newGraphCmd() *cobra.Command {
	var build, format string
	cmd := &cobra.Command{
		Use:   "graph [dir]",
		Short: "Print who may call whom: principals, agents, lush:// calls, tools, loops",
		Long: `Graph derives, from the project built in memory (offline) or a kept build (--build), the graph of
who may call whom: the principals each agent's ACL lets invoke it, the agents each agent calls
through lush://, the tools in each agent's allowlist (with their access and narrowing), the loops
that fire each agent and the service accounts they run as, and who may trigger or read each loop.
The graph is computed from the build each time; nothing stores it.

Formats: dot (Graphviz), mermaid (a Mermaid flowchart: GitHub and most wikis render it), json.`,
		Example: `  lushctl graph examples/quickstart | dot -Tsvg > org.svg
  lushctl graph --format mermaid examples/quickstart
  lushctl graph --build 3fa9c1e2 --format json .`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			render := map[string]func(*graph.Graph, io.Writer) error{
				"dot":     func(g *graph.Graph, w io.Writer) error { _, err := io.WriteString(w, g.DOT()); return err },
				"mermaid": func(g *graph.Graph, w io.Writer) error { _, err := io.WriteString(w, g.Mermaid()); return err },
				"json":    func(g *graph.Graph, w io.Writer) error { return writeJSON(w, g) },
			}[format]
			if render == nil {
				return usage("--format must be dot, mermaid or json, not %q", format)
			}
			dir := projectDir(a)
			if build != "" {
				store := buildstore.ForProject(dir)
				hash, err := store.Resolve(build)
				if err != nil {
					return usage("--build: %v", err)
				}
				m, _, err := store.Manifest(hash)
				if err != nil {
					return &exitError{code: exitRuntime, msg: fmt.Sprintf("read build %s: %v", hash, err)}
				}
				return render(graph.Derive(m, hash), cmd.OutOrStdout())
			}
			res, err := compileForPolicy(cmd, dir)
			if err != nil {
				return err
			}
			return render(graph.Derive(res.Manifest, res.Hash), cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&build, "build", "", "use this kept build (hash or prefix) instead of building the project")
	cmd.Flags().StringVar(&format, "format", "dot", "dot, mermaid or json")
	return cmd
}
