// Package authz is Lush's one policy decision function. Every enforcement point (the MCP
// gateway, the Envoy ext_authz server, agentd) builds an Input and calls Engine.Decide, which
// evaluates data.lush.authz.decision with OPA over a compiled Lush bundle.
//
// Decide fails closed: an evaluation error, a timeout or an undefined result is a Decision that
// denies, with Outcome "error" and the cause in Error.
//
// Decisions are memoized. When it is prepared, an Engine finds every part of the input that the
// rules the decision can reach read (InputDependencies), and whether any of them calls a
// non-deterministic built-in such as time.now_ns (which turns the cache off). Decide then looks
// the input, projected onto those parts, up in a bounded LRU cache (Cache) before evaluating.
// Errors and timeouts are never cached; a new bundle means a new Engine and an empty cache.
package authz

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Query is the one query every decision evaluates.
const Query = "data.lush.authz.decision"

// DefaultTimeout bounds one decision unless the caller's context is shorter.
const DefaultTimeout = 500 * time.Millisecond

// MaxBundleSize bounds a bundle read from disk.
const MaxBundleSize = 256 << 20

// Engine evaluates decisions over one bundle. It is safe for concurrent use.
type Engine struct {
	query     rego.PreparedEvalQuery
	maskQuery *rego.PreparedEvalQuery // nil when no project policy defines mask
	revision  string
	bundle    *bundle.Bundle
	timeout   time.Duration

	deps        *depNode            // what of the input the decision reads
	maskDeps    *depNode            // what of the input the masks read (nil without masks)
	cache       *lru[Decision]      // nil when caching is off
	maskCache   *lru[[]MaskOp]      // nil when caching is off or there are no masks
	cacheReason string              // why caching is off, or "" when it is on
	rules       map[string]RuleInfo // the rule ids the policy can name (Rules)
	hits        atomic.Uint64       // decisions answered from the cache
	misses      atomic.Uint64       // decisions evaluated with the cache on
	keys        sync.Pool           // *[]byte buffers for cache keys
}

// Option configures an Engine.
type Option func(*config)

type config struct {
	verify    *bundle.VerificationConfig
	timeout   time.Duration
	cacheSize int
}

// VerifyWith requires the bundle to be signed by one of keys (key id -> key); keyID, if not
// empty, is the key expected when the signature names none. An unsigned or badly signed bundle
// is refused.
func VerifyWith(keys map[string]*bundle.KeyConfig, keyID string) Option {
	return func(c *config) { c.verify = bundle.NewVerificationConfig(keys, keyID, "", nil) }
}

// Timeout bounds each decision (default DefaultTimeout).
func Timeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// Cache sets how many decisions the engine remembers (default DefaultCacheSize); 0 turns the
// cache off. A negative size is an error.
func Cache(size int) Option { return func(c *config) { c.cacheSize = size } }

// Load reads a bundle file (.tar.gz) and prepares an engine over it.
func Load(ctx context.Context, path string, opts ...Option) (*Engine, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load bundle: %w", err)
	}
	return FromBytes(ctx, data, opts...)
}

// FromBytes reads a bundle from memory and prepares an engine over it.
func FromBytes(ctx context.Context, data []byte, opts ...Option) (*Engine, error) {
	c := configure(opts)
	r := bundle.NewReader(bytes.NewReader(data)).
		WithProcessAnnotations(true).
		WithSizeLimitBytes(MaxBundleSize).
		WithRegoVersion(ast.RegoV1)
	if c.verify != nil {
		r = r.WithBundleVerificationConfig(c.verify)
	} else {
		r = r.WithSkipBundleVerification(true)
	}
	b, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("load bundle: %w", err)
	}
	return newEngine(ctx, &b, c)
}

// New prepares an engine over a bundle already in memory (unverified).
func New(ctx context.Context, b *bundle.Bundle, opts ...Option) (*Engine, error) {
	return newEngine(ctx, b, configure(opts))
}

func configure(opts []Option) config {
	c := config{timeout: DefaultTimeout, cacheSize: DefaultCacheSize}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func newEngine(ctx context.Context, b *bundle.Bundle, c config) (*Engine, error) {
	rev := b.Manifest.Revision
	if c.cacheSize < 0 {
		return nil, fmt.Errorf("prepare bundle %s: cache size %d: must be 0 (off) or more", short(rev), c.cacheSize)
	}
	comp := ast.NewCompiler().WithEnablePrintStatements(false)
	comp.Compile(b.ParsedModules("bundle"))
	if comp.Failed() {
		return nil, fmt.Errorf("compile bundle %s: %w", short(rev), comp.Errors)
	}
	data := b.Data
	if data == nil {
		data = map[string]any{}
	}
	if err := CheckIndex(b); err != nil {
		return nil, fmt.Errorf("prepare bundle %s: %w", short(rev), err)
	}
	// The store hands out AST values, so that lookups into the project are not converted
	// from Go values on every decision.
	store := inmem.NewFromObjectWithOpts(data, inmem.OptReturnASTValuesOnRead(true))
	prepare := func(query string) (rego.PreparedEvalQuery, error) {
		return rego.New(
			rego.Query(query),
			rego.Compiler(comp),
			rego.Store(store),
			rego.StrictBuiltinErrors(true), // a builtin error must deny, not silently skip a rule
		).PrepareForEval(ctx)
	}
	q, err := prepare(Query)
	if err != nil {
		return nil, fmt.Errorf("prepare bundle %s: %w", short(rev), err)
	}
	a := analyse(comp, ast.MustParseRef(Query))
	e := &Engine{query: q, revision: rev, bundle: b, timeout: c.timeout, deps: a.deps, rules: ruleCatalog(comp)}
	var m analysis
	if definesMasks(comp.Modules) {
		mq, err := prepare(MaskQuery)
		if err != nil {
			return nil, fmt.Errorf("prepare bundle %s: %w", short(rev), err)
		}
		e.maskQuery = &mq
		m = analyse(comp, ast.MustParseRef(MaskQuery))
		e.maskDeps = m.deps
	}
	switch {
	case c.cacheSize == 0:
		e.cacheReason = "the cache is off (authz.Cache(0))"
	case a.nondeterministic != "":
		e.cacheReason = "the policy calls the non-deterministic built-in " + a.nondeterministic +
			", so a decision cannot be reused"
	default:
		e.cache = newLRU[Decision](c.cacheSize)
	}
	if e.maskQuery != nil && c.cacheSize > 0 && m.nondeterministic == "" {
		e.maskCache = newLRU[[]MaskOp](c.cacheSize)
	}
	return e, nil
}

// Revision returns the bundle's revision: the manifest hash of the build.
func (e *Engine) Revision() string { return e.revision }

// Bundle returns the loaded bundle (its data and modules), for tools such as policy tests.
func (e *Engine) Bundle() *bundle.Bundle { return e.bundle }

// Decide evaluates the policy for in. It never returns an allowing decision for an error.
func (e *Engine) Decide(ctx context.Context, in Input) Decision {
	return e.decide(ctx, in)
}

// Explain evaluates the policy like Decide and also returns OPA's evaluation trace, as
// `opa eval --explain full` prints it.
func (e *Engine) Explain(ctx context.Context, in Input) (Decision, string) {
	tracer := topdown.NewBufferTracer()
	d := e.decide(ctx, in, rego.EvalQueryTracer(tracer))
	var buf bytes.Buffer
	topdown.PrettyTraceWithLocation(&buf, *tracer)
	return d, buf.String()
}

// CacheStats reports how many decisions came from the cache (hits) and how many were evaluated
// with the cache on (misses), whether the cache is on, and if it is not, why.
func (e *Engine) CacheStats() (hits, misses uint64, enabled bool, reason string) {
	return e.hits.Load(), e.misses.Load(), e.cache != nil, e.cacheReason
}

// InputDependencies lists, sorted, the parts of the input the decision's rules can read: the
// paths whose values decisions depend on ("action", "arguments.path", "tool.name"; "." is the
// whole input) and, as "type(path)", the paths of which only the type matters. It is what the
// cache keys on.
func (e *Engine) InputDependencies() []string {
	out := e.deps.paths("", nil)
	slices.Sort(out)
	return out
}

func (e *Engine) decide(ctx context.Context, in Input, extra ...rego.EvalOption) Decision {
	if e.cache == nil || len(extra) > 0 || ctx.Err() != nil {
		return e.evalInput(ctx, in, nil, extra)
	}
	buf := e.keyBuffer()
	defer e.keys.Put(buf)
	key, args, err := appendInputKey((*buf)[:0], e.deps, &in)
	*buf = key
	if err != nil {
		return e.evalInput(ctx, in, nil, nil) // fails the same way, uncached
	}
	if d, ok := e.cache.get(key); ok {
		e.hits.Add(1)
		return d.clone()
	}
	e.misses.Add(1)
	// The arguments were converted once, for the key; evaluation reuses them.
	d := e.evalInput(ctx, in, args, nil)
	if d.Outcome != OutcomeError { // errors and timeouts are never cached
		e.cache.put(key, d.clone())
	}
	return d
}

func (e *Engine) keyBuffer() *[]byte {
	if b, ok := e.keys.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 256)
	return &b
}

// evalInput evaluates the decision for in; args, unless nil, is in.Arguments already converted.
func (e *Engine) evalInput(ctx context.Context, in Input, args ast.Value, extra []rego.EvalOption) Decision {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	value, err := in.valueWith(args)
	if err != nil {
		return errorDecision(e.revision, fmt.Errorf("input: %w", err))
	}
	opts := append([]rego.EvalOption{rego.EvalParsedInput(value)}, extra...)
	reserveStack() // the evaluation recurses deeply (stack.go)
	rs, err := evalInTime(ctx, e.query, opts)
	if err != nil {
		return errorDecision(e.revision, fmt.Errorf("evaluate %s: %w", Query, err))
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return errorDecision(e.revision, fmt.Errorf("%s is undefined", Query))
	}
	d, err := decode(rs[0].Expressions[0].Value)
	if err != nil {
		return errorDecision(e.revision, err)
	}
	d.Revision = e.revision
	return d
}

// evalInTime evaluates q within ctx. OPA notices a cancelled context only at its next check,
// so a fast evaluation could finish regardless: ctx is checked before and after, and an
// evaluation that was not done in time fails like one that was interrupted.
func evalInTime(ctx context.Context, q rego.PreparedEvalQuery, opts []rego.EvalOption) (rego.ResultSet, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Cancel through context.AfterFunc rather than the goroutine OPA starts per evaluation.
	cancel := topdown.NewCancel()
	stop := context.AfterFunc(ctx, cancel.Cancel)
	rs, err := q.Eval(ctx, append(opts, rego.EvalExternalCancel(cancel))...)
	stop()
	if err == nil {
		err = ctx.Err()
	}
	return rs, redact(err)
}

// redact withholds the details of a built-in error: the Go errors that built-ins wrap can
// quote their arguments (to_number("hunter2") fails "parsing \"hunter2\""), and arguments
// come from the input, which can hold secrets. What is kept names the built-in and the rule.
func redact(err error) error {
	var te *topdown.Error
	if !errors.As(err, &te) || te.Code != topdown.BuiltinErr {
		return err
	}
	builtin, _, _ := strings.Cut(te.Message, ":")
	return &topdown.Error{
		Code:     te.Code,
		Message:  builtin + ": failed (details withheld: they may quote input values)",
		Location: te.Location,
	}
}

// clone returns d with slices of its own, so that callers cannot change a cached decision.
func (d Decision) clone() Decision {
	d.Reasons = slices.Clone(d.Reasons)
	d.Approvals = slices.Clone(d.Approvals)
	d.Rules = slices.Clone(d.Rules)
	return d
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
