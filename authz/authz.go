// Package authz is Lush's one policy decision function. Every enforcement point (the MCP
// gateway, the Envoy ext_authz server, agentd) builds an Input and calls Engine.Decide, which
// evaluates data.lush.authz.decision with OPA over a compiled Lush bundle.
//
// Decide fails closed: an evaluation error, a timeout or an undefined result is a Decision that
// denies, with Outcome "error" and the cause in Error.
package authz

import (
	"bytes"
	"context"
	"fmt"
	"os"
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
	query    rego.PreparedEvalQuery
	revision string
	bundle   *bundle.Bundle
	timeout  time.Duration
}

// Option configures an Engine.
type Option func(*config)

type config struct {
	verify  *bundle.VerificationConfig
	timeout time.Duration
}

// VerifyWith requires the bundle to be signed by one of keys (key id -> key); keyID, if not
// empty, is the key expected when the signature names none. An unsigned or badly signed bundle
// is refused.
func VerifyWith(keys map[string]*bundle.KeyConfig, keyID string) Option {
	return func(c *config) { c.verify = bundle.NewVerificationConfig(keys, keyID, "", nil) }
}

// Timeout bounds each decision (default DefaultTimeout).
func Timeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

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
	c := config{timeout: DefaultTimeout}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func newEngine(ctx context.Context, b *bundle.Bundle, c config) (*Engine, error) {
	rev := b.Manifest.Revision
	comp := ast.NewCompiler().WithEnablePrintStatements(false)
	comp.Compile(b.ParsedModules("bundle"))
	if comp.Failed() {
		return nil, fmt.Errorf("compile bundle %s: %w", short(rev), comp.Errors)
	}
	data := b.Data
	if data == nil {
		data = map[string]any{}
	}
	q, err := rego.New(
		rego.Query(Query),
		rego.Compiler(comp),
		rego.Store(inmem.NewFromObject(data)),
		rego.StrictBuiltinErrors(true), // a builtin error must deny, not silently skip a rule
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("prepare bundle %s: %w", short(rev), err)
	}
	return &Engine{query: q, revision: rev, bundle: b, timeout: c.timeout}, nil
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

func (e *Engine) decide(ctx context.Context, in Input, extra ...rego.EvalOption) Decision {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	value, err := in.value()
	if err != nil {
		return errorDecision(e.revision, fmt.Errorf("input: %w", err))
	}
	opts := append([]rego.EvalOption{rego.EvalParsedInput(value)}, extra...)
	rs, err := e.query.Eval(ctx, opts...)
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

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
