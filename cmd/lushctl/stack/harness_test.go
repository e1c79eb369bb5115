package stack_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/agentd/model/scripted"
	"github.com/lush-agents/lush/cmd/lushctl/stack"
	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/tracestore"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/scheduler"
	"github.com/lush-agents/lush/test/mcpserver"
	"github.com/lush-agents/lush/test/projecttest"
	"github.com/lush-agents/lush/test/syncbuf"
)

// API keys of the test principals.
const (
	aliceKey = "alice-key-0123456789" // user:alice, group:eng: runs every agent, reads the test server, writes notes
	carolKey = "carol-key-0123456789" // user:carol: may run the orchestrator and call lush://researcher, not run the researcher
	daveKey  = "dave-key-01234567890" // user:dave: may do nothing
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// project writes a project with three agents: the orchestrator calls the researcher
// (lush://researcher) and writes notes; the researcher reads the test server at url; loopy calls
// itself.
func project(t testing.TB, url string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"agents/orchestrator/spec.yaml": `name: orchestrator
model: gemini-2.5-flash
description: Coordinates research and writes notes.
tools:
  - server: lush://researcher
    access: read
  - server: mcp://tests.internal/mcp
    access: write
    tools: [write_note]
acl:
  - {principal: group:eng, role: execute}
  - {principal: user:carol, role: execute}
`,
		"agents/researcher/spec.yaml": `name: researcher
model: gemini-2.5-flash
description: Finds facts in the notes.
tools:
  - server: mcp://tests.internal/mcp
    access: read
    tools: [echo, fail]
acl:
  - {principal: group:eng, role: execute}
  - {principal: serviceaccount:notes-bot, role: execute}
`,
		"loops/notes.yaml": `name: notes
schedule: "@every 1h"
agent: researcher
run_as: serviceaccount:notes-bot
instruction: Check the notes.
acl:
  - {principal: group:eng, role: execute}
  - {principal: user:carol, role: read}
`,
		"agents/loopy/spec.yaml": `name: loopy
model: gemini-2.5-flash
description: Calls itself.
tools:
  - server: lush://loopy
    access: read
acl:
  - {principal: group:eng, role: execute}
`,
		"policies/pay.rego": `# METADATA
# title: No salaries
package lush.policies.pay

# METADATA
# title: Salaries are private
# custom:
#   id: test.pay.private
deny contains {"rule": rego.metadata.rule().custom.id, "message": "salaries are private: do not look them up"} if {
	input.action == "tools/call"
	contains(lower(object.get(input, ["arguments", "text"], "")), "salary")
}
`,
		"lush.yaml": `project: agentd-test
service_accounts:
  - name: notes-bot
servers:
  mcp://tests.internal/mcp:
    url: ` + url + `
tool_classes:
  mcp://tests.internal/mcp:
    echo: read
    fail: read
    write_note: {access: write, risk: write}
tool_grants:
  - tool: mcp://tests.internal/mcp
    grants:
      - {principal: group:eng, access: read}
      - {principal: serviceaccount:notes-bot, access: read}
      - {principal: user:alice, access: write, tools: [write_note]}
  - tool: lush://researcher
    grants:
      - {principal: group:eng, access: read}
      - {principal: user:carol, access: read}
  - tool: lush://loopy
    grants:
      - {principal: group:eng, access: read}
`,
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// scripts writes scripted-model turns: name -> YAML.
func scripts(t testing.TB, s map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, y := range s {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// defaultScripts: the orchestrator asks the researcher, writes a note with the answer, and
// reports; the researcher echoes a fact; loopy calls itself.
var defaultScripts = map[string]string{
	"orchestrator": `turns:
  - calls: [{name: researcher, args: {message: "What do the notes say about Q3?"}}]
  - calls: [{name: write_note, args: {text: "{{result}}"}}]
  - text: "Report written. {{result}}"
`,
	"researcher": `turns:
  - calls: [{name: echo, args: {text: "the CEO's salary"}}]
  - calls: [{name: echo, args: {text: "Q3 revenue grew 12%"}}]
  - text: "Found: {{result}}"
`,
	"loopy": `turns:
  - calls: [{name: loopy, args: {message: "again"}}]
  - text: "loopy got: {{result}}"
`,
}

type harness struct {
	t     testing.TB
	st    *stack.Stack
	rec   *mcpserver.Recorder
	spans *tracetest.SpanRecorder
	log   string // decision log path
	dir   string // the project (its .lush/build is the audit API's build store)
	hash  string
	logs  *syncbuf.Buffer // the stack's own log output (debug level)
	stop  func() error    // shuts the stack down (once; also at the test's end) and reports how it went
}

type harnessOpts struct {
	model  model.Model
	agents agentd.Config
	gw     func(*gateway.Config)
	// scheduler, when set, runs the scheduler on a SQLite store in a temporary directory.
	scheduler bool
	// lushYAML is appended to the project's lush.yaml.
	lushYAML string
	// logPath is the decision log (default: a new file), to start a stack on another's log.
	logPath string
	// console keeps traces in memory and builds in a build store (the deployed one saved there),
	// both handed to the audit API, as lushctl run does.
	console bool
}

// start builds the test project and serves it with a stack on loopback.
func start(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	url, rec := mcpserver.StartRecordedHTTP(t.Cleanup)
	dir := project(t, url)
	if o.lushYAML != "" {
		f, err := os.OpenFile(filepath.Join(dir, "lush.yaml"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("\n" + o.lushYAML); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if o.model == nil {
		m, err := scripted.New(scripts(t, defaultScripts))
		if err != nil {
			t.Fatal(err)
		}
		o.model = m
	}
	h := &harness{t: t, rec: rec, spans: tracetest.NewSpanRecorder(), log: filepath.Join(t.TempDir(), "decisions.db"), logs: &syncbuf.Buffer{}}
	if o.logPath != "" {
		h.log = o.logPath
	}
	logger := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	cfg := gateway.Config{Listen: "127.0.0.1:0", DecisionLog: h.log, Auth: identity.Config{APIKeys: []identity.APIKeyConfig{
		{Name: "alice", SHA256: sha(aliceKey), Principal: "user:alice", Groups: []string{"group:eng"}},
		{Name: "carol", SHA256: sha(carolKey), Principal: "user:carol"},
		{Name: "dave", SHA256: sha(daveKey), Principal: "user:dave"},
	}}}
	cfg.Limits.DecisionTimeout = projecttest.DecisionTimeout
	if o.gw != nil {
		o.gw(&cfg)
	}
	ctx := context.Background()
	var sched *scheduler.Config
	if o.scheduler {
		sched = &scheduler.Config{Store: filepath.Join(t.TempDir(), "scheduler.db"), Poll: 50 * time.Millisecond}
	}
	scfg := stack.Config{ProjectDir: dir, Gateway: cfg, Agents: &o.agents, Model: o.model, Audit: true, Tracer: tp, Logger: logger,
		Scheduler: sched}
	if o.console {
		traces := tracestore.NewMemory(0)
		tp.RegisterSpanProcessor(sdktrace.NewSimpleSpanProcessor(traces))
		scfg.TraceStore, scfg.Builds = traces, buildstore.Open(filepath.Join(t.TempDir(), "build"))
	}
	st, err := stack.Start(ctx, scfg)
	if err != nil {
		t.Fatal(err)
	}
	h.stop = sync.OnceValue(func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return st.Shutdown(sctx)
	})
	t.Cleanup(func() { h.stop() })
	h.st, h.dir = st, dir
	res, err := compiler.Build(ctx, dir, compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("build: %v %v", err, res.Diagnostics)
	}
	if scfg.Builds != nil {
		if err := scfg.Builds.Save(res.Hash, res.ManifestJSON, res.Bundle); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Deploy(ctx, res.Manifest, res.Hash, res.Bundle); err != nil {
		t.Fatal(err)
	}
	h.hash = res.Hash
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := st.Gateway.WaitUpstreams(wctx); err != nil {
		t.Fatal(err)
	}
	return h
}

// post sends JSON to path as the principal of key and returns the status and body.
func (h *harness) post(path, key string, body any) (int, []byte) {
	h.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", h.st.URL()+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (h *harness) get(path, key string) (int, []byte) {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.st.URL()+path, nil)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// chat runs one chat as key and decodes the result.
func (h *harness) chat(agent, key, message string) (int, *agentd.Result, []byte) {
	h.t.Helper()
	code, body := h.post("/agents/"+agent+"/chat", key, map[string]any{"message": message})
	var res agentd.Result
	json.Unmarshal(body, &res)
	return code, &res, body
}

// decisions reads the whole decision log, oldest first.
func (h *harness) decisions() []decisionlog.Record {
	h.t.Helper()
	h.st.Log().Sync(context.Background())
	recs, err := h.st.Log().Query(context.Background(), decisionlog.Filter{Oldest: true, Limit: 1000})
	if err != nil {
		h.t.Fatal(err)
	}
	return recs
}
