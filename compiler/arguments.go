package compiler

import (
	"maps"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
)

// Which tools' tools/call arguments can the decision read? An enforcement point that knows a
// tool's arguments are read by no rule can decide its calls without them: ext_authz from the
// MCP 2026 Mcp-Method and Mcp-Name headers, without the request body (docs/mesh.md).
//
// A rule can read the arguments of a tool when it refers to input.arguments (or to input as a
// whole, or through a key computed at run time), or depends on a rule that can; and its body
// does not rule the tool out. A body rules a tool out by a top-level condition on the call that
// is false for it: input.action is not tools/call, input.tool.ref is another reference,
// input.tool.name another name or not in a constant set. Conditions are read from the compiled
// rules, with constants defined by other rules (filesystem := "mcp://...") resolved. Anything
// else (a condition through a helper rule, a negation, `with`) rules nothing out, so the result
// may name more tools than a rule can really read, never fewer.

// toolSet is a set of tools: every tool (all), or the union of patterns.
type toolSet struct {
	all      bool
	patterns []toolPattern
}

// toolPattern is the tools of ref ("" for any reference) named in names (nil for any name).
type toolPattern struct {
	ref   string
	names []string
}

func (s toolSet) empty() bool { return !s.all && len(s.patterns) == 0 }

func (s toolSet) union(o toolSet) toolSet {
	if s.all || o.all {
		return toolSet{all: true}
	}
	return toolSet{patterns: append(slices.Clip(s.patterns), o.patterns...)}
}

// guard is what a rule body's top-level conditions require of a tools/call.
type guard struct {
	never bool     // the body cannot hold for a tools/call
	ref   string   // "" for any reference
	names []string // nil for any name
}

// restrict is the part of s that g admits.
func (g guard) restrict(s toolSet) toolSet {
	if g.never {
		return toolSet{}
	}
	if g.ref == "" && g.names == nil {
		return s
	}
	in := s.patterns
	if s.all {
		in = []toolPattern{{}}
	}
	var out []toolPattern
	for _, p := range in {
		switch {
		case g.ref != "" && p.ref != "" && g.ref != p.ref:
			continue
		case g.ref != "":
			p.ref = g.ref
		}
		if g.names != nil {
			if p.names == nil {
				p.names = g.names
			} else if p.names = intersect(p.names, g.names); len(p.names) == 0 {
				continue
			}
		}
		out = append(out, p)
	}
	return toolSet{patterns: out}
}

func intersect(a, b []string) []string {
	out := []string{}
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// argumentReads finds the tools whose arguments the decision's rules can read in the compiled
// modules.
func argumentReads(comp *ast.Compiler) *manifest.ArgumentReads {
	a := &argAnalysis{comp: comp, memo: map[*ast.Rule]toolSet{}, visiting: map[*ast.Rule]bool{}}
	var set toolSet
	for _, r := range comp.GetRulesDynamicWithOpts(ast.MustParseRef(authz.Query), ast.RulesOptions{}) {
		set = set.union(a.chain(r))
	}
	return set.manifest()
}

type argAnalysis struct {
	comp     *ast.Compiler
	memo     map[*ast.Rule]toolSet
	visiting map[*ast.Rule]bool
}

// chain is what a rule and its else branches can read: an else is evaluated when the bodies
// before it fail, so each branch is analysed on its own.
func (a *argAnalysis) chain(r *ast.Rule) toolSet {
	var s toolSet
	for ; r != nil; r = r.Else {
		s = s.union(a.rule(r))
	}
	return s
}

// rule is the tools whose arguments r can read: r's guard applied to what r reads itself and
// through the rules it depends on.
func (a *argAnalysis) rule(r *ast.Rule) toolSet {
	if s, ok := a.memo[r]; ok {
		return s
	}
	if a.visiting[r] {
		return toolSet{all: true} // Rego has no recursion; should it appear, assume the worst
	}
	a.visiting[r] = true
	defer delete(a.visiting, r)
	var reads toolSet
	if readsArguments(r) {
		reads = toolSet{all: true}
	} else {
		for d := range a.comp.Graph.Dependencies(r) {
			if reads = reads.union(a.chain(d.(*ast.Rule))); reads.all {
				break
			}
		}
	}
	s := toolSet{}
	if !reads.empty() {
		s = a.guard(r).restrict(reads)
	}
	a.memo[r] = s
	return s
}

// readsArguments reports whether r refers to input.arguments, to input as a whole or through a
// computed key, or replaces part of input with `with`.
func readsArguments(r *ast.Rule) bool {
	found := false
	ast.WalkExprs(r, func(x *ast.Expr) bool {
		for _, w := range x.With {
			if ref, ok := w.Target.Value.(ast.Ref); ok && ref.HasPrefix(ast.InputRootRef) {
				found = true
			}
		}
		return found
	})
	if found || termsRead(r.Head) {
		return true
	}
	typeOnly := typeOnlyLocals(r)
	for _, x := range r.Body {
		if typeOnlyExpr(x, typeOnly) {
			continue
		}
		if termsRead(x) {
			return true
		}
	}
	return false
}

// typeTests are the built-ins whose result depends only on the type of their argument.
var typeTests = map[string]bool{"is_object": true, "is_string": true, "is_array": true, "is_number": true,
	"is_boolean": true, "is_null": true, "is_set": true, "type_name": true}

// typeOnlyExpr reports whether x reads only the type of what it takes from input: a type test
// of a reference into input or of a type-only local, or the binding of a type-only local.
func typeOnlyExpr(x *ast.Expr, typeOnly map[ast.Var]bool) bool {
	if x.Negated && !x.IsCall() || len(x.With) > 0 {
		return false
	}
	if v, ok := inputBinding(x); ok {
		return typeOnly[v]
	}
	if !x.IsCall() || !typeTests[x.Operator().String()] || len(x.Operands()) != 1 {
		return false
	}
	switch o := x.Operand(0).Value.(type) {
	case ast.Var:
		return typeOnly[o]
	case ast.Ref:
		return o.HasPrefix(ast.InputRootRef) && o.IsGround()
	}
	return false
}

// inputBinding matches v = input... (either way round): the compiler binds input to a local
// before a built-in takes it.
func inputBinding(x *ast.Expr) (ast.Var, bool) {
	if !x.IsEquality() || x.Negated {
		return "", false
	}
	l, r := x.Operand(0), x.Operand(1)
	if _, ok := l.Value.(ast.Var); !ok {
		l, r = r, l
	}
	v, ok := l.Value.(ast.Var)
	ref, isRef := r.Value.(ast.Ref)
	if !ok || !isRef || !ref.HasPrefix(ast.InputRootRef) || !ref.IsGround() {
		return "", false
	}
	return v, true
}

// typeOnlyLocals are the locals of r bound to a reference into input once and otherwise only
// ever passed to type tests.
func typeOnlyLocals(r *ast.Rule) map[ast.Var]bool {
	bound, tested, uses := map[ast.Var]int{}, map[ast.Var]int{}, map[ast.Var]int{}
	for _, x := range r.Body {
		if v, ok := inputBinding(x); ok {
			bound[v]++
		}
		if x.IsCall() && typeTests[x.Operator().String()] && len(x.Operands()) == 1 {
			if v, ok := x.Operand(0).Value.(ast.Var); ok {
				tested[v]++
			}
		}
	}
	if len(bound) == 0 {
		return nil
	}
	ast.WalkVars(r, func(v ast.Var) bool {
		uses[v]++
		return false
	})
	out := map[ast.Var]bool{}
	for v, n := range bound {
		if n == 1 && tested[v] > 0 && uses[v] == 1+tested[v] {
			out[v] = true
		}
	}
	return out
}

// termsRead reports whether x refers to input.arguments, to input as a whole, or to a key of
// input computed at run time.
func termsRead(x any) bool {
	found := false
	var vis *ast.GenericVisitor
	vis = ast.NewGenericVisitor(func(n any) bool {
		if found {
			return true
		}
		switch v := n.(type) {
		case ast.Var:
			found = v.Equal(ast.InputRootDocument.Value)
		case ast.Ref:
			if v.HasPrefix(ast.InputRootRef) {
				if len(v) == 1 {
					found = true
				} else if key, ok := v[1].Value.(ast.String); !ok || key == "arguments" {
					found = true
				}
			} else if _, isVar := v[0].Value.(ast.Var); !isVar {
				vis.Walk(v[0])
			}
			for _, k := range v[1:] {
				vis.Walk(k)
			}
			return true
		}
		return false
	})
	vis.Walk(x)
	return found
}

// guard reads the top-level conditions of r's body on the call.
func (a *argAnalysis) guard(r *ast.Rule) guard {
	// The compiler binds operands to locals first (__local1__ = input.tool.name); a local bound
	// once at the top level stands for what it is bound to.
	bound, count := map[ast.Var]*ast.Term{}, map[ast.Var]int{}
	for _, x := range r.Body {
		if !x.IsEquality() || x.Negated || len(x.With) > 0 {
			continue
		}
		for _, o := range [][2]*ast.Term{{x.Operand(0), x.Operand(1)}, {x.Operand(1), x.Operand(0)}} {
			if v, ok := o[0].Value.(ast.Var); ok && o[1].IsGround() {
				bound[v] = o[1]
				count[v]++
			}
		}
	}
	resolve := func(t *ast.Term) *ast.Term {
		if v, ok := t.Value.(ast.Var); ok && count[v] == 1 {
			return bound[v]
		}
		return t
	}
	var g guard
	for _, x := range r.Body {
		if x.Negated || len(x.With) > 0 || !x.IsCall() {
			continue
		}
		op := x.Operator().String()
		ops := slices.Clone(x.Operands())
		for i := range ops {
			ops[i] = resolve(ops[i])
		}
		switch {
		case (op == "equal" || op == "eq") && len(ops) == 2:
			for _, o := range [][2]*ast.Term{{ops[0], ops[1]}, {ops[1], ops[0]}} {
				path, ok := inputPath(o[0])
				v, isConst := a.constant(o[1])
				s, isString := v.(ast.String)
				if !ok || !isConst || !isString {
					continue
				}
				switch strings.Join(path, ".") {
				case "action":
					g.never = g.never || string(s) != "tools/call"
				case "tool.ref":
					if g.ref != "" && g.ref != string(s) {
						g.never = true
					}
					g.ref = string(s)
				case "tool.name":
					g.names = narrow(g.names, []string{string(s)})
				}
			}
		case op == "internal.member_2" && len(ops) == 2:
			path, ok := inputPath(ops[0])
			if !ok || strings.Join(path, ".") != "tool.name" {
				continue
			}
			if names, ok := a.strings(ops[1]); ok {
				g.names = narrow(g.names, names)
			}
		}
	}
	if g.names != nil && len(g.names) == 0 {
		g.never = true
	}
	return g
}

// narrow is the names both conditions admit (nil: any).
func narrow(have, more []string) []string {
	if have == nil {
		return slices.Clone(more)
	}
	return intersect(have, more)
}

// inputPath is the path of a reference into input with constant string keys.
func inputPath(t *ast.Term) ([]string, bool) {
	r, ok := t.Value.(ast.Ref)
	if !ok || !r.HasPrefix(ast.InputRootRef) {
		return nil, false
	}
	out := make([]string, 0, len(r)-1)
	for _, k := range r[1:] {
		s, ok := k.Value.(ast.String)
		if !ok {
			return nil, false
		}
		out = append(out, string(s))
	}
	return out, true
}

// constant is the value of a ground term, or of a reference to a rule that is a constant: one
// complete definition, with no body and no else, whose value is ground.
func (a *argAnalysis) constant(t *ast.Term) (ast.Value, bool) {
	if t.IsGround() {
		if _, isRef := t.Value.(ast.Ref); !isRef {
			return t.Value, true
		}
	}
	r, ok := t.Value.(ast.Ref)
	if !ok || !r.IsGround() || !r.HasPrefix(ast.DefaultRootRef) {
		return nil, false
	}
	rules := a.comp.GetRulesExact(r)
	if len(rules) != 1 {
		return nil, false
	}
	rule := rules[0]
	if rule.Else != nil || rule.Default || rule.Head.RuleKind() != ast.SingleValue || rule.Head.Value == nil ||
		len(rule.Head.Args) > 0 || !rule.Body.Equal(ast.NewBody(ast.NewExpr(ast.BooleanTerm(true)))) || !rule.Head.Value.IsGround() {
		return nil, false
	}
	if _, isRef := rule.Head.Value.Value.(ast.Ref); isRef {
		return nil, false
	}
	return rule.Head.Value.Value, true
}

// strings are the members of a constant set or array of strings.
func (a *argAnalysis) strings(t *ast.Term) ([]string, bool) {
	v, ok := a.constant(t)
	if !ok {
		return nil, false
	}
	var out []string
	add := func(t *ast.Term) bool {
		s, ok := t.Value.(ast.String)
		out = append(out, string(s))
		return ok
	}
	all := true
	switch c := v.(type) {
	case ast.Set:
		c.Foreach(func(t *ast.Term) { all = add(t) && all })
	case *ast.Array:
		c.Foreach(func(t *ast.Term) { all = add(t) && all })
	default:
		return nil, false
	}
	return out, all
}

// manifest is the set as the manifest records it: sorted, one entry per reference and names.
func (s toolSet) manifest() *manifest.ArgumentReads {
	out := &manifest.ArgumentReads{}
	if s.all {
		out.All = true
		return out
	}
	byRef := map[string][]string{}
	whole := map[string]bool{}
	for _, p := range s.patterns {
		ref := p.ref
		if ref == "" {
			ref = manifest.AnyRef
		}
		if p.names == nil {
			whole[ref] = true
			continue
		}
		byRef[ref] = append(byRef[ref], p.names...)
	}
	if whole[manifest.AnyRef] {
		out.All = true
		return out
	}
	for ref := range whole {
		byRef[ref] = nil
	}
	for _, ref := range slices.Sorted(maps.Keys(byRef)) {
		names := byRef[ref]
		if whole[ref] {
			names = nil
		}
		out.Tools = append(out.Tools, manifest.ToolArguments{Ref: ref, Names: sortedUnique(names)})
	}
	return out
}
