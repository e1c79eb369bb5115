package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/format"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

const (
	decisionQuery = "data.lush.authz.decision"
	minCoverage   = 95.0
	examplesDir   = "examples"
)

// ---------------------------------------------------------------- helpers

// parseFiles parses Rego files (v1 syntax, annotations processed), keyed by Path.
func parseFiles(t testing.TB, files []File) map[string]*ast.Module {
	t.Helper()
	mods := make(map[string]*ast.Module, len(files))
	for _, f := range files {
		m, err := ast.ParseModuleWithOpts(f.Path, string(f.Source), ast.ParserOptions{
			ProcessAnnotation: true,
			RegoVersion:       ast.RegoV1,
		})
		if err != nil {
			t.Fatalf("parse %s: %v", f.Path, err)
		}
		mods[f.Path] = m
	}
	return mods
}

func isTest(name string) bool { return strings.HasSuffix(name, "_test.rego") }

// exampleFiles reads the worked examples (policies and their tests) from disk.
func exampleFiles(t testing.TB) (policies, tests []File) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(examplesDir, "*.rego"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f := File{Path: path.Join(examplesDir, filepath.Base(name)), Source: src}
		if isTest(name) {
			tests = append(tests, f)
		} else {
			policies = append(policies, f)
		}
	}
	return policies, tests
}

func merge(ms ...map[string]*ast.Module) map[string]*ast.Module {
	out := map[string]*ast.Module{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// compileModules compiles modules with the library; it fails the test on error.
func compileModules(t testing.TB, mods map[string]*ast.Module) *ast.Compiler {
	t.Helper()
	c := ast.NewCompiler()
	if c.Compile(mods); c.Failed() {
		t.Fatalf("compile: %v", c.Errors)
	}
	return c
}

// projectModule parses a project policy module given as source.
func projectModule(t testing.TB, name, src string) map[string]*ast.Module {
	t.Helper()
	return parseFiles(t, []File{{Path: "project/" + name + ".rego", Source: []byte(src)}})
}

// evaluator is a prepared decision query over one compiled policy set and data.
type evaluator struct {
	pq       rego.PreparedEvalQuery
	compiler *ast.Compiler
}

func newEvaluator(t testing.TB, c *ast.Compiler, data map[string]any, strict bool) *evaluator {
	t.Helper()
	pq, err := rego.New(
		rego.Query(decisionQuery),
		rego.Compiler(c),
		rego.Store(inmem.NewFromObject(data)),
		rego.StrictBuiltinErrors(strict),
	).PrepareForEval(context.Background())
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	return &evaluator{pq: pq, compiler: c}
}

// decide evaluates the decision; input nil means "no input at all".
func (e *evaluator) decide(input any) (map[string]any, error) {
	var opts []rego.EvalOption
	if input != nil {
		v, err := ast.InterfaceToValue(input)
		if err != nil {
			return nil, err
		}
		opts = append(opts, rego.EvalParsedInput(v))
	}
	rs, err := e.pq.Eval(context.Background(), opts...)
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return nil, fmt.Errorf("decision undefined (%d results)", len(rs))
	}
	d, ok := rs[0].Expressions[0].Value.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("decision is %T, not an object", rs[0].Expressions[0].Value)
	}
	return d, nil
}

func mustJSON(t testing.TB, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad fixture JSON: %v", err)
	}
	return v
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// --------------------------------------------------------------- fixtures

const fsRef = "mcp://npx/@modelcontextprotocol/server-filesystem"

// quickstart is the data document of the policy contract, slightly extended.
const quickstart = `{"lush": {"project": {
  "name": "quickstart",
  "settings": {"max_depth": 5, "approval_risks": ["destructive"]},
  "service_accounts": {"digest-bot": true},
  "agents": {
    "researcher": {
      "tools": {
        "mcp://npx/@modelcontextprotocol/server-filesystem": {"access": "read", "only": ["read_file", "list_directory"]},
        "lush://writer": {"access": "read"},
        "tools/clock": {"access": "read"},
        "mcp://docs": {"access": "read"}
      },
      "acl": {"execute": {"group:engineering": true, "serviceaccount:orchestrator": true}}
    },
    "editor": {
      "tools": {"mcp://npx/@modelcontextprotocol/server-filesystem": {"access": "write"},
                "tools/shell": {"access": "write"}, "tools/unclassified": {"access": "write"}},
      "acl": {"execute": {"user:carol": true}}
    }
  },
  "loops": {
    "daily-digest": {"agent": "helper", "run_as": "serviceaccount:digest-bot",
                     "acl": {"execute": {"group:ops": true}, "read": {"group:everyone": true}}}
  },
  "roles": {"audit": {"group:auditors": true, "user:erin": true}, "approve": {"group:security": true}, "budget": {"group:finance": true}, "tasks": {"group:ops": true}},
  "grants": {
    "mcp://npx/@modelcontextprotocol/server-filesystem": {
      "group:engineering": [{"access": "read"}],
      "serviceaccount:digest-bot": [{"access": "write", "only": ["write_file"]}],
      "user:carol": [{"access": "write"}],
      "user:dave": [{"access": "read"}]
    },
    "mcp://docs": {"group:everyone": [{"access": "read"}]},
    "tools/clock": {"group:everyone": [{"access": "read"}]},
    "tools/shell": {"user:carol": [{"access": "write"}]},
    "tools/unclassified": {"user:carol": [{"access": "write"}]}
  },
  "classes": {
    "mcp://npx/@modelcontextprotocol/server-filesystem": {
      "tools": {"read_file": {"access": "read", "risk": "read"},
                "write_file": {"access": "write", "risk": "destructive"}},
      "default": {"access": "read", "risk": "read"}
    },
    "lush://writer": {"default": {"access": "read", "risk": "read"}},
    "tools/clock": {"default": {"access": "read", "risk": "read"}},
    "tools/shell": {"default": {"access": "write", "risk": "destructive"}}
  }
}}}`

func alice() map[string]any {
	return map[string]any{"id": "user:alice", "groups": []any{"group:engineering"}}
}

// readCall is a tools/call the base allows.
func readCall() map[string]any {
	return map[string]any{
		"action":      "tools/call",
		"principal":   alice(),
		"agent":       "researcher",
		"chain":       []any{"researcher"},
		"depth":       1,
		"tool":        map[string]any{"ref": fsRef, "name": "read_file"},
		"arguments":   map[string]any{"path": "/data/SENTINEL-ARGUMENT"},
		"environment": "dev",
	}
}

// with returns a copy of m with top-level keys replaced (nil value deletes).
func with(m map[string]any, kv ...any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// deniedInputs are inputs the base library denies, each for a different reason.
func deniedInputs() map[string]any {
	call := readCall()
	return map[string]any{
		"no input":             nil,
		"empty object":         map[string]any{},
		"string input":         "tools/call",
		"array input":          []any{call},
		"unknown action":       with(call, "action", "tools/delete"),
		"malformed principal":  with(call, "principal", map[string]any{"id": "alice"}),
		"unknown agent":        with(call, "agent", "ghost"),
		"no execute on agent":  with(call, "principal", map[string]any{"id": "user:dave"}),
		"tool not allowlisted": with(call, "tool", map[string]any{"ref": "tools/shell"}),
		"name narrowed out":    with(call, "tool", map[string]any{"ref": fsRef, "name": "write_file"}),
		"allowlist too low":    with(call, "tool", map[string]any{"ref": fsRef, "name": "read_file", "access": "write"}),
		"no grant":             with(call, "tool", map[string]any{"ref": "lush://writer"}),
		"grant too low": with(call, "agent", "editor", "principal", map[string]any{"id": "user:dave"},
			"tool", map[string]any{"ref": fsRef, "name": "write_file"}),
		"depth exceeded":   with(call, "depth", 6),
		"chain too long":   with(call, "chain", []any{"a", "b", "c", "d", "e", "researcher"}),
		"unknown loop":     map[string]any{"action": "loop/trigger", "principal": alice(), "loop": "ghost"},
		"no loop execute":  map[string]any{"action": "loop/trigger", "principal": alice(), "loop": "daily-digest"},
		"invoke forbidden": map[string]any{"action": "agent/invoke", "principal": map[string]any{"id": "user:eve"}, "agent": "researcher"},
		"resource narrowed": with(call, "action", "resources/read",
			"tool", map[string]any{"ref": fsRef}),
	}
}

// -------------------------------------------------------- decision checks

var (
	outcomes = map[string]bool{"deny": true, "approval_required": true, "stub": true, "allow": true}
	risks    = map[string]bool{"read": true, "write": true, "network": true, "destructive": true}
)

// entries checks a list of {"rule", "message"} objects sorted by rule then message.
func entries(v any, field string) ([][2]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is %T, not an array", field, v)
	}
	out := make([][2]string, 0, len(list))
	for i, e := range list {
		obj, ok := e.(map[string]any)
		if !ok || len(obj) != 2 {
			return nil, fmt.Errorf("%s[%d] = %v, want {rule, message}", field, i, e)
		}
		rule, ok1 := obj["rule"].(string)
		msg, ok2 := obj["message"].(string)
		if !ok1 || !ok2 || rule == "" || msg == "" {
			return nil, fmt.Errorf("%s[%d] = %v, want non-empty string rule and message", field, i, e)
		}
		out = append(out, [2]string{rule, msg})
	}
	if !sort.SliceIsSorted(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	}) {
		return nil, fmt.Errorf("%s not sorted by rule then message: %v", field, out)
	}
	return out, nil
}

// checkDecision verifies the decision object's contract; sentinel, if set, must
// not appear in any message.
func checkDecision(d map[string]any, sentinel string) error {
	if len(d) != 9 {
		return fmt.Errorf("decision has %d keys, want 9: %v", len(d), d)
	}
	allow, ok := d["allow"].(bool)
	if !ok {
		return fmt.Errorf("allow is %T", d["allow"])
	}
	stub, ok1 := d["stub"].(bool)
	appr, ok2 := d["approval_required"].(bool)
	if !ok1 || !ok2 {
		return fmt.Errorf("stub/approval_required not booleans: %v", d)
	}
	outcome, _ := d["outcome"].(string)
	if !outcomes[outcome] {
		return fmt.Errorf("outcome = %v", d["outcome"])
	}
	if a := d["access"]; a != "read" && a != "write" {
		return fmt.Errorf("access = %v", a)
	}
	if r, _ := d["risk"].(string); !risks[r] {
		return fmt.Errorf("risk = %v", d["risk"])
	}
	reasons, err := entries(d["reasons"], "reasons")
	if err != nil {
		return err
	}
	approvals, err := entries(d["approvals"], "approvals")
	if err != nil {
		return err
	}
	rulesAny, ok := d["rules"].([]any)
	if !ok {
		return fmt.Errorf("rules is %T", d["rules"])
	}
	var rules []string
	for _, r := range rulesAny {
		s, ok := r.(string)
		if !ok || s == "" {
			return fmt.Errorf("rules has %v", r)
		}
		rules = append(rules, s)
	}
	if !slices.IsSorted(rules) || len(slices.Compact(slices.Clone(rules))) != len(rules) {
		return fmt.Errorf("rules not sorted and unique: %v", rules)
	}
	want := map[bool]string{true: "allow", false: "deny"}
	switch {
	case !allow:
		if outcome != "deny" || stub || appr || len(approvals) != 0 || len(reasons) == 0 {
			return fmt.Errorf("denied decision inconsistent: %v", d)
		}
		var ids []string
		for _, r := range reasons {
			ids = append(ids, r[0])
		}
		ids = slices.Compact(ids)
		if !slices.Equal(ids, rules) {
			return fmt.Errorf("denied: rules %v != reason rules %v", rules, ids)
		}
	default:
		if len(reasons) != 0 || len(rules) == 0 {
			return fmt.Errorf("allowed decision has reasons or no rules: %v", d)
		}
		if appr != (len(approvals) > 0) {
			return fmt.Errorf("approval_required %v with approvals %v", appr, approvals)
		}
		switch {
		case appr:
			want[true] = "approval_required"
		case stub:
			want[true] = "stub"
		}
		for _, a := range approvals {
			if !slices.Contains(rules, a[0]) {
				return fmt.Errorf("approval rule %s missing from rules %v", a[0], rules)
			}
		}
	}
	if outcome != want[allow] {
		return fmt.Errorf("outcome %q, want %q: %v", outcome, want[allow], d)
	}
	if sentinel != "" {
		for _, e := range append(reasons, approvals...) {
			if strings.Contains(e[1], sentinel) {
				return fmt.Errorf("message leaks an argument value: %q", e[1])
			}
		}
	}
	return nil
}

// -------------------------------------------------------------- Rego tests

type regoRun struct {
	results []*tester.Result
	cover   *cover.Cover
}

// runRegoTests runs every test rule of mods in-process, with coverage, raising
// built-in errors (the library must not depend on errors being swallowed).
func runRegoTests(t *testing.T, mods map[string]*ast.Module) regoRun {
	t.Helper()
	ctx := context.Background()
	store := inmem.New()
	txn := storage.NewTransactionOrDie(ctx, store)
	defer store.Abort(ctx, txn)
	cov := cover.New()
	ch, err := tester.NewRunner().
		SetStore(store).
		SetModules(mods).
		SetCoverageQueryTracer(cov).
		RaiseBuiltinErrors(true).
		SetTimeout(3*time.Minute). // a bound against a hang, not a speed check: the largest table tests take tens of seconds under -race on a busy machine
		RunTests(ctx, txn)
	if err != nil {
		t.Fatalf("running Rego tests: %v", err)
	}
	var run regoRun
	run.cover = cov
	for r := range ch {
		run.results = append(run.results, r)
	}
	sort.Slice(run.results, func(i, j int) bool {
		return run.results[i].Package+"."+run.results[i].Name < run.results[j].Package+"."+run.results[j].Name
	})
	for _, r := range run.results {
		if r.Pass() {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Rego test %s.%s: ", r.Package, r.Name)
		switch {
		case r.Error != nil:
			fmt.Fprintf(&b, "ERROR: %v", r.Error)
		case r.Skip:
			b.WriteString("SKIPPED (todo_ tests are not allowed)")
		default:
			b.WriteString("FAIL")
			if r.FailedAt != nil {
				fmt.Fprintf(&b, " at %v: %v", r.FailedAt.Location, r.FailedAt)
			}
			for name, sr := range r.SubResults.Iter {
				if sr.Fail {
					fmt.Fprintf(&b, "\n    case %q: FAIL", strings.Join(name, "/"))
				}
			}
		}
		if len(r.Output) > 0 {
			fmt.Fprintf(&b, "\n    output: %s", r.Output)
		}
		t.Error(b.String())
	}
	return run
}

// TestRegoCoverage runs the library's Rego unit tests and requires line
// coverage of the library modules (tests excluded) of at least minCoverage.
func TestRegoCoverage(t *testing.T) {
	lib := parseFiles(t, Library())
	tests := parseFiles(t, Tests())
	run := runRegoTests(t, merge(lib, tests))
	if n := len(run.results); n < 50 {
		t.Errorf("only %d Rego tests ran; the library's tests are missing", n)
	}
	report := run.cover.Report(lib)
	paths := make([]string, 0, len(lib))
	for p := range lib {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var covered, notCovered int
	var perFile, uncovered strings.Builder
	sources := map[string][]string{}
	for _, f := range Library() {
		sources[f.Path] = strings.Split(string(f.Source), "\n")
	}
	for _, p := range paths {
		fr := report.Files[p]
		if fr == nil {
			fr = &cover.FileReport{}
		}
		covered += fr.CoveredLines
		notCovered += fr.NotCoveredLines
		fmt.Fprintf(&perFile, "  %-32s %6.2f%% (%d/%d lines)\n", p, fr.Coverage, fr.CoveredLines, fr.CoveredLines+fr.NotCoveredLines)
		rows := map[int]bool{}
		for _, rng := range fr.NotCovered {
			for row := rng.Start.Row; row <= rng.End.Row; row++ {
				rows[row] = true
			}
		}
		for _, row := range slices.Sorted(maps.Keys(rows)) {
			line := ""
			if row-1 < len(sources[p]) {
				line = strings.TrimSpace(sources[p][row-1])
			}
			fmt.Fprintf(&uncovered, "  %s:%d: %s\n", p, row, line)
		}
	}
	total := 100.0
	if covered+notCovered > 0 {
		total = 100 * float64(covered) / float64(covered+notCovered)
	}
	t.Logf("Rego tests: %d passed of %d", countPassed(run.results), len(run.results))
	t.Logf("Rego coverage of the library: %.2f%% (%d/%d lines)\n%s", total, covered, covered+notCovered, perFile.String())
	if uncovered.Len() > 0 {
		t.Logf("uncovered lines:\n%s", uncovered.String())
	}
	if total < minCoverage {
		t.Errorf("Rego coverage %.2f%% < %.0f%%; uncovered lines:\n%s", total, minCoverage, uncovered.String())
	}
}

func countPassed(rs []*tester.Result) int {
	n := 0
	for _, r := range rs {
		if r.Pass() {
			n++
		}
	}
	return n
}

// TestExamples runs the worked examples' tests together with the library and
// its tests (which must stay hermetic when project policies are loaded).
func TestExamples(t *testing.T) {
	examples, exampleTests := exampleFiles(t)
	if len(examples) != 4 || len(exampleTests) != 4 {
		t.Fatalf("want 4 examples and 4 example tests, got %d and %d", len(examples), len(exampleTests))
	}
	for _, f := range examples {
		if n := bytes.Count(f.Source, []byte("\n")); n > 40 {
			t.Errorf("%s has %d lines; worked examples must stay under 40", f.Path, n)
		}
	}
	run := runRegoTests(t, merge(
		parseFiles(t, Library()), parseFiles(t, Tests()),
		parseFiles(t, examples), parseFiles(t, exampleTests),
	))
	perPackage := map[string]int{}
	for _, r := range run.results {
		if r.Pass() {
			perPackage[r.Package]++
		}
	}
	for _, f := range examples {
		pkg := "data.lush.policies." + strings.TrimSuffix(path.Base(f.Path), ".rego") + "_test"
		if perPackage[pkg] == 0 {
			t.Errorf("no passing tests in %s", pkg)
		}
		t.Logf("%s: %d tests passed", pkg, perPackage[pkg])
	}
}

// TestExamplesArePackagedAsProjectPolicies checks each example is a
// lush.policies.<name> package named after its file, outside the library.
func TestExamplesArePackagedAsProjectPolicies(t *testing.T) {
	examples, _ := exampleFiles(t)
	for p, m := range parseFiles(t, examples) {
		want := "data.lush.policies." + strings.TrimSuffix(path.Base(p), ".rego")
		if got := m.Package.Path.String(); got != want {
			t.Errorf("%s: package %s, want %s", p, got, want)
		}
	}
	for _, f := range append(Library(), Tests()...) {
		if strings.Contains(f.Path, "examples") {
			t.Errorf("example %s embedded in the library", f.Path)
		}
	}
}

// Rule ids of the library: the denying rules and the allow-side rules.
var (
	denyIDs = []string{
		"lush.input.invalid", "lush.action.unknown", "lush.agent.unknown",
		"lush.acl.no_agent_execute", "lush.depth.exceeded",
		"lush.capability.not_allowlisted", "lush.capability.access_exceeded", "lush.capability.unknown_tool",
		"lush.privilege.no_grant", "lush.privilege.access_exceeded",
		"lush.loop.unknown", "lush.acl.no_loop_execute", "lush.acl.no_loop_read",
		"lush.role.no_audit", "lush.schema.invalid_arguments", "lush.tool.refused", "lush.rate.limited", "lush.default.deny",
		"lush.role.no_approve", "lush.approval.self", "lush.role.no_approval_read",
		"lush.budget.exhausted", "lush.role.no_budget", "lush.role.no_budget_read", "lush.server_request.no_call", "lush.task.not_owner",
	}
	allowIDs = []string{
		"lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant",
		"lush.acl.loop_execute", "lush.acl.loop_read", "lush.role.audit", "lush.writes.live",
		"lush.writes.stub", "lush.approval.risk", "lush.approval.granted", "lush.role.approve", "lush.role.approval_read",
		"lush.role.budget", "lush.role.budget_read", "lush.server_request.call_allowed", "lush.task.owner",
	}
	// decidingRules are the rule names whose every body must carry METADATA
	// with custom.id and a description.
	decidingRules = map[string]bool{"deny": true, "call_deny": true, "allow_rules": true, "approval": true, "stub": true, "fallback_deny": true}
)

func callsRegoMetadataRule(r *ast.Rule) bool {
	found := false
	ast.WalkTerms(r, func(x *ast.Term) bool {
		if call, ok := x.Value.(ast.Call); ok && call[0].Value.Compare(ast.MustParseRef("rego.metadata.rule")) == 0 {
			found = true
		}
		return found
	})
	return found
}

// TestMetadata checks every deciding rule body of the library carries a
// METADATA block with a unique custom.id, a title and a description, and that
// the ids are exactly the documented ones.
func TestMetadata(t *testing.T) {
	mods := parseFiles(t, Library())
	var list []*ast.Module
	for _, p := range slices.Sorted(maps.Keys(mods)) {
		list = append(list, mods[p])
	}
	as, errs := ast.BuildAnnotationSet(list)
	if len(errs) > 0 {
		t.Fatalf("annotations: %v", errs)
	}
	seen := map[string]*ast.Location{}
	for _, m := range list {
		if m.Package.Path.String() != "data.lush.authz" {
			t.Errorf("%s: package %s, want lush.authz", m.Package.Location.File, m.Package.Path)
		}
		for _, r := range m.Rules {
			name := r.Head.Ref().String()
			if !decidingRules[name] && !callsRegoMetadataRule(r) {
				continue
			}
			var id string
			var ann *ast.Annotations
			for _, a := range as.GetRuleScope(r) {
				if s, ok := a.Custom["id"].(string); ok {
					id, ann = s, a
				}
			}
			switch {
			case ann == nil || id == "":
				t.Errorf("%v: rule %s has no METADATA custom.id", r.Location, name)
				continue
			case strings.TrimSpace(ann.Description) == "" || strings.TrimSpace(ann.Title) == "":
				t.Errorf("%v: rule %s (%s) needs a title and a description", r.Location, name, id)
			case !callsRegoMetadataRule(r):
				t.Errorf("%v: rule %s (%s) does not take its id from rego.metadata.rule()", r.Location, name, id)
			}
			if prev, dup := seen[id]; dup {
				t.Errorf("%v: id %s already used at %v", r.Location, id, prev)
			}
			seen[id] = r.Location
		}
	}
	want := append(slices.Clone(denyIDs), allowIDs...)
	got := slices.Sorted(maps.Keys(seen))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("rule ids\n got %v\nwant %v", got, want)
	}
}

// TestRequiredRulesAreAllowSideIDs checks the allow-side evidence each action
// requires (decision.rego) names real allow-side rule ids.
func TestRequiredRulesAreAllowSideIDs(t *testing.T) {
	c := compileModules(t, parseFiles(t, Library()))
	rs, err := rego.New(rego.Query("data.lush.authz.required_rules"), rego.Compiler(c)).Eval(context.Background())
	if err != nil || len(rs) != 1 {
		t.Fatalf("eval required_rules: %v %v", rs, err)
	}
	for action, ids := range rs[0].Expressions[0].Value.(map[string]any) {
		for _, id := range ids.([]any) {
			if !slices.Contains(allowIDs, id.(string)) {
				t.Errorf("required_rules[%s] names %v, not an allow-side rule id", action, id)
			}
		}
	}
}

// TestLibraryCompilesStrict compiles the library in strict mode (no unused
// variables, imports or shadowing) and with every example.
func TestLibraryCompilesStrict(t *testing.T) {
	c := ast.NewCompiler().WithStrict(true)
	if c.Compile(parseFiles(t, Library())); c.Failed() {
		t.Fatalf("strict compile: %v", c.Errors)
	}
	examples, _ := exampleFiles(t)
	c = ast.NewCompiler().WithStrict(true)
	if c.Compile(merge(parseFiles(t, Library()), parseFiles(t, examples))); c.Failed() {
		t.Fatalf("strict compile with examples: %v", c.Errors)
	}
}

// TestLibraryFiles checks what Library, Tests and Digest return.
func TestLibraryFiles(t *testing.T) {
	lib, tests := Library(), Tests()
	if len(lib) < 5 || len(tests) < 5 {
		t.Fatalf("library has %d files and %d tests", len(lib), len(tests))
	}
	for name, files := range map[string][]File{"Library": lib, "Tests": tests} {
		if !slices.IsSortedFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) }) {
			t.Errorf("%s not sorted by Path", name)
		}
		for _, f := range files {
			if !strings.HasPrefix(f.Path, "lush/authz/") || !strings.HasSuffix(f.Path, ".rego") || len(f.Source) == 0 {
				t.Errorf("%s: bad file %q (%d bytes)", name, f.Path, len(f.Source))
			}
			if isTest(f.Path) != (name == "Tests") {
				t.Errorf("%s returned %s", name, f.Path)
			}
		}
	}
	for _, want := range []string{"lush/authz/decision.rego", "lush/authz/tools.rego"} {
		if !slices.ContainsFunc(lib, func(f File) bool { return f.Path == want }) {
			t.Errorf("Library lacks %s", want)
		}
	}
	// Callers get copies: mutating one does not change the library.
	lib[0].Source[0] ^= 0xff
	if Library()[0].Source[0] == lib[0].Source[0] {
		t.Error("Library returns shared byte slices")
	}

	d := Digest()
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(d) || d != Digest() {
		t.Fatalf("Digest() = %q, want stable sha256:<hex>", d)
	}
	// The digest covers paths and contents, and is not fooled by moving bytes
	// between a path and its contents.
	base := Library()
	variants := map[string]func([]File){
		"content": func(fs []File) { fs[0].Source = append(fs[0].Source, ' ') },
		"path":    func(fs []File) { fs[0].Path += "x" },
		"shift": func(fs []File) {
			fs[0].Path += string(fs[0].Source[:1])
			fs[0].Source = fs[0].Source[1:]
		},
		"dropped": func(fs []File) { fs[len(fs)-1] = File{} },
	}
	for name, mutate := range variants {
		fs := Library()
		mutate(fs)
		if digestOf(fs) == digestOf(base) {
			t.Errorf("digest unchanged by %s change", name)
		}
	}
	if digestOf(base) != d {
		t.Error("Digest() != digestOf(Library())")
	}
}

// adversarialModules are project policies (in the lush.policies namespace the
// compiler enforces) that try to turn base denials into allows.
var adversarialModules = map[string]string{
	"allow true":       "package lush.policies.evil\nallow := true\n",
	"empty deny set":   "package lush.policies.evil\ndeny := set()\n",
	"never deny":       "package lush.policies.evil\ndeny contains x if { x := \"never\"; false }\n",
	"deny false":       "package lush.policies.evil\ndeny := false\n",
	"default deny":     "package lush.policies.evil\ndefault deny := false\n",
	"deny empty array": "package lush.policies.evil\ndeny := []\n",
	"deny empty obj":   "package lush.policies.evil\ndeny := {}\n",
	"stub and approval": "package lush.policies.evil\n" +
		"stub contains \"s\"\napproval contains {\"message\": \"a\", \"rule\": \"lush.capability.allowlist\"}\n",
	"boolean stub and approval": "package lush.policies.evil\nstub := true\napproval := true\n",
	"fake decision": "package lush.policies.evil\n" +
		"decision := {\"allow\": true, \"outcome\": \"allow\", \"reasons\": [], \"rules\": []}\n" +
		"allow := true\nrules := [\"lush.acl.agent_execute\"]\nreasons := []\noutcome := \"allow\"\n",
	"fake allow rules": "package lush.policies.evil\n" +
		"allow_rules contains r if some r in [\"lush.acl.agent_execute\", \"lush.capability.allowlist\", \"lush.privilege.tool_grant\", \"lush.acl.loop_execute\", \"lush.acl.loop_read\", \"lush.role.audit\"]\n",
	"package named authz": "package lush.policies.authz\ndecision := {\"allow\": true}\nallow := true\ndeny := set()\n",
	"package named lush":  "package lush.policies.lush\nauthz := {\"decision\": {\"allow\": true}}\n",
	"spoofed rule ids": "package lush.policies.evil\n" +
		"deny contains {\"rule\": \"lush.capability.allowlist\", \"message\": \"x\"} if false\n",
	"reads the classification": "package lush.policies.evil\n" +
		"allow if data.lush.authz.classification.access == \"read\"\n",
	"test package": "package lush.policies.evil_test\ndeny := set()\nallow := true\n",
}

// TestProjectPolicyCannotAllow compiles each adversarial project module with
// the library and checks every input the base denies stays denied, with the
// base's reasons intact; inputs the base allows stay allowed.
func TestProjectPolicyCannotAllow(t *testing.T) {
	data := mustJSON(t, quickstart)
	lib := parseFiles(t, Library())
	base := newEvaluator(t, compileModules(t, lib), data, true)
	baseDecisions := map[string]map[string]any{}
	for name, input := range deniedInputs() {
		d, err := base.decide(input)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d["allow"] != false {
			t.Fatalf("fixture %q: the base allows it: %v", name, d)
		}
		baseDecisions[name] = d
	}
	for mname, src := range adversarialModules {
		t.Run(mname, func(t *testing.T) {
			ev := newEvaluator(t, compileModules(t, merge(lib, projectModule(t, "evil", src))), data, true)
			for name, input := range deniedInputs() {
				d, err := ev.decide(input)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if err := checkDecision(d, "SENTINEL"); err != nil {
					t.Errorf("%s: %v", name, err)
				}
				if d["allow"] != false || d["outcome"] != "deny" {
					t.Errorf("%s: project policy turned a denial into %v", name, d)
				}
				for _, r := range baseDecisions[name]["reasons"].([]any) {
					if !slices.ContainsFunc(d["reasons"].([]any), func(x any) bool { return jsonOf(x) == jsonOf(r) }) {
						t.Errorf("%s: base reason %v lost: %v", name, r, d["reasons"])
					}
				}
			}
			d, err := ev.decide(readCall())
			if err != nil || d["allow"] != true {
				t.Errorf("allowed read call: %v %v", d, err)
			}
		})
	}
}

// TestProjectBooleanDeny checks a project that wrote `deny if {...}` denies
// when its condition holds, naming its package, and only then.
func TestProjectBooleanDeny(t *testing.T) {
	data := mustJSON(t, quickstart)
	cases := map[string]string{
		"deny if":         "package lush.policies.prod_freeze\ndeny if input.environment == \"prod\"\n",
		"default false":   "package lush.policies.prod_freeze\ndefault deny := false\ndeny if input.environment == \"prod\"\n",
		"deny := true if": "package lush.policies.prod_freeze\ndeny := true if input.environment == \"prod\"\n",
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			c := compileModules(t, merge(parseFiles(t, Library()), projectModule(t, "freeze", src)))
			ev := newEvaluator(t, c, data, true)
			d, err := ev.decide(with(readCall(), "environment", "prod"))
			if err != nil {
				t.Fatal(err)
			}
			want := `[{"message":"project policy lush.policies.prod_freeze denies this call; its deny rule gave a boolean where a message was expected","rule":"lush.policies.prod_freeze"}]`
			if d["allow"] != false || jsonOf(d["reasons"]) != want {
				t.Errorf("prod: got %v, want a denial %s", d, want)
			}
			d, err = ev.decide(readCall())
			if err != nil || d["allow"] != true {
				t.Errorf("dev: got %v %v, want allowed", d, err)
			}
		})
	}
}

// TestProjectPolicyCycles documents that a project policy reading the
// decision itself does not compile (it would be circular): the build rejects it.
func TestProjectPolicyCycles(t *testing.T) {
	src := "package lush.policies.evil\ndeny contains \"x\" if data.lush.authz.decision.allow == false\n"
	c := ast.NewCompiler()
	if c.Compile(merge(parseFiles(t, Library()), projectModule(t, "evil", src))); !c.Failed() {
		t.Fatal("a project policy reading data.lush.authz.decision compiled; want a recursion error")
	}
	if !strings.Contains(c.Errors.Error(), "rego_recursion_error") {
		t.Errorf("want a recursion error, got %v", c.Errors)
	}
}

// TestDecisionAlwaysDefined evaluates garbage inputs against garbage data with
// strict built-in errors: the decision is always a well-formed denial.
func TestDecisionAlwaysDefined(t *testing.T) {
	c := compileModules(t, parseFiles(t, Library()))
	datas := map[string]map[string]any{
		"quickstart":       mustJSON(t, quickstart),
		"no data":          {},
		"project null":     {"lush": map[string]any{"project": nil}},
		"project string":   {"lush": map[string]any{"project": "x"}},
		"project array":    {"lush": map[string]any{"project": []any{1}}},
		"maps of garbage":  {"lush": map[string]any{"project": map[string]any{"agents": []any{}, "grants": "x", "classes": 1, "loops": nil, "settings": []any{}}}},
		"entries garbage":  mustJSON(t, `{"lush":{"project":{"agents":{"researcher":{"tools":{"tools/clock":{"access":["write"],"only":{"a":1}}},"acl":{"execute":[]}}},"grants":{"tools/clock":{"group:everyone":{"access":"write"},"user:alice":"write"}},"classes":{"tools/clock":{"tools":[],"default":[1]}},"settings":{"max_depth":"x","approval_risks":{"a":"destructive"}}}}}`),
		"policies garbage": {"lush": map[string]any{"policies": map[string]any{"x": 1, "y": map[string]any{"deny": map[string]any{"a": 1}}}}},
	}
	clock := map[string]any{"action": "tools/call", "principal": alice(), "agent": "researcher", "tool": map[string]any{"ref": "tools/clock"}}
	inputs := deniedInputs()
	inputs["read call"] = readCall()
	inputs["clock call"] = clock
	for dname, data := range datas {
		ev := newEvaluator(t, c, data, true)
		for iname, input := range inputs {
			d, err := ev.decide(input)
			if err != nil {
				t.Errorf("%s / %s: %v", dname, iname, err)
				continue
			}
			if err := checkDecision(d, "SENTINEL"); err != nil {
				t.Errorf("%s / %s: %v", dname, iname, err)
			}
			if d["allow"] == true && dname != "quickstart" {
				t.Errorf("%s / %s: allowed with broken data: %v", dname, iname, d)
			}
		}
	}
}

// ------------------------------------------------- differential testing

// oracle is an independent Go reading of the policy contract's semantics for
// the base library (no project policies). It returns the expected allow,
// stub, approval_required, access and risk.
type oracleResult struct {
	Allow, Stub, Approval bool
	Access, Risk          string
}

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }

func lookup(v any, keys ...string) (any, bool) {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func absentOrNull(m map[string]any, k string) bool { v, ok := m[k]; return !ok || v == nil }

func oracle(project map[string]any, in map[string]any) oracleResult {
	toolActions := []string{"tools/call", "tools/list"}
	contentActions := []string{"resources/list", "resources/read", "prompts/list", "prompts/get"}
	action, _ := in["action"].(string)
	isTool := slices.Contains(toolActions, action)
	isContent := slices.Contains(contentActions, action)
	isTask := action == "tasks/read" || action == "tasks/cancel"
	isAgent := isTool || isContent || isTask || action == "agent/invoke"
	isLoop := action == "loop/trigger" || action == "loop/read"
	isAudit := action == "audit/read"
	isApproval := action == "approval/read" || action == "approval/decide"
	isBudgetAPI := action == "budget/read" || action == "budget/top-up"
	tool := obj(in["tool"])
	ref, _ := tool["ref"].(string)
	name, _ := tool["name"].(string)

	// Classification. A session (a whole MCP server's tools/list) reads.
	session := action == "tools/list" && name == "" && strings.HasPrefix(ref, "mcp://")
	res := oracleResult{Access: "read", Risk: "read"}
	if session && tool["access"] == "write" {
		res.Access = "write"
	}
	if isTool && !session {
		class, ok := lookup(project, "classes", ref, "tools", name)
		if obj(class) == nil {
			class, ok = lookup(project, "classes", ref, "default")
		}
		c := obj(class)
		res.Access, res.Risk = "write", "write"
		if ok && c != nil {
			if c["access"] == "read" {
				res.Access = "read"
			}
			if r, _ := c["risk"].(string); slices.Contains([]string{"read", "write", "network", "destructive"}, r) {
				res.Risk = r
			}
		} else if r := tool["risk"]; r == "destructive" || r == "network" {
			res.Risk = r.(string)
		}
		if tool["access"] == "write" {
			res.Access = "write"
		}
	}

	// Well-formedness.
	principal := obj(in["principal"])
	id, _ := principal["id"].(string)
	validID := false
	for _, p := range []string{"user:", "group:", "serviceaccount:"} {
		validID = validID || (strings.HasPrefix(id, p) && len(id) > len(p))
	}
	match := []string{id, "group:everyone"}
	groupsOK := absentOrNull(principal, "groups")
	if gs, ok := principal["groups"].([]any); ok {
		groupsOK = true
		for _, g := range gs {
			s, ok := g.(string)
			groupsOK = groupsOK && ok && strings.HasPrefix(s, "group:") && len(s) > 6
			match = append(match, s)
		}
	}
	agent, _ := in["agent"].(string)
	loop, _ := in["loop"].(string)
	chainOK := absentOrNull(in, "chain")
	chainLen := 0
	if cs, ok := in["chain"].([]any); ok {
		chainOK, chainLen = true, len(cs)
		for _, c := range cs {
			_, isStr := c.(string)
			chainOK = chainOK && isStr
		}
	}
	depth, depthOK := 0.0, absentOrNull(in, "depth")
	switch d := in["depth"].(type) {
	case int:
		depth, depthOK = float64(d), true
	case float64:
		depth, depthOK = d, true
	}
	_, liveIsBool := in["live_writes"].(bool)
	// The fields an action uses are well formed (absent or null optional
	// fields are fine); fields it does not use are ignored.
	typed := func(m map[string]any, k string, ok func(any) bool) bool {
		v, has := m[k]
		return !has || v == nil || ok(v)
	}
	isString := func(v any) bool { _, ok := v.(string); return ok }
	oneOf := func(vs ...string) func(any) bool {
		return func(v any) bool { s, ok := v.(string); return ok && slices.Contains(vs, s) }
	}
	valid := validID && groupsOK && (isAgent || isLoop || isAudit || isApproval || isBudgetAPI)
	if isAgent {
		valid = valid && agent != "" && chainOK && depthOK
	}
	if isTool || isContent {
		valid = valid && ref != ""
	}
	if isTool {
		valid = valid && typed(tool, "name", isString) &&
			typed(tool, "access", oneOf("", "read", "write")) &&
			typed(tool, "risk", oneOf("", "read", "write", "network", "destructive"))
	}
	if action == "tools/call" {
		valid = valid && (liveIsBool || absentOrNull(in, "live_writes"))
	}
	if isLoop {
		valid = valid && loop != ""
	}
	task := obj(in["task"])
	if isTask {
		valid = valid && task != nil && isString(task["id"]) && isString(task["principal"]) &&
			isString(task["agent"]) && isString(task["decision_id"])
	}
	if !valid {
		return res
	}
	// The enforcement point's schema verdict: anything but absent, null or true denies a call.
	if v, has := tool["arguments_valid"]; action == "tools/call" && has && v != nil && v != true {
		return res
	}
	// The tool's own refusal: anything but absent, null or "" denies a call.
	if v, has := tool["refusal"]; action == "tools/call" && has && v != nil && v != "" {
		return res
	}
	// The enforcer's rate limit verdict: anything but absent, null or {exceeded: false} denies.
	if rl, has := in["rate_limit"]; has && rl != nil {
		if m, ok := rl.(map[string]any); !ok || m["exceeded"] != false {
			return res
		}
	}
	// The enforcer's budget verdict: anything but absent, null or {exhausted: false} denies.
	if b, has := in["budget"]; has && b != nil {
		if m, ok := b.(map[string]any); !ok || m["exhausted"] != false {
			return res
		}
	}
	if !groupsOK {
		match = match[:2]
	}
	holds := func(acl any) bool {
		for _, p := range match {
			if v, _ := lookup(acl, p); v == true {
				return true
			}
		}
		return false
	}
	rank := map[any]int{"read": 1, "write": 2}
	covers := func(e map[string]any, need string) bool {
		a, ok := e["access"]
		if !ok {
			a = "read"
		}
		return rank[a] > 0 && rank[a] >= rank[need]
	}
	admits := func(e map[string]any) bool {
		only, has := e["only"]
		if !has || session {
			return true
		}
		names, isArr := only.([]any)
		return isTool && isArr && slices.Contains(names, any(name))
	}

	allow := true
	if isAgent {
		a := obj(obj(obj(project)["agents"])[agent])
		maxDepth := 5.0
		if m, ok := lookup(project, "settings", "max_depth"); ok {
			if f, ok := m.(float64); ok {
				maxDepth = f
			}
		}
		allow = a != nil && holds(obj(obj(a["acl"])["execute"])) && max(depth, float64(chainLen)) <= maxDepth
		if isTool || isContent {
			entry := obj(obj(a["tools"])[ref])
			allow = allow && entry != nil && admits(entry) && covers(entry, res.Access)
			granted := false
			for _, p := range match {
				gs, _ := lookup(project, "grants", ref, p)
				list, _ := gs.([]any)
				for _, g := range list {
					if g := obj(g); g != nil && admits(g) && covers(g, res.Access) {
						granted = true
					}
				}
			}
			allow = allow && granted
		}
	}
	if isLoop {
		l := obj(obj(obj(project)["loops"])[loop])
		acl := obj(l["acl"])
		allow = l != nil && (holds(acl["execute"]) || (action == "loop/read" && holds(acl["read"])))
	}
	roles := obj(obj(project)["roles"])
	switch action {
	case "audit/read":
		allow = holds(roles["audit"])
	case "approval/read":
		allow = holds(roles["approve"]) || holds(roles["audit"])
	case "approval/decide":
		requester, _ := lookup(in, "arguments", "requester")
		allow = holds(roles["approve"]) && requester != any(id)
	case "budget/read":
		allow = holds(roles["budget"]) || holds(roles["audit"])
	case "budget/top-up":
		allow = holds(roles["budget"])
	case "tasks/read", "tasks/cancel":
		creator, _ := task["principal"].(string)
		allow = allow && (creator != "" && creator == id || holds(roles["tasks"])) && task["agent"] == agent
	}
	res.Allow = allow
	if allow && action == "tools/call" {
		res.Stub = res.Access == "write" && in["live_writes"] != true
		risks := []any{"destructive"}
		if r, ok := lookup(project, "settings", "approval_risks"); ok {
			if arr, ok := r.([]any); ok {
				risks = arr
			}
		}
		a := obj(in["approval"])
		approvalID, _ := a["id"].(string)
		approver, _ := a["approved_by"].(string)
		granted := a["status"] == "approved" && approvalID != "" && approver != ""
		res.Approval = slices.Contains(risks, any(res.Risk)) && !granted
	}
	return res
}

// randomInput starts from an input the base allows and replaces 0 to 3 of its
// fields with values drawn from pools of valid and invalid values.
func randomInput(r *rand.Rand) map[string]any {
	carol := map[string]any{"id": "user:carol"}
	ops := map[string]any{"id": "user:olga", "groups": []any{"group:ops"}}
	bases := []map[string]any{
		readCall(),
		with(readCall(), "action", "tools/list"),
		with(readCall(), "action", "resources/read", "tool", map[string]any{"ref": "mcp://docs"}),
		with(readCall(), "tool", map[string]any{"ref": "tools/clock"}),
		{"action": "tools/call", "principal": carol, "agent": "editor", "tool": map[string]any{"ref": fsRef, "name": "write_file"}},
		{"action": "tools/call", "principal": carol, "agent": "editor", "tool": map[string]any{"ref": "tools/shell"}, "live_writes": true},
		{"action": "tools/call", "principal": carol, "agent": "editor", "tool": map[string]any{"ref": "tools/unclassified"}},
		{"action": "agent/invoke", "principal": alice(), "agent": "researcher", "chain": []any{"orchestrator"}},
		{"action": "loop/read", "principal": alice(), "loop": "daily-digest"},
		{"action": "loop/trigger", "principal": ops, "loop": "daily-digest"},
		{"action": "audit/read", "principal": map[string]any{"id": "user:zoe", "groups": []any{"group:auditors"}}},
		{"action": "audit/read", "principal": map[string]any{"id": "user:erin"}},
		{"action": "approval/read", "principal": map[string]any{"id": "user:sam", "groups": []any{"group:security"}}},
		{"action": "approval/decide", "principal": map[string]any{"id": "user:sam", "groups": []any{"group:security"}}},
		{"action": "budget/read", "principal": map[string]any{"id": "user:fay", "groups": []any{"group:finance"}}},
		{"action": "budget/top-up", "principal": map[string]any{"id": "user:fay", "groups": []any{"group:finance"}}},
		with(readCall(), "budget", map[string]any{"exhausted": false, "budgets": []any{}}),
		with(readCall(), "tool", map[string]any{"ref": "tools/shell"}, "approval", map[string]any{"id": "d1", "status": "approved", "approved_by": "user:sam"}),
	}
	pick := func(vs ...any) any { return vs[r.Intn(len(vs))] }
	absent := struct{}{}
	pools := map[string]func() any{
		"action": func() any {
			return pick("tools/call", "tools/list", "resources/read", "resources/list", "prompts/get", "prompts/list",
				"agent/invoke", "loop/trigger", "loop/read", "audit/read", "approval/read", "approval/decide", "budget/read", "budget/top-up", "tools/delete", 5, absent)
		},
		"principal": func() any {
			p := map[string]any{}
			if id := pick("user:alice", "user:carol", "user:dave", "user:olga", "serviceaccount:orchestrator",
				"serviceaccount:digest-bot", "group:engineering", "user:erin", "alice", "user:", 7, absent); id != absent {
				p["id"] = id
			}
			if g := pick([]any{"group:engineering"}, []any{"group:ops"}, []any{}, nil, absent, absent,
				[]any{"group:engineering", "group:ops"}, "group:ops", []any{"user:carol"}, []any{"group:ops", 3},
				[]any{"group:auditors"}, []any{"group:finance"}); g != absent {
				p["groups"] = g
			}
			return pick(p, p, p, "user:alice", absent)
		},
		"agent": func() any { return pick("researcher", "editor", "ghost", "", 9, absent) },
		"tool": func() any {
			t := map[string]any{}
			for k, v := range map[string]any{
				"ref":             pick(fsRef, fsRef, "tools/clock", "tools/shell", "tools/unclassified", "lush://writer", "mcp://docs", "mcp://nowhere", "", 1, absent),
				"name":            pick("read_file", "write_file", "list_directory", "move_file", "", nil, 3, absent, absent),
				"access":          pick("read", "write", "", nil, "admin", absent, absent, absent),
				"risk":            pick("read", "write", "network", "destructive", "", "huge", absent, absent, absent),
				"arguments_valid": pick(true, false, nil, "false", absent, absent, absent, absent),
				"schema_errors":   pick([]any{"/path: expected string, got number"}, []any{"/a: x", 3}, "x", absent, absent, absent),
				"refusal":         pick("not_allowed: \"rm\" is not allowed; allowed: ls", "", nil, 3, absent, absent, absent, absent, absent),
			} {
				if v != absent {
					t[k] = v
				}
			}
			return pick(t, t, t, t, "tools/clock", absent)
		},
		"chain": func() any {
			return pick([]any{"researcher"}, []any{"a", "b", "c", "d", "e", "f"}, []any{}, nil, "a", []any{1}, absent)
		},
		"depth":       func() any { return pick(0, 1, 5, 6, 2.5, "1", nil, absent) },
		"live_writes": func() any { return pick(true, false, nil, "true", absent) },
		"loop":        func() any { return pick("daily-digest", "ghost", "", 4, absent) },
		"environment": func() any { return pick("dev", "prod", 3, absent) },
		"rate_limit": func() any {
			return pick(map[string]any{"exceeded": true, "limit": "user:alice 5/s burst 10", "retry_after_ms": 200},
				map[string]any{"exceeded": false}, map[string]any{"limit": "x"}, nil, "x", absent, absent)
		},
		"budget": func() any {
			exhausted := map[string]any{"name": "calls", "subject": "researcher", "unit": "tool_calls", "per": "day", "limit": 2, "used": 2,
				"granted": 0, "remaining": 0, "cost": 1, "period_end": "2026-11-26T00:00:00Z"}
			return pick(map[string]any{"exhausted": true, "budgets": []any{exhausted}}, map[string]any{"exhausted": false, "budgets": []any{}},
				map[string]any{"exhausted": true, "error": "usage cannot be read"}, map[string]any{"budgets": []any{exhausted}},
				map[string]any{"exhausted": "false"}, nil, "x", absent, absent)
		},
		"approval": func() any {
			return pick(map[string]any{"id": "d1", "status": "approved", "approved_by": "user:sam"},
				map[string]any{"id": "d1", "status": "denied", "approved_by": "user:sam"},
				map[string]any{"id": "", "status": "approved", "approved_by": "user:sam"},
				map[string]any{"id": "d1", "status": "approved"}, "approved", nil, absent, absent)
		},
	}
	fields := slices.Sorted(maps.Keys(pools))
	in := with(bases[r.Intn(len(bases))])
	for range r.Intn(4) {
		f := fields[r.Intn(len(fields))]
		if v := pools[f](); v == absent {
			delete(in, f)
		} else {
			in[f] = v
		}
	}
	in["arguments"] = pick(map[string]any{"path": "SENTINEL-ARGUMENT"}, []any{"SENTINEL-ARGUMENT"},
		map[string]any{"path": "SENTINEL-ARGUMENT", "requester": pick("user:sam", "user:alice", 3)})
	return in
}

// randomTaskInput is a random input (randomInput's) made an operation on a task: tasks/read or
// tasks/cancel (or now and then not), with a random task. It has a random source of its own, so
// that randomInput's sequence stays what the other tests have seen.
func randomTaskInput(r *rand.Rand) map[string]any {
	pick := func(vs ...any) any { return vs[r.Intn(len(vs))] }
	absent := struct{}{}
	in := randomInput(r)
	if r.Intn(2) == 0 { // a well-formed base, so that task decisions are allowed too
		in = map[string]any{"principal": pick(alice(), alice(), map[string]any{"id": "user:olga", "groups": []any{"group:ops", "group:engineering"}},
			map[string]any{"id": "user:carol"}), "agent": pick("researcher", "researcher", "editor"), "chain": []any{"researcher"}, "depth": 1,
			"tool": map[string]any{"ref": "mcp://docs"}}
	}
	in["action"] = pick("tasks/read", "tasks/cancel", "tasks/read", "tasks/cancel", "tools/call")
	task := map[string]any{}
	for k, v := range map[string]any{
		"id":          pick("task-1", "task-1", "task-1", "task-1", "", 3, absent),
		"principal":   pick("user:alice", "user:alice", "user:alice", "user:alice", "user:carol", "group:engineering", "", nil, absent),
		"agent":       pick("researcher", "researcher", "researcher", "researcher", "editor", 1, absent),
		"decision_id": pick("d1", "d1", "d1", "d1", 2, absent),
	} {
		if v != absent {
			task[k] = v
		}
	}
	if v := pick(task, task, task, task, "task-1", nil, absent); v != absent {
		in["task"] = v
	}
	return in
}

// TestDecisionMatchesOracle compares the library with the Go oracle on random
// inputs (fixed seed, so failures reproduce) and checks the decision contract.
func TestDecisionMatchesOracle(t *testing.T) {
	data := mustJSON(t, quickstart)
	project := obj(obj(data["lush"])["project"])
	ev := newEvaluator(t, compileModules(t, parseFiles(t, Library())), data, true)
	seed := int64(20260105)
	if s := os.Getenv("LUSH_POLICY_SEED"); s != "" { // explore: LUSH_POLICY_SEED=n go test -run Oracle
		fmt.Sscan(s, &seed)
	}
	r := rand.New(rand.NewSource(seed))
	tr := rand.New(rand.NewSource(seed + 1)) // task inputs
	n := 4000
	if testing.Short() {
		n = 500
	}
	// The fast validity check must agree with the problem list.
	okq, err := rego.New(
		rego.Query(`problems := data.lush.authz.input_problems
			ok := [x | data.lush.authz.input_ok; x := true]
			known := [x | data.lush.authz.known_actions[input.action]; x := true]`),
		rego.Compiler(ev.compiler),
		rego.Store(inmem.NewFromObject(data)),
		rego.StrictBuiltinErrors(true),
	).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	allowed, tasksAllowed := 0, 0
	outcomesSeen := map[string]int{}
	for i := 0; i < n+n/4; i++ {
		in := randomInput(r)
		if i >= n {
			in = randomTaskInput(tr)
		}
		d, err := ev.decide(in)
		if err != nil {
			t.Fatalf("input %s: %v", jsonOf(in), err)
		}
		v, _ := ast.InterfaceToValue(in)
		rs, err := okq.Eval(context.Background(), rego.EvalParsedInput(v))
		if err != nil || len(rs) != 1 {
			t.Fatalf("input %s: input_ok query: %v %v", jsonOf(in), rs, err)
		}
		b := rs[0].Bindings
		okFast := len(b["ok"].([]any)) == 1
		okSlow := len(b["problems"].([]any)) == 0 && len(b["known"].([]any)) == 1
		if okFast != okSlow {
			t.Fatalf("input %s: input_ok=%v but problems=%v known=%v", jsonOf(in), okFast, b["problems"], b["known"])
		}
		if err := checkDecision(d, "SENTINEL-ARGUMENT"); err != nil {
			t.Fatalf("input %s: %v", jsonOf(in), err)
		}
		want := oracle(project, in)
		got := oracleResult{
			Allow: d["allow"].(bool), Stub: d["stub"].(bool), Approval: d["approval_required"].(bool),
			Access: d["access"].(string), Risk: d["risk"].(string),
		}
		if got != want {
			t.Fatalf("input %s:\n got %+v\nwant %+v\ndecision %s", jsonOf(in), got, want, jsonOf(d))
		}
		if got.Allow {
			allowed++
			if a, _ := in["action"].(string); strings.HasPrefix(a, "tasks/") {
				tasksAllowed++
			}
		}
		outcomesSeen[d["outcome"].(string)]++
	}
	t.Logf("%d random inputs, %d allowed, outcomes %v; %d task inputs, %d allowed", n, allowed, outcomesSeen, n/4, tasksAllowed)
	if tasksAllowed == 0 {
		t.Error("no task operation was allowed: the task inputs test only denials")
	}
	if len(outcomesSeen) < 4 || allowed < n/100 {
		t.Errorf("random inputs exercise too little: %d allowed, outcomes %v", allowed, outcomesSeen)
	}
}

// enforcementShape fills in, at random, the optional fields an enforcement point always sends
// (authz.Input has chain, depth, live_writes and principal.groups), so that the inline first
// body of input_ok is exercised as much as the general ones.
func enforcementShape(r *rand.Rand, in map[string]any) map[string]any {
	if r.Intn(2) == 0 {
		return in
	}
	out := with(in)
	for k, v := range map[string]any{"chain": []any{}, "depth": 0, "live_writes": false} {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	if p, ok := out["principal"].(map[string]any); ok {
		if _, ok := p["groups"]; !ok {
			p = with(p, "groups", []any{})
			out["principal"] = p
		}
	}
	return out
}

// fastPathProjects are project policies under which the fast paths of the decision are
// compared with the full evaluation.
var fastPathProjects = map[string]string{
	"none":         "",
	"deny":         "package lush.policies.corp\ndeny contains \"no prod\" if input.environment == \"prod\"\n",
	"boolean deny": "package lush.policies.corp\ndeny if input.environment == \"prod\"\n",
	"approval":     "package lush.policies.corp\napproval contains {\"rule\": \"corp.ask\", \"message\": \"ask\"} if input.environment == \"prod\"\n",
	"stub":         "package lush.policies.corp\nstub contains \"dry run\" if input.environment == \"dev\"\n",
	"all three": "package lush.policies.corp\n" +
		"deny contains \"no\" if input.environment == 3\n" +
		"approval contains \"ask\" if data.lush.authz.classification.access == \"write\"\n" +
		"stub contains \"s\" if input.environment == \"prod\"\n",
	"adversarial": adversarialModules["fake allow rules"],
	// Values of every shape, empty or not, for deny, approval and stub (fast_read tells an empty
	// one from the others without normalizing it).
	"shapes": `package lush.policies.corp
shapes := [set(), [], false, {}, {"message": ""}, 0, [""], "", null, true, {"x"}, ["m"], {"rule": "r"}]
index := i if {
	i := {"prod": 0, "dev": 1}[input.environment]
} else := i if {
	i := {0: 2, 1: 3, 5: 4, 6: 5}[input.depth]
} else := 6
deny := shapes[[0, 1, 2, 3, 0, 1, 7][index]]
approval := shapes[[3, 2, 1, 0, 10, 0, 0][index]]
stub := shapes[[1, 0, 3, 2, 1, 12, 1][index]]
`,
	"shapes 2": `package lush.policies.corp
shapes := [set(), [], false, {}, 0, null, true, {"x": 1}, [[]], {set()}]
index := i if {
	i := {"prod": 0, "dev": 1}[input.environment]
} else := i if {
	i := {0: 2, 1: 3, 5: 4, 6: 5}[input.depth]
} else := 6
deny := shapes[[3, 2, 1, 0, 0, 0, 4][index]]
approval := shapes[[0, 5, 0, 1, 2, 9, 3][index]]
stub := shapes[[2, 3, 7, 0, 8, 6, 1][index]]
`,
}

// TestFastPathMatchesFullEvaluation compares the decision with the decision evaluated with the
// fast paths turned off (nothing_denies mocked to false), on random inputs under several
// project policies, and checks nothing_denies never holds when a deny rule fires.
//
// Each project policy runs with the index the compiler writes (authz.Index), with no index,
// and with an index that says no where the compiled one says yes (entries and principals
// removed at random, as a stale index of a project that since granted more would): the
// decision must not change. (An index that claims more than its project allows is refused by
// the engine: authz's TestEngineRefusesEditedIndex.)
func TestFastPathMatchesFullEvaluation(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 300
	}
	for _, variant := range []string{"compiled index", "odd data", "no index", "partial index"} {
		for name, src := range fastPathProjects {
			n := n
			if variant != "compiled index" {
				// The index does not depend on the project policy: two suffice.
				if name != "none" && name != "shapes" {
					continue
				}
				n /= 3
			}
			t.Run(variant+"/"+name, func(t *testing.T) {
				t.Parallel() // each has its own evaluator, data and random source
				testFastPath(t, variant, src, n)
			})
		}
	}
}

// fastPathData is the quickstart data document with the index variant.
func fastPathData(t *testing.T, variant string, r *rand.Rand) map[string]any {
	data := mustJSON(t, quickstart)
	lush := data["lush"].(map[string]any)
	if variant == "odd data" {
		oddProject(lush["project"].(map[string]any))
	}
	idx := authz.Index(lush["project"])
	switch variant {
	case "compiled index", "odd data":
		lush["index"] = idx
	case "partial index":
		lush["index"] = thinIndex(r, idx)
	}
	return data
}

// oddProject gives the quickstart project values of unexpected shapes and the cases the index
// must tell apart (a read class at a risk that needs approval, grants at other levels, acl
// values other than true), on the agents and tools randomInput calls.
func oddProject(p map[string]any) {
	agents := p["agents"].(map[string]any)
	researcher := agents["researcher"].(map[string]any)
	researcher["acl"] = map[string]any{"execute": map[string]any{"group:engineering": true, "user:carol": "yes", "user:dave": false,
		"serviceaccount:orchestrator": 1, "group:ops": true}}
	rtools := researcher["tools"].(map[string]any)
	rtools["tools/shell"] = map[string]any{"access": "admin"}
	rtools["tools/unclassified"] = map[string]any{"access": "read", "only": "list_directory"}
	rtools["mcp://docs"] = map[string]any{}
	editor := agents["editor"].(map[string]any)
	editor["acl"] = map[string]any{"execute": []any{"user:carol"}}
	agents[""] = map[string]any{"tools": map[string]any{fsRef: map[string]any{}}, "acl": map[string]any{"execute": map[string]any{"group:everyone": true}}}
	grants := p["grants"].(map[string]any)
	fs := grants[fsRef].(map[string]any)
	fs["user:alice"] = []any{"x", map[string]any{"only": []any{"list_directory", 3}}, map[string]any{"access": "admin"}}
	fs["group:ops"] = []any{map[string]any{"access": "read", "only": "read_file"}}
	fs["user:olga"] = map[string]any{"a": map[string]any{"access": "read"}}
	fs["user:carol"] = []any{map[string]any{"access": "write", "only": nil}}
	grants["mcp://docs"] = map[string]any{"group:everyone": []any{map[string]any{}}, "user:alice": "read"}
	grants["tools/shell"] = map[string]any{"group:ops": []any{map[string]any{"access": "read"}}}
	classes := p["classes"].(map[string]any)
	fsc := classes[fsRef].(map[string]any)
	fsc["tools"] = map[string]any{"read_file": map[string]any{"access": "read", "risk": "read"},
		"list_directory": map[string]any{"access": "read", "risk": "destructive"},
		"move_file":      "read", "": map[string]any{"access": "read", "risk": "huge"},
		"write_file": map[string]any{"access": "write", "risk": "destructive"}}
	classes["tools/shell"] = map[string]any{"default": map[string]any{"access": "read", "risk": "network"}}
	classes["mcp://docs"] = map[string]any{"tools": []any{"x"}, "default": map[string]any{"access": "read", "risk": "read"}}
	classes["tools/unclassified"] = map[string]any{"default": map[string]any{"access": "read", "risk": "write"}}
}

// indexGrid: a well-formed read tools/call of every agent, ref and tool name the fixtures know
// (and some they do not) by every caller, so that each entry of the index is looked up.
func indexGrid() []map[string]any {
	var out []map[string]any
	for _, agent := range []string{"researcher", "editor", ""} {
		for _, ref := range []string{fsRef, "tools/clock", "tools/shell", "tools/unclassified", "lush://writer", "mcp://docs"} {
			for _, name := range []string{"read_file", "write_file", "list_directory", "move_file", ""} {
				for _, p := range []map[string]any{alice(), {"id": "user:carol", "groups": []any{}}, {"id": "user:dave", "groups": []any{}},
					{"id": "user:olga", "groups": []any{"group:ops"}}, {"id": "serviceaccount:orchestrator", "groups": []any{}}} {
					out = append(out, map[string]any{"action": "tools/call", "principal": p, "agent": agent, "chain": []any{agent},
						"depth": 1, "live_writes": false, "tool": map[string]any{"ref": ref, "name": name}})
				}
			}
		}
	}
	return out
}

// mutatedReads are reads that fast_read decides, each with one field it reads (or one the
// well-formedness check reads) removed or replaced by a value of another type or form: the
// decision must be the full evaluation's, whether or not fast_read holds.
func mutatedReads() []map[string]any {
	const absent = "<absent>"
	values := []any{absent, nil, 0, 1.5, "", "x", true, false, []any{}, []any{"x"}, []any{1}, map[string]any{},
		"group:", "group:x", "user:", "user:x", "serviceaccount:x", "read", "write", "tools/call", "researcher", 99,
		// Approvals, rate limits and budgets of each outcome.
		map[string]any{"status": "approved", "id": "a1", "approved_by": "user:carol"}, map[string]any{"status": "approved"},
		map[string]any{"exceeded": false}, map[string]any{"exceeded": true}, map[string]any{"exhausted": false}, map[string]any{"exhausted": true}}
	// set returns a copy of m with the value at path replaced (a nested copy; absent deletes).
	var set func(m map[string]any, path []string, v any) map[string]any
	set = func(m map[string]any, path []string, v any) map[string]any {
		out := with(m)
		if len(path) > 1 {
			inner, _ := out[path[0]].(map[string]any)
			out[path[0]] = set(inner, path[1:], v)
			return out
		}
		if v == absent {
			delete(out, path[0])
		} else {
			out[path[0]] = v
		}
		return out
	}
	paths := [][]string{{"action"}, {"agent"}, {"principal"}, {"principal", "id"}, {"principal", "groups"},
		{"tool"}, {"tool", "ref"}, {"tool", "name"}, {"tool", "access"}, {"tool", "risk"}, {"tool", "arguments_valid"},
		{"tool", "refusal"}, {"chain"}, {"depth"}, {"live_writes"}, {"rate_limit"}, {"budget"}, {"approval"}}
	var out []map[string]any
	for _, p := range []map[string]any{alice(), {"id": "user:olga", "groups": []any{"group:ops"}}} {
		base := map[string]any{"action": "tools/call", "principal": p, "agent": "researcher", "chain": []any{"researcher"},
			"depth": 1, "live_writes": false, "tool": map[string]any{"ref": fsRef, "name": "read_file"}}
		for _, path := range paths {
			for _, v := range values {
				out = append(out, set(base, path, v))
			}
		}
		// One element of the groups or the chain of another type or form.
		for _, v := range values[1:] {
			out = append(out, set(base, []string{"principal", "groups"}, []any{"group:engineering", v}))
			out = append(out, set(base, []string{"chain"}, []any{v}))
		}
		out = append(out, set(base, []string{"depth"}, 6), set(base, []string{"chain"}, []any{"a", "b", "c", "d", "e", "f"}))
	}
	return out
}

// thinIndex removes, at random, agents, refs, names and principals from a compiled index
// (each entry kept with probability 4/5).
func thinIndex(r *rand.Rand, v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := map[string]any{}
	for k, x := range m {
		if k != "names" && k != "other" && k != "read" && k != "execute" && k != "risk" && r.Intn(5) == 0 {
			continue
		}
		out[k] = thinIndex(r, x)
	}
	return out
}

// fastReadByRules is fast_read as it was before data.lush.index: the agent, capability,
// privilege and class checks by the rules over data.lush.project. With the compiled index,
// fast_read must hold exactly when it does; with a partial or no index, only when it does.
const fastReadByRules = `package lush.fastcheck

import data.lush.authz

by_rules if {
	input.action == "tools/call"
	c := authz.class_entry
	c.access == "read"
	not input.tool.access == "write"
	authz.has_agent_execute
	grant
	e := data.lush.project.agents[authz.agent_name].tools[authz.tool_ref]
	is_object(e)
	name := input.tool.name
	is_string(name)
	only := object.get(e, "only", [name])
	is_array(only)
	name in only
	object.get(e, "access", "read") in {"read", "write"}
	authz.input_ok
	is_array(input.principal.groups) # fast_read wants the fields every enforcement point sends
	is_boolean(input.live_writes)
	c.risk in {"read", "write", "network", "destructive"}
	not c.risk in authz.approval_risks
	object.get(input.tool, "arguments_valid", null) in {null, true}
	object.get(input.tool, "refusal", null) in {null, ""}
	authz.depth_within
	not authz.rate_limited
	not authz.budget_exhausted
	not authz.approval_granted
	not input.approval.status == "approved" # not even one approval_granted rejects
	not authz.project_entry_given
}

grant if {
	grants := data.lush.project.grants[authz.tool_ref]
	some p in authz.principals
	some g in grants[p]
	is_object(g)
	only := object.get(g, "only", [authz.tool_name])
	is_array(only)
	authz.tool_name in only
	object.get(g, "access", "read") in {"read", "write"}
}
`

func testFastPath(t *testing.T, variant, src string, n int) {
	data := fastPathData(t, variant, rand.New(rand.NewSource(int64(len(src)))))
	{
		{
			mods := merge(parseFiles(t, Library()), projectModule(t, "fastcheck", fastReadByRules))
			if src != "" {
				mods = merge(mods, projectModule(t, "corp", src))
			}
			pq, err := rego.New(
				rego.Query(`fast := data.lush.authz.decision
					full := data.lush.authz.decision with data.lush.authz.nothing_denies as false with data.lush.authz.fast_read as false with data.lush.authz.fast_deny as false
					no_fast_read := data.lush.authz.decision with data.lush.authz.fast_read as false
					fast_applies := [x | data.lush.authz.nothing_denies; x := true]
					fast_read := [x | data.lush.authz.fast_read; x := true]
					by_rules := [x | data.lush.fastcheck.by_rules; x := true]
					fast_deny := [x | data.lush.authz.fast_deny; x := true]
					other_deny := data.lush.authz.deny
					privilege_ok := [x | data.lush.authz.privilege_ok; x := true]
					grants_matched := count(data.lush.authz.matching_grants)
					access_exceeded := [x | some d in data.lush.authz.call_deny; d.rule == "lush.privilege.access_exceeded"; x := true]
					plain := [x | data.lush.authz.plain; x := true]
					denials := data.lush.authz.denials
					allow := data.lush.authz.allow
					problems := data.lush.authz.input_problems
					ok := [x | data.lush.authz.input_ok; x := true]
					known := [x | data.lush.authz.known_actions[input.action]; x := true]`),
				rego.Compiler(compileModules(t, mods)),
				rego.Store(inmem.NewFromObject(data)),
				rego.StrictBuiltinErrors(true),
			).PrepareForEval(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewSource(20260106))
			fast, fastRead, fastDeny := 0, 0, 0
			outcomes := map[string]int{}
			grid := indexGrid()
			if variant == "compiled index" {
				grid = append(grid, mutatedReads()...)
			}
			for i := range n + len(grid) {
				var in map[string]any
				if i < len(grid) {
					in = grid[i]
				} else {
					in = enforcementShape(r, randomInput(r))
				}
				if r.Intn(3) == 0 {
					in["environment"] = []any{"prod", "dev", 3}[r.Intn(3)]
				}
				v, _ := ast.InterfaceToValue(in)
				rs, err := pq.Eval(context.Background(), rego.EvalParsedInput(v))
				if err != nil || len(rs) != 1 {
					t.Fatalf("input %s: %v %v", jsonOf(in), rs, err)
				}
				b := rs[0].Bindings
				if jsonOf(b["fast"]) != jsonOf(b["full"]) {
					t.Fatalf("input %s:\nwith fast paths %s\nfull evaluation %s", jsonOf(in), jsonOf(b["fast"]), jsonOf(b["full"]))
				}
				if jsonOf(b["fast"]) != jsonOf(b["no_fast_read"]) {
					t.Fatalf("input %s:\nwith fast_read %s\nwithout it    %s", jsonOf(in), jsonOf(b["fast"]), jsonOf(b["no_fast_read"]))
				}
				byIndex, byRules := len(b["fast_read"].([]any)) == 1, len(b["by_rules"].([]any)) == 1
				if byIndex && !byRules || variant == "compiled index" && byIndex != byRules {
					t.Fatalf("input %s: fast_read %v with the %s, %v by the rules", jsonOf(in), byIndex, variant, byRules)
				}
				if len(b["fast_read"].([]any)) == 1 {
					fastRead++
					// fast_read implies the branch below it, which implies the full evaluation.
					if len(b["fast_applies"].([]any)) != 1 || len(b["plain"].([]any)) != 1 {
						t.Fatalf("input %s: fast_read, but nothing_denies %v and plain %v", jsonOf(in), b["fast_applies"], b["plain"])
					}
				}
				// lush.privilege.access_exceeded reads the levels of the matched grants: it must fire
				// exactly when some grant matched and privilege_ok does not hold.
				if want := json.Number("0") != b["grants_matched"] && len(b["privilege_ok"].([]any)) == 0; want != (len(b["access_exceeded"].([]any)) > 0) {
					t.Fatalf("input %s: lush.privilege.access_exceeded %v, but %v grants matched and privilege_ok %v",
						jsonOf(in), b["access_exceeded"], b["grants_matched"], b["privilege_ok"])
				}
				if len(b["fast_deny"].([]any)) == 1 {
					fastDeny++
					// fast_deny: only call_deny and the project deny; the other base deny rules do not fire.
					if len(b["other_deny"].([]any)) != 0 || obj(b["fast"])["outcome"] != "deny" {
						t.Fatalf("input %s: fast_deny, but deny %v and decision %s", jsonOf(in), b["other_deny"], jsonOf(b["fast"]))
					}
				}
				if len(b["fast_applies"].([]any)) == 1 {
					fast++
					if len(b["denials"].([]any)) != 0 || b["allow"] != true {
						t.Fatalf("input %s: nothing_denies, but denials %v and allow %v", jsonOf(in), b["denials"], b["allow"])
					}
				}
				okFast := len(b["ok"].([]any)) == 1
				okSlow := len(b["problems"].([]any)) == 0 && len(b["known"].([]any)) == 1
				if okFast != okSlow {
					t.Fatalf("input %s: input_ok=%v but problems=%v known=%v", jsonOf(in), okFast, b["problems"], b["known"])
				}
				outcomes[obj(b["fast"])["outcome"].(string)]++
			}
			t.Logf("%d inputs, %d on a fast path, %d decided by fast_read, %d by fast_deny; outcomes %v", n, fast, fastRead, fastDeny, outcomes)
			if variant == "no index" && fastRead > 0 {
				t.Errorf("fast_read decided %d calls without an index", fastRead)
			}
			if variant != "compiled index" {
				fastRead = n // fewer, or none
			}
			if fast < n/10 || fastRead < n/100 || fastDeny < n/50 || outcomes["deny"] < n/10 {
				t.Errorf("random inputs exercise too little: %d on a fast path, %d by fast_read, %d by fast_deny, outcomes %v", fast, fastRead, fastDeny, outcomes)
			}
		}
	}
}

// FuzzDecision feeds arbitrary JSON inputs to the decision: it must always be
// defined, well formed and never leak the sentinel argument value.
func FuzzDecision(f *testing.F) {
	for _, in := range deniedInputs() {
		f.Add([]byte(jsonOf(in)))
	}
	f.Add([]byte(jsonOf(readCall())))
	f.Add([]byte(`{"action":"tools/call","principal":{"id":"user:carol"},"agent":"editor","tool":{"ref":"tools/shell"},"live_writes":true}`))
	f.Add([]byte(`{"action":"loop/read","principal":{"id":"user:x"},"loop":"daily-digest"}`))
	data := mustJSON(f, quickstart)
	var once sync.Once
	var ev *evaluator
	f.Fuzz(func(t *testing.T, b []byte) {
		var in any
		if json.Unmarshal(b, &in) != nil {
			t.Skip()
		}
		once.Do(func() { ev = newEvaluator(t, compileModules(t, parseFiles(t, Library())), data, true) })
		d, err := ev.decide(in)
		if err != nil {
			t.Fatalf("input %s: %v", b, err)
		}
		sentinel := "SENTINEL-ARGUMENT"
		if args, ok := lookup(in, "arguments"); ok && strings.Contains(jsonOf(args), sentinel) {
			if err := checkDecision(d, sentinel); err != nil {
				t.Fatalf("input %s: %v", b, err)
			}
		} else if err := checkDecision(d, ""); err != nil {
			t.Fatalf("input %s: %v", b, err)
		}
	})
}

// ------------------------------------------------------------- benchmarks

// generatedProject returns a project with the given number of agents and
// grants (spread over agents/10 servers), plus an input the base allows.
func generatedProject(agents, grants int) (map[string]any, map[string]any) {
	servers := max(agents/10, 1)
	agentDocs := map[string]any{}
	for i := range agents {
		tools := map[string]any{}
		for j := range 10 {
			tools[fmt.Sprintf("mcp://server-%04d", (i+j)%servers)] = map[string]any{"access": "read", "only": []any{"read_file", "list"}}
		}
		agentDocs[fmt.Sprintf("agent-%04d", i)] = map[string]any{
			"tools": tools,
			"acl":   map[string]any{"execute": map[string]any{fmt.Sprintf("group:team-%03d", i%100): true}},
		}
	}
	grantDocs := map[string]any{}
	classes := map[string]any{}
	for g := range grants {
		ref := fmt.Sprintf("mcp://server-%04d", g%servers)
		byPrincipal, _ := grantDocs[ref].(map[string]any)
		if byPrincipal == nil {
			byPrincipal = map[string]any{}
			grantDocs[ref] = byPrincipal
			classes[ref] = map[string]any{
				"tools":   map[string]any{"read_file": map[string]any{"access": "read", "risk": "read"}},
				"default": map[string]any{"access": "write", "risk": "write"},
			}
		}
		p := fmt.Sprintf("group:team-%03d", (g/servers)%100)
		list, _ := byPrincipal[p].([]any)
		byPrincipal[p] = append(list, map[string]any{"access": "read"})
	}
	data := map[string]any{"lush": map[string]any{"project": map[string]any{
		"name":     "generated",
		"settings": map[string]any{"max_depth": 5},
		"agents":   agentDocs,
		"grants":   grantDocs,
		"classes":  classes,
	}}}
	// agent-0507 is in team 7 and allowlists server-0507..0516; team 7 holds
	// grants on server g%servers for g/servers%100 == 7.
	ref := fmt.Sprintf("mcp://server-%04d", 507%servers)
	input := map[string]any{
		"action":    "tools/call",
		"principal": map[string]any{"id": "user:bench", "groups": []any{"group:team-007", "group:other"}},
		"agent":     "agent-0507",
		"chain":     []any{"agent-0507"},
		"depth":     1,
		"tool":      map[string]any{"ref": ref, "name": "read_file"},
		"arguments": map[string]any{"path": "/data/x"},
	}
	return data, input
}

type benchCase struct {
	name  string
	data  map[string]any
	input any
	allow bool
	ast   bool // store returns AST values on read (inmem.OptReturnASTValuesOnRead)
}

func benchCases(tb testing.TB) []benchCase {
	genData, genInput := generatedProject(1000, 10000)
	small := mustJSON(tb, quickstart)
	return []benchCase{
		{"small", small, readCall(), true, false},
		{"small/denied", small, with(readCall(), "principal", map[string]any{"id": "user:bob"}), false, false},
		{"small/write", small, map[string]any{"action": "tools/call", "principal": map[string]any{"id": "user:carol"},
			"agent": "editor", "tool": map[string]any{"ref": fsRef, "name": "write_file"}}, true, false},
		{"generated", genData, genInput, true, false},
		{"small/ast-store", small, readCall(), true, true},
		{"generated/ast-store", genData, genInput, true, true},
	}
}

// TestBenchmarkFixtures checks the benchmark inputs decide as intended and the
// generated project has the advertised size.
func TestBenchmarkFixtures(t *testing.T) {
	c := compileModules(t, parseFiles(t, Library()))
	for _, bc := range benchCases(t) {
		d, err := newEvaluator(t, c, bc.data, true).decide(bc.input)
		if err != nil || d["allow"] != bc.allow {
			t.Errorf("%s: %v %v, want allow=%v", bc.name, d, err, bc.allow)
		}
	}
	data, _ := generatedProject(1000, 10000)
	p := obj(obj(data["lush"])["project"])
	n := 0
	for _, byP := range obj(p["grants"]) {
		for _, l := range obj(byP) {
			n += len(l.([]any))
		}
	}
	if len(obj(p["agents"])) != 1000 || n != 10000 {
		t.Errorf("generated project has %d agents and %d grants", len(obj(p["agents"])), n)
	}
}

// BenchmarkDecision evaluates the prepared decision query; it reports ns/op
// and the p50/p99 latency of single evaluations.
//
//	go test -run '^$' -bench BenchmarkDecision -benchmem ./policies/
func BenchmarkDecision(b *testing.B) {
	c := compileModules(b, parseFiles(b, Library()))
	for _, bc := range benchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			store := inmem.NewFromObject(bc.data)
			if bc.ast {
				store = inmem.NewFromObjectWithOpts(bc.data, inmem.OptReturnASTValuesOnRead(true))
			}
			pq, err := rego.New(
				rego.Query(decisionQuery),
				rego.Compiler(c),
				rego.Store(store),
			).PrepareForEval(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			input, err := ast.InterfaceToValue(bc.input)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				rs, err := pq.Eval(ctx, rego.EvalParsedInput(input))
				lat = append(lat, time.Since(start))
				if err != nil || len(rs) != 1 {
					b.Fatalf("eval: %v %v", rs, err)
				}
			}
			b.StopTimer()
			if allow := rs0Allow(pq, ctx, input); allow != bc.allow {
				b.Fatalf("allow = %v, want %v", allow, bc.allow)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

func rs0Allow(pq rego.PreparedEvalQuery, ctx context.Context, input ast.Value) bool {
	rs, err := pq.Eval(ctx, rego.EvalParsedInput(input))
	if err != nil || len(rs) != 1 {
		return false
	}
	allow, _ := rs[0].Expressions[0].Value.(map[string]any)["allow"].(bool)
	return allow
}

// TestRegoFormatted checks every Rego file (library, tests, examples) is
// formatted as `opa fmt` would format it.
func TestRegoFormatted(t *testing.T) {
	examples, exampleTests := exampleFiles(t)
	for _, f := range slices.Concat(Library(), Tests(), examples, exampleTests) {
		got, err := format.SourceWithOpts(f.Path, f.Source, format.Opts{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Errorf("%s: %v", f.Path, err)
			continue
		}
		if !bytes.Equal(got, f.Source) {
			t.Errorf("%s is not formatted (opa fmt)", f.Path)
		}
	}
}

// BenchmarkEvalOverhead measures a prepared query of a constant of the same
// compiled library, the fixed cost of one Eval on this machine, to put the
// BenchmarkDecision numbers in perspective.
func BenchmarkEvalOverhead(b *testing.B) {
	c := compileModules(b, parseFiles(b, Library()))
	pq, err := rego.New(
		rego.Query("data.lush.authz.known_action_list"),
		rego.Compiler(c),
		rego.Store(inmem.NewFromObject(mustJSON(b, quickstart))),
	).PrepareForEval(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	input, _ := ast.InterfaceToValue(readCall())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pq.Eval(ctx, rego.EvalParsedInput(input)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEmbeddedFiles checks the embedded library and tests are exactly the
// .rego files of this directory, byte for byte.
func TestEmbeddedFiles(t *testing.T) {
	names, err := filepath.Glob("*.rego")
	if err != nil {
		t.Fatal(err)
	}
	embedded := map[string][]byte{}
	for _, f := range slices.Concat(Library(), Tests()) {
		embedded[path.Base(f.Path)] = f.Source
	}
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := embedded[name]
		switch {
		case !ok:
			t.Errorf("%s is not embedded (add it to the //go:embed list in policies.go)", name)
		case !bytes.Equal(got, src):
			t.Errorf("%s: embedded copy differs from the file", name)
		}
		delete(embedded, name)
	}
	for name := range embedded {
		t.Errorf("%s embedded but not on disk", name)
	}
}

// TestFixtureIndexIsIndexOfProject: the Rego tests' index fixture is authz.Index of their
// project fixture, as the compiler would write it.
func TestFixtureIndexIsIndexOfProject(t *testing.T) {
	pq, err := rego.New(
		rego.Query(`project := data.lush.authz_test.project; index := data.lush.authz_test.index`),
		rego.Compiler(compileModules(t, parseFiles(t, append(Library(), Tests()...)))),
	).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rs, err := pq.Eval(context.Background())
	if err != nil || len(rs) != 1 {
		t.Fatalf("%v %v", rs, err)
	}
	var project any
	if err := json.Unmarshal([]byte(jsonOf(rs[0].Bindings["project"])), &project); err != nil {
		t.Fatal(err)
	}
	if got, want := jsonOf(rs[0].Bindings["index"]), jsonOf(authz.Index(project)); got != want {
		t.Fatalf("fixtures_test.rego's index\n%s\nauthz.Index(project)\n%s", got, want)
	}
}
