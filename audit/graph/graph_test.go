package graph_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lush-agents/lush/audit/graph"
	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/manifest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func quickstart(t *testing.T) *manifest.Manifest {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../../examples/quickstart")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, ".lush"))
	res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("build: %v %v", err, res.Diagnostics)
	}
	return res.Manifest
}

// The quickstart's graph, as DOT and as Mermaid, is pinned (go test ./graph -update rewrites it).
// The revision is left out: it changes with the lushctl version.
func TestGolden(t *testing.T) {
	g := graph.Derive(quickstart(t), strings.Repeat("0", 64))
	for name, got := range map[string]string{"quickstart.dot": g.DOT(), "quickstart.mmd": g.Mermaid()} {
		path := filepath.Join("testdata", name)
		if *update {
			os.MkdirAll("testdata", 0o755)
			os.WriteFile(path, []byte(got), 0o644)
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil || string(want) != got {
			t.Errorf("%s differs (go test ./graph -update rewrites it):\n%s", path, got)
		}
	}
}

// The edges say what the build says.
func TestEdges(t *testing.T) {
	g := graph.Derive(quickstart(t), "")
	has := func(from, to, kind, label string) bool {
		for _, e := range g.Edges {
			if e.From == from && e.To == to && e.Kind == kind && (label == "" || e.Label == label) {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct{ from, to, kind, label string }{
		{"orchestrator", "researcher", graph.EdgeCalls, "read"},
		{"group:engineering", "researcher", graph.EdgeInvokes, "execute"},
		{"hourly-notes", "notifier", graph.EdgeFires, ""},
		{"hourly-notes", "serviceaccount:digest-bot", graph.EdgeRunsAs, ""},
		{"group:ops", "hourly-notes", graph.EdgeLoopACL, "execute"},
		{"researcher", "mcp://notes.example.com/mcp", graph.EdgeUses, ""},
	} {
		if !has(tc.from, tc.to, tc.kind, tc.label) {
			t.Errorf("no %s edge %s → %s (%s)", tc.kind, tc.from, tc.to, tc.label)
		}
	}
	if has("researcher", "orchestrator", graph.EdgeCalls, "") {
		t.Error("an edge the build does not have")
	}
}

// Labels that Mermaid or DOT would misread are escaped.
func TestEscaping(t *testing.T) {
	m := &manifest.Manifest{Agents: []manifest.Agent{{Name: "a", Tools: []manifest.AllowedTool{{Ref: "tools/x", Access: `read"|`}}}}}
	g := graph.Derive(m, "")
	if mm := g.Mermaid(); strings.Contains(mm, `read"|`) || !strings.Contains(mm, "read#quot;#124;") {
		t.Errorf("mermaid:\n%s", mm)
	}
	if dot := g.DOT(); !strings.Contains(dot, `label="uses (read\"|)"`) {
		t.Errorf("dot:\n%s", dot)
	}
}
