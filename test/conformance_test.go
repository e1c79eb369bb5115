package test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The MCP conformance suites the test runs, each from the project-local npm install
// (test/node/package.json): 0.1.16, and 0.2.0-alpha.12 (installed under the alias
// conformance-next), which adds 2026-07-28 and the extensions.
var conformanceSuites = []struct{ name, script string }{
	{"0.1.16", "node_modules/@modelcontextprotocol/conformance/dist/index.js"},
	{"0.2.0-alpha.12", "node_modules/conformance-next/dist/index.js"},
}

// conformanceParallel bounds the suite processes running at once (2 cores, shared with the
// fixture and the gateway).
const conformanceParallel = 3

// conformanceRun is one scenario of one suite at one protocol version ("extension" for the
// extensions' scenarios, which have no version).
type conformanceRun struct {
	suite, script, scenario, version string
}

func (r conformanceRun) String() string { return r.suite + "/" + r.scenario + "/" + r.version }

// listLine matches a scenario of `conformance list --server`: "  - tools-list [2025-06-18,2025-11-25]".
var listLine = regexp.MustCompile(`^\s+- ([a-z0-9-]+) \[([a-z0-9,-]+)\]$`)

// listConformanceRuns asks a suite for its server scenarios and the versions each applies to.
func listConformanceRuns(t *testing.T, suite, script string) []conformanceRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node22(t), script, "list", "--server").CombinedOutput()
	if err != nil {
		t.Fatalf("conformance %s list --server: %v\n%s", suite, err, out)
	}
	var runs []conformanceRun
	for _, line := range strings.Split(string(out), "\n") {
		m := listLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, v := range strings.Split(m[2], ",") {
			runs = append(runs, conformanceRun{suite: suite, script: script, scenario: m[1], version: v})
		}
	}
	if len(runs) == 0 {
		t.Fatalf("conformance %s list --server listed no scenario:\n%s", suite, out)
	}
	return runs
}

// conformanceCheck is one check of a scenario's result (the suite's checks.json).
type conformanceCheck struct {
	ID           string          `json:"id"`
	Status       string          `json:"status"` // SUCCESS, FAILURE, WARNING, SKIPPED, INFO
	ErrorMessage string          `json:"errorMessage"`
	Details      json.RawMessage `json:"details"`
}

// message is the check's error message, else the message in its details (where informational
// checks say why they did not apply).
func (c conformanceCheck) message() string {
	if c.ErrorMessage != "" {
		return oneLine(c.ErrorMessage)
	}
	var d struct {
		Message any `json:"message"`
	}
	if json.Unmarshal(c.Details, &d) == nil {
		if m, ok := d.Message.(string); ok {
			return oneLine(m)
		}
	}
	return ""
}

// conformanceResult is what one run of a scenario against one URL found.
type conformanceResult struct {
	checks []conformanceCheck
	output string // the suite's console output, for a run that left no result
}

func (r conformanceResult) statuses(status string) []conformanceCheck {
	var cs []conformanceCheck
	for _, c := range r.checks {
		if c.Status == status {
			cs = append(cs, c)
		}
	}
	return cs
}

// passed: the run has results, at least one check succeeded and none failed.
func (r conformanceResult) passed() bool {
	return len(r.statuses("SUCCESS")) > 0 && len(r.statuses("FAILURE")) == 0
}

// problems are the failed checks, one line each, or why there is no result.
func (r conformanceResult) problems() []string {
	if r.checks == nil {
		return []string{"no result: " + firstError(r.output)}
	}
	var ps []string
	for _, c := range r.statuses("FAILURE") {
		ps = append(ps, c.ID+": "+c.message())
	}
	if len(ps) == 0 && len(r.statuses("SUCCESS")) == 0 {
		p := "no check succeeded"
		for _, c := range r.checks {
			if c.Status != "SUCCESS" && c.message() != "" {
				p += " (" + c.Status + " " + c.ID + ": " + c.message() + ")"
				break
			}
		}
		ps = append(ps, p)
	}
	return ps
}

// lostThrough are the problems of a run through the gateway against the same run directly (which
// passed): everything that keeps it from passing (failed checks, no result, no check succeeded),
// and the checks that succeeded directly but were skipped through the gateway (a feature the
// gateway hid, such as an extension it did not pass on).
func lostThrough(direct, gateway conformanceResult) []string {
	var ps []string
	if !gateway.passed() {
		ps = gateway.problems()
	}
	for _, d := range direct.statuses("SUCCESS") {
		for _, g := range gateway.statuses("SKIPPED") {
			if g.ID == d.ID {
				ps = append(ps, g.ID+": skipped through the gateway: "+g.message())
			}
		}
	}
	return ps
}

// runConformance runs one scenario against url with the suite's own CLI (on Node 22) and reads
// the checks it wrote to its output directory.
func runConformance(ctx context.Context, node string, tools string, r conformanceRun, url, dir string) conformanceResult {
	args := []string{filepath.Join(tools, r.script), "server", "--url", url, "--scenario", r.scenario, "-o", filepath.Join(dir, "out")}
	if r.version != "extension" {
		args = append(args, "--spec-version", r.version)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	res := conformanceResult{}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.output = err.Error()
		return res
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput() // it exits non-zero when a check fails; checks.json tells which
	res.output = string(out)
	files, _ := filepath.Glob(filepath.Join(dir, "out", "*", "checks.json"))
	if len(files) != 1 {
		return res
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		res.output += "\nread " + files[0] + ": " + err.Error()
		return res
	}
	var checks []conformanceCheck
	if err := json.Unmarshal(data, &checks); err != nil {
		res.output += "\nparse " + files[0] + ": " + err.Error()
		return res
	}
	res.checks = checks
	return res
}

// startConformanceFixture runs test/node/conformance-server.mjs and returns its URL. Its stdin is
// a pipe the test holds open: the fixture exits when the test closes it (or dies).
func startConformanceFixture(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(node22(t), mustAbs(t, "node/conformance-server.mjs"), "0")
	cmd.Env = append(os.Environ(), "LUSH_NODE_PREFIX="+nodeTools(t))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close() })
	p := startCmd(t, cmd)
	waitFor(t, p, "http://127.0.0.1:", 60*time.Second)
	for _, line := range strings.Split(p.out.String(), "\n") {
		if strings.HasPrefix(line, "http://127.0.0.1:") {
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf("conformance fixture printed no URL:\n%s", p.out.String())
	return ""
}

// TestConformance runs every server scenario of both conformance suites, at every protocol
// version each applies to, one by one, against our fixture (test/node/conformance-server.mjs)
// directly and through the gateway. Every run must pass directly, and every run that passes
// directly must pass through the gateway. One scenario at one version:
//
//	go test ./test -run 'TestConformance/0.2.0-alpha.12/tools-list/2026-07-28'
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suites take minutes")
	}
	tools := nodeTools(t)
	node := node22(t)
	fixture := startConformanceFixture(t)

	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "agents/conformance"), 0o755)
	os.WriteFile(filepath.Join(dir, "agents/conformance/spec.yaml"), []byte(`name: conformance
model: gemini-2.5-flash
description: The conformance fixture, through Lush.
tools:
  - server: mcp://fixture.local/mcp
    access: write
acl:
  - principal: group:everyone
    role: execute
`), 0o644)
	os.WriteFile(filepath.Join(dir, "lush.yaml"), []byte(`project: conformance
servers:
  mcp://fixture.local/mcp:
    url: `+fixture+`
tool_grants:
  - tool: mcp://fixture.local/mcp
    grants:
      - {principal: group:everyone, access: write}
`), 0o644)
	// Live writes: the fixture's tools carry no read-only hint, so without them every call would
	// be stubbed and no scenario would reach the fixture.
	base, _ := startGateway(t, dir, "--dev", "--live-writes=mcp://fixture.local/mcp")
	gateway := base + "/agents/conformance/mcp"

	var runs []conformanceRun
	for _, s := range conformanceSuites {
		runs = append(runs, listConformanceRuns(t, s.name, filepath.Join(tools, s.script))...)
	}
	for i := range runs {
		runs[i].script = strings.TrimPrefix(runs[i].script, tools+string(filepath.Separator))
	}
	t.Logf("%d runs; fixture %s, gateway %s", len(runs), fixture, gateway)

	// Each selected subtest queues its runs before t.Parallel (so -run selects the work too); a
	// pool of conformanceParallel workers, independent of go test's -parallel (2 on 2 cores), takes
	// them in order, and the subtest reports when they are done. The workers end when the queue,
	// closed once every subtest has queued, is empty.
	queue := make(chan func(), len(runs))
	for range conformanceParallel {
		go func() {
			for job := range queue {
				job()
			}
		}()
	}
	defer close(queue)
	run := func(r conformanceRun, url, dir string) conformanceResult {
		return runConformance(context.Background(), node, tools, r, url, dir)
	}
	type verdict struct{ direct, through conformanceResult }
	for _, r := range runs {
		t.Run(r.String(), func(t *testing.T) {
			dir := t.TempDir()
			done := make(chan verdict, 1)
			queue <- func() {
				var v verdict
				if v.direct = run(r, fixture, filepath.Join(dir, "direct")); v.direct.passed() {
					v.through = run(r, gateway, filepath.Join(dir, "gateway"))
				}
				done <- v
			}
			t.Parallel()
			v := <-done
			if !v.direct.passed() {
				if v.direct.checks != nil && len(v.direct.statuses("FAILURE")) == 0 {
					t.Skipf("no check of %s applies to the fixture (all skipped or informational)", r)
				}
				t.Fatalf("%s fails directly against the fixture:\n  %s", r, strings.Join(v.direct.problems(), "\n  "))
			}
			if lost := lostThrough(v.direct, v.through); len(lost) > 0 {
				t.Errorf("%s passes directly but not through the gateway:\n  %s", r, strings.Join(lost, "\n  "))
			}
		})
	}
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// firstError is the first line of a suite's output that names an error (a scenario that threw
// leaves no checks.json), or its last lines.
func firstError(out string) string {
	lines := slices.DeleteFunc(strings.Split(out, "\n"), func(l string) bool { return strings.TrimSpace(l) == "" })
	for _, l := range lines {
		if strings.Contains(strings.ToLower(l), "error") {
			return oneLine(l)
		}
	}
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return oneLine(strings.Join(lines, " / "))
}

// TestVerdictOfAConformanceRun pins how a run's checks become a verdict: what passes, what the gateway
// is blamed for, and how `list --server` lines are read.
func TestVerdictOfAConformanceRun(t *testing.T) {
	ok := func(id string) conformanceCheck { return conformanceCheck{ID: id, Status: "SUCCESS"} }
	fail := func(id, msg string) conformanceCheck {
		return conformanceCheck{ID: id, Status: "FAILURE", ErrorMessage: msg}
	}
	skip := func(id string) conformanceCheck {
		return conformanceCheck{ID: id, Status: "SKIPPED", ErrorMessage: "not declared"}
	}
	info := func(id string) conformanceCheck { return conformanceCheck{ID: id, Status: "INFO"} }
	res := func(cs ...conformanceCheck) conformanceResult { return conformanceResult{checks: cs} }

	for _, tc := range []struct {
		name            string
		direct, gateway conformanceResult
		passed          bool     // direct.passed()
		lost            []string // lostThrough(direct, gateway)
	}{
		{"same checks pass", res(ok("a"), ok("b")), res(ok("a"), ok("b")), true, nil},
		{"a failed check through the gateway", res(ok("a")), res(fail("a", "no\n  content")), true, []string{"a: no content"}},
		{"no result through the gateway", res(ok("a")), conformanceResult{output: "Error: socket hang up\n"}, true, []string{"no result: Error: socket hang up"}},
		{"a check skipped only through the gateway", res(ok("a"), ok("ext")), res(ok("a"), skip("ext")), true, []string{"ext: skipped through the gateway: not declared"}},
		{"informational instead of success is not a loss", res(ok("sse"), ok("b")), res(info("sse"), ok("b")), true, nil},
		{"nothing succeeded through the gateway", res(ok("sse")), res(conformanceCheck{ID: "sse", Status: "INFO", Details: json.RawMessage(`{"message": "JSON, not SSE"}`)}), true, []string{"no check succeeded (INFO sse: JSON, not SSE)"}},
		{"skipped on both sides", res(ok("a"), skip("ext")), res(ok("a"), skip("ext")), true, nil},
		{"a failure directly", res(ok("a"), fail("b", "x")), res(ok("a")), false, nil},
		{"nothing succeeded directly", res(skip("a"), info("b")), res(ok("a")), false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.direct.passed(); got != tc.passed {
				t.Errorf("passed() = %v, want %v", got, tc.passed)
			}
			if got := lostThrough(tc.direct, tc.gateway); !slices.Equal(got, tc.lost) {
				t.Errorf("lostThrough = %q, want %q", got, tc.lost)
			}
		})
	}

	for _, tc := range []struct {
		line string
		want []string // scenario@version
	}{
		{"  - tools-list [2025-06-18,2025-11-25,2026-07-28]", []string{"tools-list@2025-06-18", "tools-list@2025-11-25", "tools-list@2026-07-28"}},
		{"  - tasks-lifecycle [extension]", []string{"tasks-lifecycle@extension"}},
		{"Server scenarios (test against a server):", nil},
		{"  - broken [", nil},
	} {
		var got []string
		if m := listLine.FindStringSubmatch(tc.line); m != nil {
			for _, v := range strings.Split(m[2], ",") {
				got = append(got, m[1]+"@"+v)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q read as %q, want %q", tc.line, got, tc.want)
		}
	}
}
