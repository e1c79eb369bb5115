package authz_test

import (
	"bytes"
	"context"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/test/projecttest"
)

// withPolicies prepares an engine over the quickstart bundle plus the given project policies
// (path -> source).
func withPolicies(t testing.TB, policies map[string]string, opts ...authz.Option) *authz.Engine {
	t.Helper()
	b, err := bundle.NewReader(bytes.NewReader(quickstart(t))).
		WithProcessAnnotations(true).WithRegoVersion(ast.RegoV1).WithSkipBundleVerification(true).Read()
	if err != nil {
		t.Fatal(err)
	}
	for path, src := range policies {
		m, err := ast.ParseModuleWithOpts(path, src, ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true})
		if err != nil {
			t.Fatal(err)
		}
		b.Modules = append(b.Modules, bundle.ModuleFile{URL: "/" + path, Path: "/" + path, Raw: []byte(src), Parsed: m})
	}
	// Not the 500 ms default (a test of timeouts passes its own, which comes later and wins).
	opts = append([]authz.Option{authz.Timeout(projecttest.DecisionTimeout)}, opts...)
	e, err := authz.New(context.Background(), &b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Project policies that read more of the input than the quickstart's own.
var extraPolicies = map[string]string{
	"policies/prod.rego": `package lush.policies.prod
approval contains "writes in prod need a person" if {
	input.environment == "prod"
	data.lush.authz.classification.access == "write"
}
deny contains "no secrets in arguments" if {
	some k, v in input.arguments
	k == "content"
	contains(v, "SECRET")
}
`,
	"policies/mask.rego": `package lush.policies.mask
mask contains "/input/arguments/content"
mask contains {"op": "upsert", "path": "/input/arguments/path", "value": "<path>"} if input.tool.name == "write_file"
`,
}

// TestCacheMatchesUncached decides many random inputs, with repeats and with variations in
// fields the policy does not read, with cached engines and an uncached one: every decision is
// exactly the uncached decision.
func TestCacheMatchesUncached(t *testing.T) {
	for name, policies := range map[string]map[string]string{"quickstart": nil, "extra policies": extraPolicies} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			uncached := withPolicies(t, policies, authz.Cache(0))
			engines := map[string]*authz.Engine{
				"default": withPolicies(t, policies),
				"tiny":    withPolicies(t, policies, authz.Cache(7)), // evicts all the time
			}
			r := rand.New(rand.NewSource(20260105))
			pool := make([]authz.Input, 200)
			for i := range pool {
				pool[i] = authz.RandomInput(r)
				if i%8 == 0 { // the extra policies ask for approval of writes in prod
					pool[i].Environment = "prod"
				}
			}
			n := 3000
			if testing.Short() {
				n = 600
			}
			outcomes := map[string]int{}
			for i := range n {
				in := pool[r.Intn(len(pool))]
				if i%3 == 0 { // a field the quickstart's policies do not read
					in.Environment = []string{"", "dev", "staging"}[r.Intn(3)]
				}
				if i%5 == 0 { // an argument no policy reads
					if args, ok := in.Arguments.(map[string]any); ok {
						args = maps(args)
						args["unread"] = r.Intn(10)
						in.Arguments = args
					}
				}
				want := uncached.Decide(ctx, in)
				outcomes[want.Outcome]++
				for ename, e := range engines {
					if got := e.Decide(ctx, in); !reflect.DeepEqual(got, want) {
						t.Fatalf("%s engine, input %+v:\n got %+v\nwant %+v", ename, in, got, want)
					}
				}
			}
			hits, misses, enabled, reason := engines["default"].CacheStats()
			t.Logf("outcomes %v; default cache: %d hits, %d misses", outcomes, hits, misses)
			if !enabled || reason != "" || hits < uint64(n/3) || hits+misses != uint64(n) {
				t.Errorf("CacheStats = %d, %d, %v, %q", hits, misses, enabled, reason)
			}
			if (len(outcomes) < 3 && !testing.Short()) || outcomes["allow"] < n/10 || outcomes["deny"] < n/10 {
				t.Errorf("random inputs exercise too little: %v", outcomes)
			}
		})
	}
}

func maps(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestCacheKeysOnReadArguments: the quickstart policy reads input.arguments.path, so two
// calls that differ only there are decided separately, while a difference in an argument no
// policy reads is a hit.
func TestCacheKeysOnReadArguments(t *testing.T) {
	e := engine(t)
	if deps := e.InputDependencies(); !slices.Contains(deps, "arguments.path") || slices.Contains(deps, "arguments") {
		t.Fatalf("InputDependencies = %v, want arguments.path (and not all arguments)", deps)
	}
	ctx := context.Background()
	call := func(path, other string) authz.Input {
		return authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "serviceaccount:digest-bot"}, Agent: "orchestrator",
			LiveWrites: true, Tool: &authz.Tool{Ref: fs, Name: "write_file"}, Arguments: map[string]any{"path": path, "other": other}}
	}
	if d := e.Decide(ctx, call("drafts/x.md", "a")); d.Outcome != "allow" {
		t.Fatalf("write in drafts: %+v", d)
	}
	if d := e.Decide(ctx, call("/etc/passwd", "a")); d.Outcome != "deny" || !slices.Contains(d.Rules, "quickstart.drafts.outside") {
		t.Fatalf("write outside drafts: %+v (a cache hit on the other path?)", d)
	}
	if d := e.Decide(ctx, call("drafts/x.md", "b")); d.Outcome != "allow" {
		t.Fatalf("write in drafts again: %+v", d)
	}
	if hits, misses, _, _ := e.CacheStats(); hits != 1 || misses != 2 {
		t.Errorf("hits, misses = %d, %d; want 1, 2", hits, misses)
	}
}

// TestNondeterministicPolicyDisablesCache: a policy that reads the clock is evaluated every
// time.
func TestNondeterministicPolicyDisablesCache(t *testing.T) {
	e := withPolicies(t, map[string]string{"policies/hours.rego": `package lush.policies.hours
deny contains "never at an odd nanosecond" if time.now_ns() % 2 == 1
`})
	hits, misses, enabled, reason := e.CacheStats()
	if enabled || !strings.Contains(reason, "time.now_ns") || !strings.Contains(reason, "policies/hours.rego") {
		t.Fatalf("CacheStats = %d, %d, %v, %q; want disabled because of time.now_ns", hits, misses, enabled, reason)
	}
	in := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}},
		Agent: "researcher", Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}}
	outcomes := map[string]bool{}
	for range 200 {
		outcomes[e.Decide(context.Background(), in).Outcome] = true
	}
	if !outcomes["allow"] || !outcomes["deny"] {
		t.Errorf("outcomes %v: a clock-dependent decision was reused", outcomes)
	}
	if hits, misses, _, _ := e.CacheStats(); hits != 0 || misses != 0 {
		t.Errorf("hits, misses = %d, %d with the cache off", hits, misses)
	}
}

// TestDecisionCacheIgnoresUnreachableRules: what only the masks read, and rules the decision
// cannot reach, neither lengthen the decision's cache key nor turn its cache off.
func TestDecisionCacheIgnoresUnreachableRules(t *testing.T) {
	e := withPolicies(t, map[string]string{"policies/logmask.rego": `package lush.policies.logmask
mask contains sprintf("/input/arguments/%s", [k]) if {
	some k, _ in input.arguments
	k in {"token", "password"}
	time.now_ns() > 0
}
unused if input.principal.name == sprintf("%d", [time.now_ns()])
`})
	if _, _, enabled, reason := e.CacheStats(); !enabled {
		t.Fatalf("cache off: %s", reason)
	}
	if deps := e.InputDependencies(); slices.Contains(deps, "arguments") || slices.Contains(deps, "principal.name") {
		t.Errorf("InputDependencies = %v: it counts rules the decision never evaluates", deps)
	}
	ctx := context.Background()
	in := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}},
		Agent: "researcher", Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}, Arguments: map[string]any{"path": "q3.md", "token": "a"}}
	e.Decide(ctx, in)
	in.Arguments = map[string]any{"path": "q3.md", "token": "b"}
	if d := e.Decide(ctx, in); d.Outcome != "allow" {
		t.Fatalf("decision %+v", d)
	}
	if hits, misses, _, _ := e.CacheStats(); hits != 1 || misses != 1 {
		t.Errorf("hits, misses = %d, %d; want 1, 1", hits, misses)
	}
	// The masks still see everything they read, every time.
	for _, token := range []string{"a", "b"} {
		in.Arguments = map[string]any{"path": "q3.md", "token": token}
		ops, err := e.Mask(ctx, in)
		if err != nil || !reflect.DeepEqual(ops, []authz.MaskOp{{Op: "remove", Path: "/input/arguments/token"}}) {
			t.Errorf("Mask = %+v, %v", ops, err)
		}
	}
	in.Arguments = map[string]any{"path": "q3.md", "password": "c"}
	if ops, _ := e.Mask(ctx, in); !reflect.DeepEqual(ops, []authz.MaskOp{{Op: "remove", Path: "/input/arguments/password"}}) {
		t.Errorf("Mask(password) = %+v", ops)
	}
}

func TestCacheOption(t *testing.T) {
	e, err := authz.FromBytes(context.Background(), quickstart(t), authz.Cache(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, enabled, reason := e.CacheStats(); enabled || !strings.Contains(reason, "Cache(0)") {
		t.Errorf("Cache(0): enabled %v, reason %q", enabled, reason)
	}
	_, err = authz.FromBytes(context.Background(), quickstart(t), authz.Cache(-1))
	if err == nil || !strings.Contains(err.Error(), "cache size -1") {
		t.Errorf("Cache(-1): %v, want an error naming the cache size", err)
	}
}

// TestCachedDecisionsAreCopies: changing a returned decision changes nothing for the next
// caller.
func TestCachedDecisionsAreCopies(t *testing.T) {
	e := engine(t)
	ctx := context.Background()
	in := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:bob"}, Agent: "researcher",
		Tool: &authz.Tool{Ref: fs, Name: "write_file"}}
	first := e.Decide(ctx, in)
	want := e.Decide(ctx, in) // a hit
	if len(first.Reasons) == 0 || len(first.Rules) == 0 {
		t.Fatalf("want a denial with reasons: %+v", first)
	}
	for _, d := range []authz.Decision{first, want} {
		d.Reasons[0].Message = "changed"
		d.Rules[0] = "changed"
	}
	got := e.Decide(ctx, in)
	if got.Reasons[0].Message == "changed" || got.Rules[0] == "changed" {
		t.Errorf("a caller changed the cached decision: %+v", got)
	}
	if hits, _, _, _ := e.CacheStats(); hits != 2 {
		t.Errorf("hits = %d, want 2", hits)
	}
}

// TestErrorsAreNotCached: a cancelled or timed-out evaluation and unconvertible arguments deny
// with an error and leave nothing behind.
func TestErrorsAreNotCached(t *testing.T) {
	e := engine(t)
	in := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "serviceaccount:digest-bot"}, Agent: "researcher",
		Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if d := e.Decide(cancelled, in); d.Outcome != authz.OutcomeError {
		t.Fatalf("cancelled: %+v", d)
	}
	if d := e.Decide(context.Background(), in); d.Outcome != "allow" {
		t.Fatalf("after a cancelled call: %+v", d)
	}
	if hits, misses, _, _ := e.CacheStats(); hits != 0 || misses != 1 {
		t.Errorf("hits, misses = %d, %d; want 0, 1", hits, misses)
	}

	bad := in
	bad.Arguments = map[string]any{"path": make(chan int)}
	for range 2 {
		if d := e.Decide(context.Background(), bad); d.Outcome != authz.OutcomeError {
			t.Fatalf("unconvertible arguments: %+v", d)
		}
	}

	slow := withPolicies(t, nil, authz.Timeout(time.Nanosecond))
	for range 2 {
		if d := slow.Decide(context.Background(), in); d.Outcome != authz.OutcomeError {
			t.Fatalf("timed out: %+v", d)
		}
	}
	if hits, _, _, _ := slow.CacheStats(); hits != 0 {
		t.Errorf("a timed-out decision came from the cache (%d hits)", hits)
	}
}

func TestInputDependencies(t *testing.T) {
	want := []string{"action", "agent", "approval.approved_by", "approval.id", "approval.status", "arguments.destination",
		"arguments.path", "arguments.requester", "arguments.source", "budget.error", "budget.exhausted", "budget.exhausted_by",
		"call.action", "call.decision_id", "call.outcome",
		"chain", "depth", "live_writes", "loop", "principal.groups", "principal.id", "rate_limit", "task.agent", "task.id", "task.principal",
		"tool", "type(.)", "type(budget)", "type(task.decision_id)"}
	if got := engine(t).InputDependencies(); !slices.Equal(got, want) {
		t.Errorf("quickstart: InputDependencies = %q\nwant %q", got, want)
	}
	got := withPolicies(t, extraPolicies).InputDependencies()
	for _, p := range []string{"arguments", "environment"} {
		if !slices.Contains(got, p) {
			t.Errorf("with extra policies: InputDependencies = %q, want %s among them", got, p)
		}
	}
	got = withPolicies(t, map[string]string{"policies/all.rego": "package lush.policies.all\ndeny contains json.marshal(input) if false\n"}).InputDependencies()
	if !slices.Equal(got, []string{"."}) {
		t.Errorf("a policy reading the whole input: InputDependencies = %q", got)
	}
}

// TestCacheUnderContention decides from 64 goroutines at once with a small cache; every
// decision matches the uncached one.
func TestCacheUnderContention(t *testing.T) {
	// 64 goroutines on a small machine: give each evaluation time enough not to time out.
	uncached := withPolicies(t, extraPolicies, authz.Cache(0))
	e := withPolicies(t, extraPolicies, authz.Cache(40), authz.Timeout(time.Minute))
	r := rand.New(rand.NewSource(7))
	inputs := make([]authz.Input, 60)
	want := make([]authz.Decision, len(inputs))
	for i := range inputs {
		inputs[i] = authz.RandomInput(r)
		want[i] = uncached.Decide(context.Background(), inputs[i])
	}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 150 {
				i := (g*7 + j*13) % len(inputs)
				if got := e.Decide(context.Background(), inputs[i]); !reflect.DeepEqual(got, want[i]) {
					t.Errorf("input %+v:\n got %+v\nwant %+v", inputs[i], got, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	if hits, misses, _, _ := e.CacheStats(); hits+misses != 64*150 || hits == 0 {
		t.Errorf("hits, misses = %d, %d", hits, misses)
	}
}

func TestMask(t *testing.T) {
	ctx := context.Background()
	write := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "serviceaccount:digest-bot"}, Agent: "orchestrator",
		Tool: &authz.Tool{Ref: fs, Name: "write_file"}, Arguments: map[string]any{"path": "drafts/x.md", "content": "SECRET"}}
	read := write
	read.Tool = &authz.Tool{Ref: fs, Name: "read_text_file"}

	// Without mask rules nothing is evaluated.
	ops, err := engine(t).Mask(ctx, write)
	if ops != nil || err != nil {
		t.Errorf("quickstart: Mask = %v, %v; want nil, nil", ops, err)
	}

	for _, size := range []int{0, 100} {
		e := withPolicies(t, extraPolicies, authz.Cache(size))
		for range 2 { // the second time from the cache, when it is on
			ops, err := e.Mask(ctx, write)
			want := []authz.MaskOp{{Op: "remove", Path: "/input/arguments/content"}, {Op: "upsert", Path: "/input/arguments/path", Value: "<path>"}}
			if err != nil || !reflect.DeepEqual(ops, want) {
				t.Fatalf("cache %d: Mask(write) = %+v, %v\nwant %+v", size, ops, err, want)
			}
			ops[0].Path = "changed"
			ops, err = e.Mask(ctx, read)
			if err != nil || !reflect.DeepEqual(ops, []authz.MaskOp{{Op: "remove", Path: "/input/arguments/content"}}) {
				t.Fatalf("cache %d: Mask(read) = %+v, %v", size, ops, err)
			}
		}
	}

	// Malformed entries and test packages are ignored; an upsert may set any JSON value.
	e := withPolicies(t, map[string]string{
		"policies/m.rego": `package lush.policies.m
mask contains x if some x in ["/result", "input/a", 7, {"op": "upsert", "path": "/input/b"}, {"op": "nope", "path": "/input/c"}]
mask contains {"op": "upsert", "path": "/input/arguments", "value": {"redacted": [true]}}
mask contains {"op": "remove", "path": "/input/principal/id"}
`,
		"policies/m_test.rego": "package lush.policies.m_test\nmask contains \"/input/agent\"\n",
	})
	ops, err = e.Mask(ctx, write)
	want := []authz.MaskOp{
		{Op: "upsert", Path: "/input/arguments", Value: map[string]any{"redacted": []any{true}}},
		{Op: "remove", Path: "/input/principal/id"},
	}
	if err != nil || !reflect.DeepEqual(ops, want) {
		t.Errorf("Mask = %+v, %v\nwant %+v", ops, err, want)
	}
	ops[0].Value.(map[string]any)["redacted"] = "changed"
	if again, _ := e.Mask(ctx, write); !reflect.DeepEqual(again, want) {
		t.Errorf("a caller changed a cached mask: %+v", again)
	}

	// An evaluation error is returned, not swallowed.
	broken := withPolicies(t, map[string]string{"policies/b.rego": "package lush.policies.b\nmask contains x if x := to_number(input.agent)\n"})
	if _, err := broken.Mask(ctx, write); err == nil || !strings.Contains(err.Error(), authz.MaskQuery) {
		t.Errorf("broken mask rule: err = %v", err)
	}
}

// TestBuiltinErrorsDoNotLeakInput: a built-in error fails closed, and neither the decision nor
// the mask error repeats the input value the built-in choked on.
func TestBuiltinErrorsDoNotLeakInput(t *testing.T) {
	e := withPolicies(t, map[string]string{"policies/n.rego": `package lush.policies.n
deny contains "too big" if to_number(input.arguments.token) > 10
mask contains "/input/arguments/token" if to_number(input.arguments.token) > 10
`})
	in := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}},
		Agent: "researcher", Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}, Arguments: map[string]any{"token": "hunter2-SECRET"}}
	d := e.Decide(context.Background(), in)
	if d.Outcome != authz.OutcomeError || d.Allow {
		t.Fatalf("decision = %+v, want an error", d)
	}
	if strings.Contains(d.Error, "hunter2") || !strings.Contains(d.Error, "to_number") || !strings.Contains(d.Error, "n.rego") {
		t.Errorf("Error = %q: want the built-in and the rule, not the value", d.Error)
	}
	_, err := e.Mask(context.Background(), in)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Mask error = %v", err)
	}
}
