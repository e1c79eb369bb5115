package authz

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// A decision is a pure function of the bundle, the parts of the input the policy's modules
// reference, and the results of the built-ins they call. analyse finds those parts: every
// reference into input, reduced to its longest constant prefix, and every use of a
// non-deterministic built-in (which makes the decision impure and the cache unusable).

// depNode is one path of the input in the dependency tree. The decision may depend on the whole
// value at the path (whole), on its type only (typ: is_object(input.x) and the like), and on the
// values at the constant paths below it (kids).
type depNode struct {
	whole bool
	typ   bool
	kids  map[string]*depNode
	names []string    // the keys of kids, sorted
	terms []*ast.Term // names as string terms, for lookups
}

func (n *depNode) child(name string) *depNode {
	if n.kids == nil {
		n.kids = map[string]*depNode{}
	}
	c := n.kids[name]
	if c == nil {
		c = &depNode{}
		n.kids[name] = c
	}
	return c
}

// add records a dependency on the value (or, with typeOnly, the type) at path.
func (n *depNode) add(path []string, typeOnly bool) {
	for _, seg := range path {
		if n.whole {
			return // already depends on everything below
		}
		n = n.child(seg)
	}
	if typeOnly {
		n.typ = true
		return
	}
	n.whole = true
}

// seal drops what a whole dependency covers and prepares the sorted lookups.
func (n *depNode) seal() {
	if n.whole {
		n.kids, n.typ = nil, false
		return
	}
	n.names = n.names[:0]
	for name, c := range n.kids {
		c.seal()
		n.names = append(n.names, name)
	}
	slices.Sort(n.names)
	n.terms = make([]*ast.Term, len(n.names))
	for i, name := range n.names {
		n.terms[i] = ast.StringTerm(name)
	}
}

// paths lists the dependencies below n, prefix being n's own path.
func (n *depNode) paths(prefix string, out []string) []string {
	if n.whole {
		return append(out, pathOrRoot(prefix))
	}
	if n.typ {
		out = append(out, "type("+pathOrRoot(prefix)+")")
	}
	for _, name := range n.names {
		out = n.kids[name].paths(joinPath(prefix, name), out)
	}
	return out
}

func pathOrRoot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// joinPath appends a key to a dotted path, quoting keys that are not identifiers.
func joinPath(prefix, key string) string {
	if !ast.IsVarCompatibleString(key) {
		return prefix + "[" + strconv.Quote(key) + "]"
	}
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// typeTests are the built-ins whose result depends only on the type of their argument.
var typeTests = map[string]bool{
	"is_object": true, "is_string": true, "is_array": true, "is_number": true,
	"is_boolean": true, "is_null": true, "is_set": true, "type_name": true,
}

// analysis is what analyse finds in a compiled bundle.
type analysis struct {
	deps *depNode
	// nondeterministic names the first call of a non-deterministic built-in, with its location;
	// empty when there is none.
	nondeterministic string
}

// analyse walks the rules that evaluating root can reach: the rules root refers to and,
// transitively, every rule they depend on in the compiler's rule graph. Rules it cannot reach
// (the mask rules, for the decision) do not make its cache key longer or turn its cache off.
func analyse(comp *ast.Compiler, root ast.Ref) analysis {
	seen := map[*ast.Rule]bool{}
	var queue []*ast.Rule
	push := func(r *ast.Rule) {
		for ; r != nil; r = r.Else {
			if !seen[r] {
				seen[r] = true
				queue = append(queue, r)
			}
		}
	}
	for _, r := range comp.GetRulesDynamicWithOpts(root, ast.RulesOptions{}) {
		push(r)
	}
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		for d := range comp.Graph.Dependencies(r) {
			push(d.(*ast.Rule))
		}
	}
	// In source order, so that the first non-deterministic call reported is the same every time.
	ordered := slices.Collect(maps.Keys(seen))
	slices.SortFunc(ordered, func(x, y *ast.Rule) int { return x.Location.Compare(y.Location) })
	a := analysis{deps: &depNode{}}
	for _, r := range ordered {
		a.rule(r)
	}
	a.deps.seal()
	return a
}

// definesMasks reports whether some project policy (package lush.policies.<name>, not a _test
// package) defines mask.
func definesMasks(modules map[string]*ast.Module) bool {
	for _, m := range modules {
		for _, r := range m.Rules {
			if isMaskRule(m, r) {
				return true
			}
		}
	}
	return false
}

func (a *analysis) rule(r *ast.Rule) {
	typeOnly := typeOnlyLocals(r)
	var vis *ast.GenericVisitor
	vis = ast.NewGenericVisitor(func(x any) bool {
		switch x := x.(type) {
		case *ast.Expr:
			if v, path, ok := inputAssignment(x); ok && typeOnly[v] {
				// x = input.path, where x is only ever type-tested.
				a.deps.add(path, true)
				return true
			}
			// A type test of a reference into input depends on the type only.
			if !x.IsCall() || !typeTests[x.Operator().String()] {
				return false
			}
			terms := x.Terms.([]*ast.Term)
			if path, ok := inputPath(terms[1]); ok {
				a.deps.add(path, true)
			} else {
				vis.Walk(terms[1])
			}
			for _, t := range terms[2:] {
				vis.Walk(t)
			}
			for _, w := range x.With {
				vis.Walk(w)
			}
			return true
		case ast.Ref:
			a.ref(x, vis)
			return true
		case ast.Var:
			if x == inputVar {
				a.deps.add(nil, false) // input as a value: everything
			}
		}
		return false
	})
	vis.Walk(r)
}

// typeOnlyLocals finds the variables of r that are bound to a reference into input (the
// compiler rewrites is_object(input) as __local1__ = input; is_object(__local1__)) and
// otherwise only ever passed to type tests.
func typeOnlyLocals(r *ast.Rule) map[ast.Var]bool {
	assigned := map[ast.Var]int{}
	tested := map[ast.Var]int{}
	ast.WalkExprs(r, func(x *ast.Expr) bool {
		if v, _, ok := inputAssignment(x); ok {
			assigned[v]++
		}
		if x.IsCall() && typeTests[x.Operator().String()] {
			if v, ok := x.Terms.([]*ast.Term)[1].Value.(ast.Var); ok {
				tested[v]++
			}
		}
		return false
	})
	if len(assigned) == 0 {
		return nil
	}
	uses := map[ast.Var]int{}
	ast.WalkVars(r, func(v ast.Var) bool {
		if _, ok := assigned[v]; ok {
			uses[v]++
		}
		return false
	})
	out := map[ast.Var]bool{}
	for v, n := range assigned {
		if n == 1 && tested[v] > 0 && uses[v] == 1+tested[v] {
			out[v] = true
		}
	}
	return out
}

// inputAssignment matches v = input.path (either way round) with a constant path.
func inputAssignment(x *ast.Expr) (ast.Var, []string, bool) {
	if !x.IsEquality() || x.Negated || len(x.With) > 0 {
		return "", nil, false
	}
	l, r := x.Operand(0), x.Operand(1)
	if _, ok := l.Value.(ast.Var); !ok {
		l, r = r, l
	}
	v, ok := l.Value.(ast.Var)
	if !ok {
		return "", nil, false
	}
	path, ok := inputPath(r)
	return v, path, ok
}

// ref records a reference: into input, its longest constant prefix; to a non-deterministic
// built-in, the impurity. Terms inside the reference (dynamic keys) are walked too.
func (a *analysis) ref(r ast.Ref, vis *ast.GenericVisitor) {
	if r.HasPrefix(ast.InputRootRef) {
		path := []string{}
		for _, t := range r[1:] {
			s, ok := t.Value.(ast.String)
			if !ok {
				break
			}
			path = append(path, string(s))
		}
		a.deps.add(path, false)
	} else if a.nondeterministic == "" {
		name := r.String()
		if b, ok := ast.BuiltinMap[name]; ok && (b.Nondeterministic || timeDependent[name]) {
			loc := ""
			if r[0].Location != nil {
				loc = fmt.Sprintf(" (%s:%d)", r[0].Location.File, r[0].Location.Row)
			}
			a.nondeterministic = name + loc
		}
	}
	if _, isVar := r[0].Value.(ast.Var); !isVar {
		vis.Walk(r[0]) // a composite or call at the head, e.g. [input.a][0]
	}
	for _, t := range r[1:] {
		vis.Walk(t)
	}
}

var inputVar = ast.InputRootRef[0].Value.(ast.Var)

// timeDependent are built-ins OPA does not mark non-deterministic whose result still depends
// on the clock: they verify certificates at the current time unless told otherwise.
var timeDependent = map[string]bool{
	"crypto.x509.parse_and_verify_certificates":              true,
	"crypto.x509.parse_and_verify_certificates_with_options": true,
}

// inputPath returns the path of a reference into input whose keys are all constant strings.
func inputPath(t *ast.Term) ([]string, bool) {
	r, ok := t.Value.(ast.Ref)
	if !ok || !r.HasPrefix(ast.InputRootRef) {
		return nil, false
	}
	path := make([]string, 0, len(r)-1)
	for _, k := range r[1:] {
		s, ok := k.Value.(ast.String)
		if !ok {
			return nil, false
		}
		path = append(path, string(s))
	}
	return path, true
}

// isMaskRule reports whether r is a mask rule of a project policy (package
// lush.policies.<name>, not a _test package).
func isMaskRule(m *ast.Module, r *ast.Rule) bool {
	pkg := m.Package.Path
	if len(pkg) != 4 || !pkg.HasPrefix(projectPolicies) {
		return false
	}
	name, ok := pkg[3].Value.(ast.String)
	if !ok || strings.HasSuffix(string(name), "_test") {
		return false
	}
	head := r.Head.Ref()
	return len(head) > 0 && head[0].Value.Compare(ast.Var("mask")) == 0
}

var projectPolicies = ast.MustParseRef("data.lush.policies")
