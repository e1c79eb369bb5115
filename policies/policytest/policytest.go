// Package policytest runs a project's Rego unit tests (policies/*_test.rego) in-process with
// OPA's tester, against the modules and data of the project's compiled bundle, so tests see the
// real agents, grants and classes, and measures line coverage of the project's own policies
// with OPA's cover package.
package policytest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// TestFile is one Rego test file.
type TestFile struct {
	Path   string // project-relative, used in reports
	Source []byte
}

// Options tune a run.
type Options struct {
	Run     string        // only tests whose package.name matches this regular expression
	Timeout time.Duration // per test (default 10s)
}

// Report is the outcome of a run.
type Report struct {
	Tests    []Test         `json:"tests"`
	Passed   int            `json:"passed"`
	Failed   int            `json:"failed"`
	Errored  int            `json:"errored"`
	Skipped  int            `json:"skipped"`
	Coverage float64        `json:"coverage"` // percent of the project policies' lines run by the tests
	Files    []FileCoverage `json:"files"`
}

// OK reports whether every test that ran passed.
func (r *Report) OK() bool { return r.Failed == 0 && r.Errored == 0 }

// Test is one test's result.
type Test struct {
	Package  string  `json:"package"`
	Name     string  `json:"name"`
	File     string  `json:"file"`
	Line     int     `json:"line"`
	Outcome  string  `json:"outcome"` // pass, fail, error, skip
	Seconds  float64 `json:"seconds"`
	Message  string  `json:"message,omitempty"` // the failing expression or the error
	Output   string  `json:"output,omitempty"`  // print() output
	FailedAt string  `json:"failed_at,omitempty"`
}

// FileCoverage is the coverage of one project policy file.
type FileCoverage struct {
	File       string  `json:"file"`
	Coverage   float64 `json:"coverage"`
	Covered    int     `json:"covered_lines"`
	Total      int     `json:"total_lines"`
	NotCovered []int   `json:"not_covered_lines"`
}

// ParseError is a Rego test file that does not parse or compile.
type ParseError struct{ Errors ast.Errors }

func (e *ParseError) Error() string { return e.Errors.Error() }

// Run runs the tests against a bundle (as lushctl build writes it). Coverage counts the bundle's
// modules under policies/ (the project's own Rego), not the base library.
func Run(ctx context.Context, bundleData []byte, tests []TestFile, opts Options) (*Report, error) {
	b, err := bundle.NewReader(bytes.NewReader(bundleData)).WithProcessAnnotations(true).
		WithSkipBundleVerification(true).WithRegoVersion(ast.RegoV1).Read()
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	modules := map[string]*ast.Module{}
	project := map[string]*ast.Module{}
	for _, mf := range b.Modules {
		file := mf.Parsed.Package.Location.File
		modules[file] = mf.Parsed
		if strings.HasPrefix(strings.TrimPrefix(file, "/"), "policies/") {
			project[file] = mf.Parsed
		}
	}
	var perrs ast.Errors
	for _, t := range tests {
		m, err := ast.ParseModuleWithOpts(t.Path, string(t.Source), ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true})
		if err != nil {
			if errs, ok := err.(ast.Errors); ok {
				perrs = append(perrs, errs...)
				continue
			}
			return nil, fmt.Errorf("parse %s: %w", t.Path, err)
		}
		modules[t.Path] = m
	}
	if len(perrs) > 0 {
		return nil, &ParseError{perrs}
	}
	comp := ast.NewCompiler().WithEnablePrintStatements(true)
	if comp.Compile(modules); comp.Failed() {
		return nil, &ParseError{comp.Errors}
	}
	timeout := cmp.Or(opts.Timeout, 10*time.Second)
	cov := cover.New()
	data := withoutIndex(b.Data)
	results, err := runTests(ctx, comp, modules, data, timeout, opts.Run, cov, false)
	if err != nil {
		return nil, err
	}
	// OPA's tester does not say where a test failed. Run the failing tests again with tracing
	// (cheap: only those) and find the expression of the test body that failed.
	var failing []string
	for _, r := range results {
		if r.Fail {
			failing = append(failing, regexp.QuoteMeta(r.Package+"."+r.Name))
		}
	}
	where := map[string]string{}
	if len(failing) > 0 {
		traced, err := runTests(ctx, comp, modules, data, timeout, "^("+strings.Join(failing, "|")+")$", nil, true)
		if err != nil {
			return nil, err
		}
		lines := map[string][]string{}
		for _, t := range tests {
			lines[t.Path] = strings.Split(string(t.Source), "\n")
		}
		for _, r := range traced {
			if file, row, ok := failedAt(r); ok && row-1 < len(lines[file]) {
				where[r.Package+"."+r.Name] = fmt.Sprintf("%s:%d: %s", file, row, strings.TrimSpace(lines[file][row-1]))
			}
		}
	}
	rep := &Report{Tests: []Test{}, Files: []FileCoverage{}}
	for _, r := range results {
		rep.add(r, where[r.Package+"."+r.Name])
	}
	slices.SortFunc(rep.Tests, func(a, b Test) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), strings.Compare(a.Name, b.Name))
	})
	rep.coverage(cov.Report(project), project)
	return rep, nil
}

func runTests(ctx context.Context, comp *ast.Compiler, modules map[string]*ast.Module, data map[string]any,
	timeout time.Duration, filter string, cov *cover.Cover, trace bool) ([]*tester.Result, error) {
	store := inmem.NewFromObject(data)
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	defer store.Abort(ctx, txn)
	r := tester.NewRunner().
		SetCompiler(comp).
		SetStore(store).
		SetModules(modules).
		CapturePrintOutput(true).
		RaiseBuiltinErrors(true).
		EnableTracing(trace).
		SetTimeout(timeout).
		Filter(filter)
	if cov != nil {
		r = r.SetCoverageQueryTracer(cov)
	}
	ch, err := r.RunTests(ctx, txn)
	if err != nil {
		return nil, fmt.Errorf("run tests: %w", err)
	}
	var out []*tester.Result
	for res := range ch {
		out = append(out, res)
	}
	return out, nil
}

// failedAt finds, in a traced failing test, the last expression of the test's own file that
// failed: the assertion that did not hold.
func failedAt(r *tester.Result) (file string, row int, ok bool) {
	if r.Location == nil {
		return "", 0, false
	}
	for _, ev := range r.Trace {
		if ev.Op != topdown.FailOp || ev.Location == nil || ev.Location.File != r.Location.File {
			continue
		}
		if _, isExpr := ev.Node.(*ast.Expr); isExpr {
			file, row, ok = ev.Location.File, ev.Location.Row, true
		}
	}
	return file, row, ok
}

func (r *Report) add(res *tester.Result, failedAt string) {
	t := Test{Package: strings.TrimPrefix(res.Package, "data."), Name: res.Name, Seconds: res.Duration.Seconds(), Output: string(res.Output)}
	if res.Location != nil {
		t.File, t.Line = strings.TrimPrefix(res.Location.File, "/"), res.Location.Row
	}
	switch {
	case res.Error != nil:
		t.Outcome, t.Message = "error", res.Error.Error()
		r.Errored++
	case res.Skip:
		t.Outcome = "skip"
		r.Skipped++
	case res.Fail:
		t.Outcome, t.FailedAt = "fail", failedAt
		r.Failed++
	default:
		t.Outcome = "pass"
		r.Passed++
	}
	r.Tests = append(r.Tests, t)
}

func (r *Report) coverage(rep cover.Report, project map[string]*ast.Module) {
	var covered, total int
	for _, file := range slices.Sorted(maps.Keys(project)) {
		fr := rep.Files[file]
		fc := FileCoverage{File: strings.TrimPrefix(file, "/"), NotCovered: []int{}}
		if fr != nil {
			fc.Covered, fc.Total, fc.Coverage = fr.CoveredLines, fr.CoveredLines+fr.NotCoveredLines, fr.Coverage
			for _, rng := range fr.NotCovered {
				for row := rng.Start.Row; row <= rng.End.Row; row++ {
					fc.NotCovered = append(fc.NotCovered, row)
				}
			}
			slices.Sort(fc.NotCovered)
			fc.NotCovered = slices.Compact(fc.NotCovered)
		}
		covered += fc.Covered
		total += fc.Total
		r.Files = append(r.Files, fc)
	}
	r.Coverage = 100
	if total > 0 {
		r.Coverage = 100 * float64(covered) / float64(total)
	}
}

// withoutIndex returns the bundle's data without data.lush.index. The index is what the compiler
// derives from data.lush.project so that the decision's fast path is a few lookups; a test that
// mocks the project (with data.lush.project.grants as …) would otherwise be decided from the
// compiled project's index. Without it the full rules decide, which give the same decisions for
// the compiled project (the engine's differential tests) and follow the mocks.
func withoutIndex(data map[string]any) map[string]any {
	lush, ok := data["lush"].(map[string]any)
	if !ok {
		return data
	}
	if _, ok := lush["index"]; !ok {
		return data
	}
	out := maps.Clone(data)
	l := maps.Clone(lush)
	delete(l, "index")
	out["lush"] = l
	return out
}
