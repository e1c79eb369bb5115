package compiler

import (
	"fmt"
	"path"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/policies"
)

// ProjectPackagePrefix is the namespace of project policies: package lush.policies.<name>.
const ProjectPackagePrefix = "lush.policies"

// policyModules are the parsed Rego modules that go into the bundle.
type policyModules struct {
	library map[string]*ast.Module // bundle path -> module
	project map[string]*ast.Module // project-relative path -> module
	files   []spec.PolicyFile
	// compiled is the library and the project's modules compiled together; nil when they did
	// not compile.
	compiled *ast.Compiler
}

// ParserOptions are the options every Lush component parses Rego with: Rego v1, with METADATA
// annotations processed so rules can name themselves.
var ParserOptions = ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true}

// parsePolicies parses the project's Rego, checks each package is lush.policies.<name>, and
// compiles the project's modules together with the base library.
func (b *build) parsePolicies() {
	pm := &policyModules{library: map[string]*ast.Module{}, project: map[string]*ast.Module{}}
	b.policy = pm
	for _, f := range policies.Library() {
		m, err := ast.ParseModuleWithOpts(f.Path, string(f.Source), ParserOptions)
		if err != nil {
			// The library is ours and tested; failing here is a bug in lushctl.
			b.l.Errorf(diag.Pos{File: f.Path}, "library-broken", "the base policy library does not parse: %v", err)
			return
		}
		pm.library[f.Path] = m
	}
	for _, f := range b.p.Policies {
		m, err := ast.ParseModuleWithOpts(f.Path, string(f.Source), ParserOptions)
		if err != nil {
			b.regoErrors(err, f.Path)
			continue
		}
		if !b.checkPackage(f, m) || !b.checkExtensionRules(f, m) {
			continue
		}
		pm.project[f.Path] = m
		pm.files = append(pm.files, f)
	}
	// Compile what parsed, so one broken file does not hide the problems of the others.
	c := ast.NewCompiler()
	c.Compile(pm.all())
	if c.Failed() {
		b.regoErrors(c.Errors, "")
		return
	}
	pm.compiled = c
}

func (pm *policyModules) all() map[string]*ast.Module {
	all := make(map[string]*ast.Module, len(pm.library)+len(pm.project))
	for k, v := range pm.library {
		all[k] = v
	}
	for k, v := range pm.project {
		all[k] = v
	}
	return all
}

// checkPackage enforces the project namespace. A project package anywhere else could redefine
// the base library's rules; inside lush.policies.<name> it can only add denials, approvals and
// stubs (see docs/policy.md).
func (b *build) checkPackage(f spec.PolicyFile, m *ast.Module) bool {
	pkg := strings.TrimPrefix(m.Package.Path.String(), "data.")
	parts := strings.Split(pkg, ".")
	pos := diag.Pos{File: f.Path, Line: m.Package.Location.Row, Col: m.Package.Location.Col}
	name := strings.TrimSuffix(path.Base(f.Path), ".rego")
	if len(parts) == 3 && parts[0] == "lush" && parts[1] == "policies" && ast.IsVarCompatibleString(parts[2]) {
		return true
	}
	b.l.ErrorHint(pos, "policy-package", fmt.Sprintf("write: package %s.%s", ProjectPackagePrefix, regoName(name)),
		"project policies must be in package %s.<name>, not %s", ProjectPackagePrefix, pkg)
	return false
}

// extensionRules are the rules through which a project policy acts on decisions.
var extensionRules = map[string]string{"deny": "denial", "approval": "approval requirement", "stub": "forced stub"}

// checkExtensionRules rejects deny, approval and stub written as functions: the base library
// reads them as data (data.lush.policies.<name>.deny), so a function would silently never fire.
func (b *build) checkExtensionRules(f spec.PolicyFile, m *ast.Module) bool {
	ok := true
	for _, r := range m.Rules {
		name := r.Head.Name.String()
		if len(r.Head.Reference) > 0 {
			name = r.Head.Reference[0].Value.String()
		}
		what, special := extensionRules[name]
		if !special || len(r.Head.Args) == 0 {
			continue
		}
		pos := diag.Pos{File: f.Path, Line: r.Location.Row, Col: r.Location.Col}
		b.l.ErrorHint(pos, "policy-extension-function", fmt.Sprintf("write it as a set rule: %s contains msg if { ... }", name),
			"%s is written as a function; a function never adds a %s, so this rule would never fire", name, what)
		ok = false
	}
	return ok
}

// regoName turns a file name into a Rego identifier.
func regoName(s string) string {
	out := []rune{}
	for i, r := range s {
		switch {
		case r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || (i > 0 && r >= '0' && r <= '9'):
			out = append(out, r)
		default:
			out = append(out, '_')
		}
	}
	return string(out)
}

// regoErrors reports OPA parse or compile errors at their file:line:col.
func (b *build) regoErrors(err error, fallback string) {
	errs, ok := err.(ast.Errors)
	if !ok {
		b.l.Errorf(diag.Pos{File: fallback}, "rego-error", "%v", err)
		return
	}
	for _, e := range errs {
		pos := diag.Pos{File: fallback}
		if e.Location != nil {
			pos = diag.Pos{File: e.Location.File, Line: e.Location.Row, Col: e.Location.Col}
		}
		code := "rego-" + strings.ReplaceAll(e.Code, "_", "-")
		b.l.Errorf(pos, code, "%s", e.Message)
	}
}
