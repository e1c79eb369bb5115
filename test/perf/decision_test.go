package perf

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/policies/authz"
)

const filesystem = "mcp://npx/@modelcontextprotocol/server-filesystem"

// The quickstart's allowed read and denied write (bob, group:engineering, may read the
// filesystem server, not write to it), as in policies/authz's BenchmarkDecide.
var (
	allowedRead = authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}},
		Agent: "researcher", Chain: []string{"researcher"}, Depth: 1,
		Tool: &authz.Tool{Ref: filesystem, Name: "read_text_file"}, Arguments: map[string]any{"path": "data/q3.md"}}
	deniedWrite = authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}},
		Agent: "researcher", Chain: []string{"researcher"}, Depth: 1,
		Tool: &authz.Tool{Ref: filesystem, Name: "write_file"}, Arguments: map[string]any{"path": "data/q3.md"}}
)

// rbacPolicy is the peer: a plain RBAC policy of the same intent over the same input, the kind
// of policy OPA users write. The principal (or one of its groups) needs a grant on the tool's
// server at the tool's access level or above, and the agent must have the server; a denial
// says why.
const rbacPolicy = `package rbac

levels := {"read": 1, "write": 2}

default allow := false

allow if {
	input.action == "tools/call"
	data.rbac.agents[input.agent][input.tool.ref]
	needed := levels[object.get(data.rbac.classes[input.tool.ref], input.tool.name, "write")]
	some grant in data.rbac.grants[input.tool.ref]
	grant.principal in principals
	levels[grant.access] >= needed
}

principals contains input.principal.id

principals contains g if some g in input.principal.groups

reasons contains "the principal has no grant for this tool at its access level" if not allow

decision := {"allow": allow, "reasons": reasons}
`

// rbacData is the quickstart's grants, classes and agents for the filesystem server, as RBAC
// data.
var rbacData = map[string]any{"rbac": map[string]any{
	"agents": map[string]any{"researcher": map[string]any{filesystem: true}, "orchestrator": map[string]any{filesystem: true}},
	"classes": map[string]any{filesystem: map[string]any{"read_text_file": "read", "read_multiple_files": "read", "list_directory": "read",
		"directory_tree": "read", "search_files": "read", "get_file_info": "read", "list_allowed_directories": "read",
		"create_directory": "write", "edit_file": "write", "move_file": "write", "write_file": "write"}},
	"grants": map[string]any{filesystem: []any{
		map[string]any{"principal": "group:engineering", "access": "read"},
		map[string]any{"principal": "user:alice", "access": "write"},
		map[string]any{"principal": "serviceaccount:digest-bot", "access": "read"},
	}},
}}

// decisionCost is one decision's time over many evaluations.
type decisionCost struct {
	evals int
	mean  time.Duration
	p50   time.Duration
	p99   time.Duration
}

// prepareBundle prepares data.lush.authz.decision over the quickstart's compiled bundle with
// OPA's rego package, as `opa eval -b`/`opa bench -b` would: no Lush engine, no cache.
func prepareBundle(ctx context.Context, t testing.TB) (rego.PreparedEvalQuery, []byte) {
	t.Helper()
	res, err := compiler.Build(ctx, "../../examples/quickstart", compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("build the quickstart: %v %v", err, res)
	}
	b, err := bundle.NewReader(bytes.NewReader(res.Bundle)).WithProcessAnnotations(true).
		WithRegoVersion(ast.RegoV1).WithSkipBundleVerification(true).Read()
	if err != nil {
		t.Fatalf("read the quickstart's bundle: %v", err)
	}
	pq, err := rego.New(rego.Query("data.lush.authz.decision"), rego.ParsedBundle("quickstart", &b)).PrepareForEval(ctx)
	if err != nil {
		t.Fatalf("prepare the bundle's decision: %v", err)
	}
	return pq, res.Bundle
}

func prepareRBAC(ctx context.Context, t testing.TB) rego.PreparedEvalQuery {
	t.Helper()
	pq, err := rego.New(rego.Query("data.rbac.decision"), rego.Module("rbac.rego", rbacPolicy),
		rego.Store(inmemStore(rbacData))).PrepareForEval(ctx)
	if err != nil {
		t.Fatalf("prepare the RBAC policy: %v", err)
	}
	return pq
}

// parsedInput is in as OPA sees it (its JSON form), parsed once, as `opa bench --input` does.
func parsedInput(t testing.TB, in authz.Input) ast.Value {
	t.Helper()
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var m any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	v, err := ast.InterfaceToValue(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// decide evaluates pq once and returns the decision's allow.
func decide(ctx context.Context, t testing.TB, pq rego.PreparedEvalQuery, in ast.Value) bool {
	rs, err := pq.Eval(ctx, rego.EvalParsedInput(in))
	if err != nil || len(rs) != 1 || len(rs[0].Expressions) != 1 {
		t.Fatalf("evaluate: %v %v", err, rs)
	}
	m, ok := rs[0].Expressions[0].Value.(map[string]any)
	if !ok {
		t.Fatalf("the decision is not an object: %v", rs[0].Expressions[0].Value)
	}
	allow, ok := m["allow"].(bool)
	if !ok {
		t.Fatalf("the decision has no boolean allow: %v", m)
	}
	return allow
}

// measureDecision evaluates pq on in for d (after a warm-up), one evaluation after another, and
// checks every decision is want.
func measureDecision(ctx context.Context, t testing.TB, pq rego.PreparedEvalQuery, in ast.Value, want bool, d time.Duration) decisionCost {
	t.Helper()
	for range 20 {
		if got := decide(ctx, t, pq, in); got != want {
			t.Fatalf("decision allow = %v, want %v", got, want)
		}
	}
	var lat []time.Duration
	begin := time.Now()
	for time.Since(begin) < d || len(lat) < 10 {
		t0 := time.Now()
		if got := decide(ctx, t, pq, in); got != want {
			t.Fatalf("decision allow = %v, want %v", got, want)
		}
		lat = append(lat, time.Since(t0))
	}
	total := time.Since(begin)
	slices.Sort(lat)
	return decisionCost{evals: len(lat), mean: total / time.Duration(len(lat)), p50: quantile(lat, 0.5), p99: quantile(lat, 0.99)}
}

func inmemStore(data map[string]any) storage.Store { return inmem.NewFromObject(data) }

// opaBinary finds the pinned opa CLI (make opa-tool): LUSH_OPA, then .tools/bin/opa, then PATH;
// "" when there is none.
func opaBinary() string {
	if p := os.Getenv("LUSH_OPA"); p != "" {
		return p
	}
	if p, err := filepath.Abs("../../.tools/bin/opa"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("opa"); err == nil {
		return p
	}
	return ""
}

// opaBench runs `opa bench` (the real CLI, as issue 21 measured) on the bundle's decision and on
// the RBAC policy's, for the allowed read and the denied write: mean (ns/op) and the p99 of its
// query-evaluation histogram.
func opaBench(ctx context.Context, t testing.TB, opa string, bundleData []byte) (lush, rbac [2]decisionCost) {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bundlePath := write("bundle.tar.gz", bundleData)
	policy := write("rbac.rego", []byte(rbacPolicy))
	data, err := json.Marshal(rbacData)
	if err != nil {
		t.Fatal(err)
	}
	dataPath := write("data.json", data)
	bench := func(args ...string) decisionCost {
		out, err := exec.CommandContext(ctx, opa, append([]string{"bench", "--format", "json"}, args...)...).Output()
		if err != nil {
			t.Fatalf("opa bench %v: %v\n%s", args, err, out)
		}
		var r struct {
			N     int
			T     int64
			Extra map[string]float64
		}
		if err := json.Unmarshal(out, &r); err != nil || r.N == 0 {
			t.Fatalf("opa bench %v: output %q: %v", args, out, err)
		}
		return decisionCost{evals: r.N, mean: time.Duration(r.T / int64(r.N)),
			p50: time.Duration(r.Extra["histogram_timer_rego_query_eval_ns_median"]),
			p99: time.Duration(r.Extra["histogram_timer_rego_query_eval_ns_99%"])}
	}
	for i, in := range []authz.Input{allowedRead, deniedWrite} {
		input, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		inPath := write(fmt.Sprintf("input-%d.json", i), input)
		lush[i] = bench("--bundle", bundlePath, "--input", inPath, "data.lush.authz.decision")
		rbac[i] = bench("--data", policy, "--data", dataPath, "--input", inPath, "data.rbac.decision")
	}
	return lush, rbac
}
