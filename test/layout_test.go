package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The root of the repository shows the architecture: every Go package lives under one of these
// homes (docs/architecture.md).
var homes = []string{"agentd", "audit", "cmd", "compiler", "examples", "gateway", "internal", "mesh",
	"policies", "scheduler", "test", "vault"}

// A folderRule says what the packages under From may link, directly or through other packages
// of the module. Exactly one of Never and Only is set; entries are import paths relative to the
// module, a trailing "/" naming a whole home. Tests are not covered: a test may build a project
// with the compiler, or start a server from test/.
type folderRule struct {
	From  string
	Never []string // none of these
	Only  []string // nothing of the module outside these (nor From itself)
	Why   string
}

var folderRules = []folderRule{
	{From: "audit/", Never: []string{"gateway/", "agentd/", "scheduler/", "vault/", "internal/upstream", "internal/mcphttp"},
		Why: "the audit side reads the decision log and never acts: it does not call tools, fetch credentials, or run agents or loops"},
	{From: "agentd/", Never: []string{"gateway/", "internal/upstream", "vault/"},
		Why: "agentd acts only through the gateway's URL: it links no way to reach an MCP server, a local tool or a credential"},
	{From: "internal/", Only: []string{"internal/"},
		Why: "internal/ is the shared vocabulary and wire code every home builds on: it imports no home above it"},
	{From: "policies/", Only: []string{"policies/", "internal/"},
		Why: "the policy side (decision, enforcement, decision log) is shared by every enforcement point: it builds only on internal/"},
	{From: "", Never: []string{"test/"}, Why: "the test helpers are for tests: no program links them"},
	{From: "", Never: []string{"cmd/"}, Why: "nothing imports a program (cmd/ imports its own packages only)"},
}

// pkg is a package of the module as go list shows it, its imports (of the module only) relative
// to the module.
type pkg struct {
	Path    string
	Imports []string
}

// listPackages lists the module's packages (tests excluded) with go list, applying overlay (go
// list's -overlay file) when it is not empty.
func listPackages(t *testing.T, overlay string) (module string, pkgs map[string]pkg) {
	t.Helper()
	args := []string{"list", "-e", "-json=ImportPath,Imports,Module,Error"}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs = map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Module     struct{ Path string }
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		module = p.Module.Path
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		var imports []string
		for _, imp := range p.Imports {
			if r, ok := strings.CutPrefix(imp, module+"/"); ok {
				imports = append(imports, r)
			}
		}
		pkgs[rel] = pkg{Path: rel, Imports: imports}
	}
	return module, pkgs
}

// under reports whether path is pattern: a package, or (with a trailing "/") a home and
// everything in it.
func under(path, pattern string) bool {
	if home, ok := strings.CutSuffix(pattern, "/"); ok {
		return path == home || strings.HasPrefix(path, pattern)
	}
	return path == pattern
}

// breaks reports whether rule r forbids package from linking target. A package may always link
// the packages of its own home.
func (r folderRule) breaks(from, target string) bool {
	if r.From != "" && under(target, r.From) {
		return false
	}
	if r.Only != nil {
		return !slices.ContainsFunc(r.Only, func(p string) bool { return under(target, p) })
	}
	return slices.ContainsFunc(r.Never, func(p string) bool { return under(target, p) && !under(from, p) })
}

// violations checks every package against the folder rules. Each violation names the package,
// the import it must not have, and the chain of imports that links it.
func violations(pkgs map[string]pkg) []string {
	var out []string
	paths := make([]string, 0, len(pkgs))
	for p := range pkgs {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, from := range paths {
		for _, r := range folderRules {
			if r.From != "" && !under(from, r.From) {
				continue
			}
			// Breadth first, so that the chain reported is a shortest one.
			prev := map[string]string{from: ""}
			queue := []string{from}
			for len(queue) > 0 {
				cur := queue[0]
				queue = queue[1:]
				for _, imp := range pkgs[cur].Imports {
					if _, seen := prev[imp]; seen {
						continue
					}
					prev[imp] = cur
					if r.breaks(from, imp) {
						chain := []string{imp}
						for p := cur; p != ""; p = prev[p] {
							chain = append([]string{p}, chain...)
						}
						out = append(out, fmt.Sprintf("%s imports %s (%s): %s", from, imp, strings.Join(chain, " → "), r.Why))
						continue
					}
					queue = append(queue, imp)
				}
			}
		}
	}
	return out
}

// TestLayout: every package lives in one of the homes, and the homes import each other only as
// the folder rules allow.
func TestLayout(t *testing.T) {
	_, pkgs := listPackages(t, "")
	for p := range pkgs {
		if !slices.ContainsFunc(homes, func(h string) bool { return under(p, h+"/") }) {
			t.Errorf("package %s is not under one of the homes %v: move it (docs/architecture.md)", p, homes)
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
	// docs/architecture.md lists every package, each in a table row of its home.
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	for p := range pkgs {
		if !strings.Contains(string(doc), "| `"+p+"` |") {
			t.Errorf("docs/architecture.md does not list package %s: add a row | `%s` | its job |", p, p)
		}
	}
	// The root holds the homes and no Go code of its own.
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".go"):
			t.Errorf("%s: the root holds no Go code", name)
		case e.IsDir() && !strings.HasPrefix(name, ".") && !slices.Contains(homes, name) && name != "docs" && name != "deploy" && name != "bin":
			t.Errorf("%s/: not one of the homes %v (or docs/, deploy/)", name, homes)
		}
	}
}

// TestLayoutCatchesBadImports plants bad imports (through go list's -overlay, so the tree is not
// touched) and checks that the folder rules name each one.
func TestLayoutCatchesBadImports(t *testing.T) {
	type plant struct{ dir, pkgName, imports string }
	for _, tc := range []struct {
		name   string
		plants []plant
		want   string
	}{
		{"audit acts", []plant{{"audit/report", "report", "gateway"}}, "audit/report imports gateway (audit/report → gateway)"},
		{"agentd reaches upstreams", []plant{{"agentd", "agentd", "internal/upstream"}}, "agentd imports internal/upstream (agentd → internal/upstream)"},
		{"internal imports up", []plant{{"internal/manifest", "manifest", "policies/authz"}}, "internal/manifest imports policies/authz (internal/manifest → policies/authz)"},
		{"policies import the compiler", []plant{{"policies/budget", "budget", "compiler/spec"}}, "policies/budget imports compiler/spec (policies/budget → compiler/spec)"},
		{"a program links test helpers", []plant{{"vault", "vault", "test/mcpserver"}}, "vault imports test/mcpserver (vault → test/mcpserver)"},
		// Through a home without a rule of its own.
		{"transitively", []plant{{"audit/export", "export", "mesh/xds"}, {"mesh/xds", "xds", "gateway"}},
			"audit/export imports gateway (audit/export → mesh/xds → gateway)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root, err := filepath.Abs("..")
			if err != nil {
				t.Fatal(err)
			}
			replace := map[string]string{}
			for i, p := range tc.plants {
				src := filepath.Join(dir, fmt.Sprintf("planted%d.go", i))
				code := fmt.Sprintf("package %s\n\nimport _ %q\n", p.pkgName, "github.com/lush-agents/lush/"+p.imports)
				if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
					t.Fatal(err)
				}
				replace[filepath.Join(root, p.dir, "zz_planted.go")] = src
			}
			overlay, err := json.Marshal(map[string]any{"Replace": replace})
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "overlay.json")
			if err := os.WriteFile(file, overlay, 0o644); err != nil {
				t.Fatal(err)
			}
			_, pkgs := listPackages(t, file)
			got := violations(pkgs)
			if !slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, tc.want+":") }) {
				t.Errorf("planted %v; the rules said:\n%s\nwant a violation starting %q", tc.plants, strings.Join(got, "\n"), tc.want)
			}
		})
	}
}
