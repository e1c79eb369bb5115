package authz

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// randomInput starts from an input the quickstart allows (or stubs) and replaces 0 to 3 of its
// fields with values drawn from small pools, so that random inputs are decided every way and
// often share some fields while differing in others.
func randomInput(r *rand.Rand) Input {
	const fs = "mcp://npx/@modelcontextprotocol/server-filesystem"
	eng := Principal{ID: "user:bob", Groups: []string{"group:engineering"}}
	bot := Principal{ID: "serviceaccount:digest-bot"}
	bases := []Input{
		{Action: "tools/call", Principal: eng, Agent: "researcher", Chain: []string{"researcher"}, Depth: 1,
			Tool: &Tool{Ref: fs, Name: "read_text_file"}, Arguments: map[string]any{"path": "q3.md"}},
		{Action: "tools/call", Principal: bot, Agent: "orchestrator", Tool: &Tool{Ref: fs, Name: "write_file"},
			Arguments: map[string]any{"path": "drafts/x.md", "content": "SECRET-ARGUMENT"}},
		{Action: "tools/call", Principal: bot, Agent: "notifier", LiveWrites: true,
			Tool: &Tool{Ref: "mcp://notes.example.com/mcp", Name: "post_note"}, Arguments: map[string]any{"text": "hi"}},
		{Action: "tools/call", Principal: eng, Agent: "researcher", Tool: &Tool{Ref: "tools/clock"}},
		{Action: "tools/list", Principal: eng, Agent: "researcher", Tool: &Tool{Ref: fs, Name: "list_directory"}},
		{Action: "agent/invoke", Principal: eng, Agent: "researcher", Chain: []string{"orchestrator", "researcher"}, Depth: 2},
		{Action: "loop/read", Principal: Principal{ID: "user:zed"}, Loop: "weekday-digest"},
		{Action: "loop/trigger", Principal: Principal{ID: "user:olga", Groups: []string{"group:ops"}}, Loop: "hourly-notes"},
	}
	in := bases[r.Intn(len(bases))]
	if in.Tool != nil {
		t := *in.Tool
		in.Tool = &t
	}
	if args, ok := in.Arguments.(map[string]any); ok {
		in.Arguments = maps.Clone(args)
	}
	pick := func(vs ...string) string { return vs[r.Intn(len(vs))] }
	mutations := []func(){
		func() { in.Action = pick(append(slices.Clone(Actions), "tools/explode", "")...) },
		func() {
			in.Principal.ID = pick("user:bob", "user:alice", "serviceaccount:digest-bot", "group:engineering", "bob", "")
		},
		func() {
			in.Principal.Groups = nil
			for range r.Intn(3) {
				in.Principal.Groups = append(in.Principal.Groups, pick("group:engineering", "group:contractors", "group:ops", "engineering"))
			}
		},
		func() { in.Agent = pick("researcher", "orchestrator", "notifier", "ghost", "") },
		func() {
			in.Chain = nil
			for range r.Intn(7) {
				in.Chain = append(in.Chain, pick("orchestrator", "researcher", "a"))
			}
		},
		func() { in.Depth = r.Intn(8) - 1 },
		func() { in.LiveWrites = !in.LiveWrites },
		func() { in.Environment = pick("", "prod", "dev") },
		func() { in.Loop = pick("", "weekday-digest", "hourly-notes", "ghost") },
		func() {
			if r.Intn(3) == 0 {
				in.RateLimit = nil
				return
			}
			in.RateLimit = &RateLimit{Exceeded: r.Intn(4) > 0, Limit: pick("group:engineering 5/s burst 10", ""), RetryAfterMS: int64(r.Intn(3) * 100)}
		},
		func() {
			if r.Intn(3) == 0 {
				in.Approval = nil
				return
			}
			in.Approval = &Approval{ID: pick("0193a-1", "0193a-2"), Status: pick("approved", "denied"), ApprovedBy: pick("user:erin", "user:bob", "")}
		},
		func() {
			if r.Intn(3) == 0 {
				in.Budget = nil
				return
			}
			in.Budget = &Budget{Exhausted: r.Intn(2) == 0, Budgets: []BudgetState{{Name: pick("calls", "tokens"), Unit: "tool_calls",
				Limit: 2, Used: int64(r.Intn(3)), Remaining: int64(2 - r.Intn(3)), Cost: int64(r.Intn(2)), PeriodEnd: "2026-11-26T00:00:00Z"}}}
			if r.Intn(4) == 0 {
				in.Budget.Budgets, in.Budget.Error = nil, "usage cannot be read"
			}
		},
		func() {
			if r.Intn(3) == 0 {
				in.Task = nil
				return
			}
			in.Task = &Task{ID: pick("task-1", "task-2", ""), Principal: pick("user:bob", "user:alice", ""),
				Agent: pick("researcher", "notifier"), DecisionID: pick("0193a-1", "0193a-2")}
		},
		func() {
			if r.Intn(3) == 0 {
				in.Call = nil
				return
			}
			in.Call = &CallRef{DecisionID: pick("0193a-1", "0193a-2"), Action: pick("tools/call", "prompts/get"), Outcome: pick("allow", "deny", "")}
		},
		func() {
			if r.Intn(5) == 0 {
				in.Tool = nil
				return
			}
			in.Tool = &Tool{
				Ref:    pick(fs, fs, "mcp://notes.example.com/mcp", "tools/clock", "lush://researcher", "mcp://nowhere", ""),
				Name:   pick("read_text_file", "write_file", "move_file", "list_directory", "post_note", "search_notes", ""),
				Access: pick("", "", "read", "write", "admin"),
				Risk:   pick("", "", "", "destructive", "network", "huge"),
			}
			switch r.Intn(5) {
			case 2:
				in.Tool.Refusal = pick("not_allowed: \"rm\" is not allowed; allowed: ls", "disabled: the shell tool is off")
			case 0:
				valid := r.Intn(2) == 0
				in.Tool.ArgumentsValid = &valid
				if !valid && r.Intn(2) == 0 {
					in.Tool.SchemaErrors = []string{pick("/path: expected string, got number", "/: missing required property \"path\"")}
				}
			case 1:
				in.Tool.SchemaErrors = []string{"/x: expected object, got array"}
			}
		},
		func() {
			switch r.Intn(6) {
			case 0:
				in.Arguments = nil
			case 1:
				in.Arguments = json.RawMessage(fmt.Sprintf(`{"path": %q, "n": %d}`, pick("drafts/a.md", "/etc/passwd", "x.md"), r.Intn(3)))
			case 2:
				in.Arguments = []any{"drafts/x.md", 1.5}
			case 3:
				in.Arguments = map[string]any{"source": pick("drafts/a", "/x"), "destination": pick("drafts/b", "/y")}
			default:
				args := map[string]any{}
				if r.Intn(4) > 0 {
					args["path"] = pick("drafts/x.md", "./drafts/y.md", "drafts/../../etc", "/etc/passwd", "q3.md")
				}
				if r.Intn(3) == 0 {
					args["content"] = pick("SECRET-ARGUMENT", "hello")
				}
				if r.Intn(5) == 0 {
					args["path"] = r.Intn(3)
				}
				if r.Intn(5) == 0 {
					args["nested"] = map[string]any{"a": []any{1, "two", nil, true}, "b": r.Float64()}
				}
				in.Arguments = args
			}
		},
	}
	for range r.Intn(4) {
		mutations[r.Intn(len(mutations))]()
	}
	return in
}

// randomDeps builds a dependency tree from random paths into the input.
func randomDeps(r *rand.Rand) *depNode {
	paths := [][]string{
		{}, {"action"}, {"principal"}, {"principal", "id"}, {"principal", "groups"}, {"principal", "x"},
		{"agent"}, {"agent", "x"}, {"chain"}, {"depth"}, {"tool"}, {"tool", "ref"}, {"tool", "name"},
		{"tool", "access"}, {"tool", "risk"}, {"tool", "other"}, {"tool", "arguments_valid"}, {"tool", "schema_errors"}, {"tool", "refusal"}, {"arguments"}, {"arguments", "path"},
		{"arguments", "nested", "a"}, {"arguments", "missing"}, {"live_writes"}, {"environment"},
		{"loop"}, {"rate_limit"}, {"rate_limit", "exceeded"}, {"rate_limit", "limit"}, {"approval"}, {"approval", "status"}, {"approval", "approved_by"}, {"budget"}, {"budget", "exhausted"}, {"budget", "budgets"}, {"unknown"}, {"a.b"},
	}
	n := &depNode{}
	for range 1 + r.Intn(6) {
		p := paths[r.Intn(len(paths))]
		if len(p) == 0 && r.Intn(4) > 0 {
			continue // the whole input, but not too often
		}
		n.add(p, r.Intn(3) == 0)
	}
	n.seal()
	return n
}

// TestInputKeyMatchesValueKey checks the fast key of an Input is exactly the key of its
// converted value, for random inputs and random dependency trees.
func TestInputKeyMatchesValueKey(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := range 20000 {
		deps, in := randomDeps(r), randomInput(r)
		v, err := in.value()
		if err != nil {
			t.Fatal(err)
		}
		want := appendKey(nil, deps, v)
		got, args, err := appendInputKey(nil, deps, &in)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("%d: deps %v input %+v:\n got %q\nwant %q", i, deps.paths("", nil), in, got, want)
		}
		// The arguments the key converted are what evaluation then uses: the input must be the
		// same value as one converted from scratch.
		if args != nil && in.Arguments == nil {
			t.Fatalf("%d: arguments converted for an input without any", i)
		}
		reused, err := in.valueWith(args)
		if err != nil {
			t.Fatal(err)
		}
		if reused.Compare(v) != 0 {
			t.Fatalf("%d: deps %v: the input with the key's arguments is %v, want %v", i, deps.paths("", nil), reused, v)
		}
	}
}

// project returns the value v projected onto n, as the policy can observe it: whole values,
// the types of type-only paths, and absent keys.
func project(n *depNode, v ast.Value) any {
	switch {
	case v == nil:
		return "<absent>"
	case n.whole:
		return v.String()
	}
	obj, ok := v.(ast.Object)
	if !ok {
		return "<type " + ast.ValueName(v) + ">"
	}
	out := map[string]any{}
	for _, name := range n.names {
		var child ast.Value
		if t := obj.Get(ast.StringTerm(name)); t != nil {
			child = t.Value
		}
		out[name] = project(n.kids[name], child)
	}
	return out
}

// TestKeyIsCollisionFree checks that inputs get the same key exactly when their projections
// agree.
func TestKeyIsCollisionFree(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for range 50 {
		deps := randomDeps(r)
		byKey := map[string]string{}
		byProjection := map[string]string{}
		for range 400 {
			in := randomInput(r)
			v, err := in.value()
			if err != nil {
				t.Fatal(err)
			}
			key := string(appendKey(nil, deps, v))
			p, _ := json.Marshal(project(deps, v))
			if prev, ok := byKey[key]; ok && prev != string(p) {
				t.Fatalf("deps %v: one key for two projections:\n%s\n%s", deps.paths("", nil), prev, p)
			}
			if prev, ok := byProjection[string(p)]; ok && prev != key {
				t.Fatalf("deps %v: two keys for one projection %s:\n%q\n%q", deps.paths("", nil), p, prev, key)
			}
			byKey[key], byProjection[string(p)] = string(p), key
		}
	}
}

// TestValueEncoding checks values that differ only subtly encode differently, and values that
// are equal encode the same whatever the order of their keys.
func TestValueEncoding(t *testing.T) {
	enc := func(s string) string { return string(appendValue(nil, ast.MustParseTerm(s).Value)) }
	distinct := []string{
		`null`, `true`, `false`, `1`, `1.0`, `"1"`, `""`, `[]`, `{}`, `set()`, `[""]`, `["", ""]`,
		`{"a": "b"}`, `{"ab": ""}`, `{"a": {"b": 1}}`, `{"a": ["b", 1]}`, `["a", "b"]`, `["ab"]`,
		`{"a": null}`, `{"b": null}`, `{1: "a"}`, `{"1": "a"}`, `{"a"}`, `{"a", "b"}`, `["a\u0000"]`,
	}
	seen := map[string]string{}
	for _, s := range distinct {
		k := enc(s)
		if prev, ok := seen[k]; ok {
			t.Errorf("%s and %s encode the same", prev, s)
		}
		seen[k] = s
	}
	if enc(`{"b": 1, "a": [1, {"y": 2, "x": 1}]}`) != enc(`{"a": [1, {"x": 1, "y": 2}], "b": 1}`) {
		t.Error("key order changes the encoding")
	}
	if enc(`{"b", "a"}`) != enc(`{"a", "b"}`) {
		t.Error("set order changes the encoding")
	}
}

func TestDepPaths(t *testing.T) {
	n := &depNode{}
	n.add([]string{"arguments", "path"}, false)
	n.add([]string{"arguments", "path", "x"}, false) // covered by arguments.path
	n.add([]string{"tool"}, true)
	n.add([]string{"tool", "name"}, false)
	n.add([]string{"principal"}, false)
	n.add([]string{"principal", "id"}, true) // covered by principal
	n.add([]string{"arguments", "a key"}, false)
	n.add(nil, true)
	n.seal()
	got := n.paths("", nil)
	want := []string{"type(.)", `arguments["a key"]`, "arguments.path", "principal", "type(tool)", "tool.name"}
	if !slices.Equal(got, want) {
		t.Errorf("paths = %q, want %q", got, want)
	}
	n.add(nil, false)
	n.seal()
	if got := n.paths("", nil); !slices.Equal(got, []string{"."}) {
		t.Errorf("whole input: paths = %q", got)
	}
}

// TestAnalyse checks which references into input and which built-ins the analysis finds.
func TestAnalyse(t *testing.T) {
	tests := []struct {
		name   string
		src    string
		deps   []string
		impure string
		masks  bool
	}{
		{"constant paths", `allow if { input.tool.name == "x"; input.arguments.path }`,
			[]string{"arguments.path", "tool.name"}, "", false},
		{"variable key", `allow if { some k; input.arguments[k] == 1 }`, []string{"arguments"}, "", false},
		{"number key", `allow if input.chain[0] == "a"`, []string{"chain"}, "", false},
		{"iteration", `allow if { some x in input.principal.groups; x == "g" }`, []string{"principal.groups"}, "", false},
		{"whole input to a function", `allow if json.marshal(input) != ""`, []string{"."}, "", false},
		{"whole input assigned", `allow if { x := input; x.a == 1 }`, []string{"."}, "", false},
		{"with input", `allow if data.lush.policies.p.q with input as {"a": 1}`, []string{"."}, "", false},
		{"with input field", `allow if data.lush.policies.p.q with input.tool as {"a": 1}`, []string{"tool"}, "", false},
		{"type test", `allow if is_object(input)`, []string{"type(.)"}, "", false},
		{"type test of a field", `allow if { is_string(input.tool.name); type_name(input.depth) == "number" }`,
			[]string{"type(depth)", "type(tool.name)"}, "", false},
		{"type-tested local", `allow if { x := input.agent; is_string(x) }`, []string{"type(agent)"}, "", false},
		{"local used otherwise", `allow if { x := input.agent; is_string(x); x != "" }`, []string{"agent"}, "", false},
		{"composite head", `allow if [input.a][0] == 1`, []string{"a"}, "", false},
		{"time", `deny contains "x" if time.now_ns() > 0`, nil, "time.now_ns", false},
		{"rand in a function", "f(x) := rand.intn(\"k\", x)\nallow if f(3) == 1", nil, "rand.intn", false},
		{"certificate verification", `allow if crypto.x509.parse_and_verify_certificates("x")`, nil, "crypto.x509.parse_and_verify_certificates", false},
		{"mocked clock", `allow if data.lush.policies.p.q with time.now_ns as 1`, nil, "time.now_ns", false},
		{"mask", `mask contains "/input/arguments/password"`, nil, "", true},
		{"mask reading arguments", `mask contains sprintf("/input/arguments/%s", [k]) if { some k, _ in input.arguments }`, []string{"arguments"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "package lush.policies.p\n" + tt.src + "\nq := true\n"
			m, err := ast.ParseModuleWithOpts("p.rego", src, ast.ParserOptions{RegoVersion: ast.RegoV1})
			if err != nil {
				t.Fatal(err)
			}
			c := ast.NewCompiler()
			c.Compile(map[string]*ast.Module{"p.rego": m})
			if c.Failed() {
				t.Fatal(c.Errors)
			}
			a := analyse(c, ast.MustParseRef("data.lush.policies.p"))
			if got := a.deps.paths("", nil); !slices.Equal(got, tt.deps) {
				t.Errorf("deps = %q, want %q", got, tt.deps)
			}
			if tt.impure == "" && a.nondeterministic != "" || !strings.HasPrefix(a.nondeterministic, tt.impure) {
				t.Errorf("nondeterministic = %q, want %q", a.nondeterministic, tt.impure)
			}
			if tt.impure != "" && !strings.Contains(a.nondeterministic, "p.rego:") {
				t.Errorf("nondeterministic = %q, want its location", a.nondeterministic)
			}
			if definesMasks(c.Modules) != tt.masks {
				t.Errorf("masks = %v, want %v", !tt.masks, tt.masks)
			}
		})
	}
	// Masks of test packages do not count.
	c := ast.NewCompiler()
	c.Compile(map[string]*ast.Module{"p.rego": ast.MustParseModuleWithOpts("package lush.policies.p_test\nmask contains \"/input/a\"\n", ast.ParserOptions{RegoVersion: ast.RegoV1})})
	if definesMasks(c.Modules) {
		t.Error("a mask in a _test package counts")
	}
}

// FuzzInputKey feeds arbitrary JSON as the arguments of an input: the fast key must be the key
// of the converted value, or fail exactly when the conversion fails.
func FuzzInputKey(f *testing.F) {
	for _, s := range []string{`{"path": "drafts/x.md"}`, `[1, "a", null]`, `"s"`, `{"a": {"b": [1.0, 1]}}`, `{`, `1e400`, `{"path": {"path": true}}`} {
		f.Add([]byte(s))
	}
	trees := []*depNode{}
	for _, paths := range [][][]string{{{"arguments"}}, {{"arguments", "path"}, {"tool"}}, {{}}, {{"arguments", "path", "path"}, {"action"}}} {
		n := &depNode{}
		for _, p := range paths {
			n.add(p, false)
		}
		n.add([]string{"arguments", "a"}, true)
		n.seal()
		trees = append(trees, n)
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		in := Input{Action: "tools/call", Principal: Principal{ID: "user:a"}, Tool: &Tool{Ref: "tools/x"}, Arguments: json.RawMessage(args)}
		v, verr := in.value()
		for _, n := range trees {
			got, _, err := appendInputKey(nil, n, &in)
			if (err != nil) != (verr != nil) {
				t.Fatalf("deps %v: key error %v, conversion error %v", n.paths("", nil), err, verr)
			}
			if err == nil && string(got) != string(appendKey(nil, n, v)) {
				t.Fatalf("deps %v: keys differ", n.paths("", nil))
			}
		}
	})
}
