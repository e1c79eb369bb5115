// Package compiler turns a Lush project (lush.yaml, agents/*/spec.yaml, loops/*.yaml, tools/,
// skills/, policies/*.rego) into a content-addressed build: a manifest and a standard OPA bundle
// whose revision is the manifest's hash.
//
// Build runs every validation step of the seed's pipeline in one pass and reports every problem
// it finds, each with its file:line, what is wrong and how to fix it:
//
//  1. parse: YAML and Rego syntax, schema, unknown fields
//  2. models: unknown models, with suggestions
//  3. tools: local tools exist and are executable, tool classes agree, MCP servers are reachable
//  4. skills: resolution and skills.lock integrity
//  5. references: loop→agent and lush:// targets exist; agent call cycles
//  6. acl: principal formats, declared service accounts, grants against allowlists
//
// and, when there are no errors, assembles the manifest and the bundle.
package compiler

import (
	"context"
	"slices"
	"time"

	"github.com/lush-agents/lush/compiler/skills"
	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
)

// DefaultMaxCallDepth bounds agent call chains unless lush.yaml says otherwise (seed 002).
const DefaultMaxCallDepth = 5

// DefaultApprovalRisks are the risk classes that need a person's approval by default.
var DefaultApprovalRisks = []string{"destructive"}

// DefaultSkillsDir is where skills are resolved, relative to the project.
const DefaultSkillsDir = "skills"

// Option configures Build.
type Option func(*options)

type options struct {
	offline      bool
	reachTimeout time.Duration
	nodePrefixes []string
	signing      *SigningKey
	progress     func(string)
}

// Offline skips the MCP server reachability check.
func Offline(yes bool) Option { return func(o *options) { o.offline = yes } }

// ReachTimeout bounds each MCP server's reachability check (default 20s: npx may install).
func ReachTimeout(d time.Duration) Option { return func(o *options) { o.reachTimeout = d } }

// NodePrefixes are directories with npm packages installed (npm install --prefix); the
// reachability check runs packages found there without npx.
func NodePrefixes(dirs ...string) Option {
	return func(o *options) { o.nodePrefixes = append(o.nodePrefixes, dirs...) }
}

// Sign signs the bundle (OPA's .signatures.json).
func Sign(k *SigningKey) Option { return func(o *options) { o.signing = k } }

// Progress receives a line for each step that can take a while (reaching MCP servers).
func Progress(f func(msg string)) Option { return func(o *options) { o.progress = f } }

// Result is the outcome of a build.
type Result struct {
	Project     string
	Diagnostics []diag.Diagnostic
	Errors      int
	Warnings    int

	// Set only when the build has no errors.
	Manifest     *manifest.Manifest
	ManifestJSON []byte
	Hash         string
	Bundle       []byte // .tar.gz
}

// OK reports whether the build produced a manifest and bundle.
func (r *Result) OK() bool { return r.Errors == 0 && r.Manifest != nil }

// Build compiles the project in dir. Problems with the project are reported in the result's
// diagnostics; the error is only for failures that stop the build from running at all.
func Build(ctx context.Context, dir string, opts ...Option) (*Result, error) {
	o := options{reachTimeout: 20 * time.Second, progress: func(string) {}}
	for _, opt := range opts {
		opt(&o)
	}
	var l diag.List
	p, err := spec.Load(dir, &l)
	if err != nil {
		return nil, err
	}
	b := &build{ctx: ctx, opts: o, p: p, l: &l}
	b.run()
	res := &Result{Diagnostics: l.Sorted()}
	res.Errors, res.Warnings = l.Counts()
	if p.Config != nil {
		res.Project = p.Config.Name.Value
	}
	if l.HasErrors() {
		return res, nil
	}
	if err := b.assemble(res); err != nil {
		return nil, err
	}
	// Assembly can still find problems (a policy that does not compile with the data).
	res.Diagnostics = l.Sorted()
	res.Errors, res.Warnings = l.Counts()
	if res.Errors > 0 {
		res.Manifest, res.ManifestJSON, res.Hash, res.Bundle = nil, nil, "", nil
	}
	return res, nil
}

// build holds the state shared by the validation steps.
type build struct {
	ctx  context.Context
	opts options
	p    *spec.Project
	l    *diag.List

	cfg    *spec.ProjectConfig // never nil after run starts (an empty one when lush.yaml is broken)
	agents map[string]*spec.Agent
	loops  map[string]*spec.Loop
	local  map[string]*localTool      // local tools by name
	tools  map[string]*toolInfo       // every tool ref some agent allowlists
	skills map[string][]*skills.Skill // agent -> its skills, in spec order
	policy *policyModules

	targets map[string]manifest.ModelTarget // agent -> where its model runs (models.go)
}

func (b *build) run() {
	b.cfg = b.p.Config
	if b.cfg == nil {
		b.cfg = &spec.ProjectConfig{File: spec.ConfigFile}
	}
	b.indexSpecs()
	b.parsePolicies() // part of the parse step: Rego syntax and compilation

	b.l.SetStep(diag.StepModels)
	b.checkModels()

	b.l.SetStep(diag.StepTools)
	b.checkTools()

	b.l.SetStep(diag.StepSkills)
	b.checkSkills()
	b.l.SetStep(diag.StepTools)
	b.checkClassUse()

	b.l.SetStep(diag.StepReferences)
	b.checkReferences()

	b.l.SetStep(diag.StepACL)
	b.checkACL()
}

// indexSpecs indexes agents and loops by name, reporting duplicates.
func (b *build) indexSpecs() {
	b.agents = map[string]*spec.Agent{}
	for _, a := range b.p.Agents {
		if a.Name.Set() && a.Name.Value == a.Dir {
			b.agents[a.Name.Value] = a
		}
	}
	b.loops = map[string]*spec.Loop{}
	for _, lp := range b.p.Loops {
		if lp.Name.Set() {
			b.loops[lp.Name.Value] = lp
		}
	}
}

func (b *build) agentNames() []string {
	names := make([]string, 0, len(b.agents))
	for n := range b.agents {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
