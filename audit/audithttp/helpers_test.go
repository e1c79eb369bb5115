package audithttp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lush-agents/lush/audit/audithttp"
	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/gateway/approvalhttp"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/tracestore"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/test/projecttest"
)

// API keys of the test principals.
const (
	carolKey = "carol-key-0123456789" // user:carol: holds the audit role herself
	zoeKey   = "zoe-key-012345678901" // user:zoe, group:auditors: holds it through her group
	aliceKey = "alice-key-0123456789" // user:alice, group:eng: uses the notes tool, may not read the log
	samKey   = "sam-key-012345678901" // user:sam, group:security: holds approve, not audit
	patKey   = "pat-key-012345678901" // user:pat, group:auditors: an auditor whose reads the project sends for approval
)

const notes = "mcp://notes.example.com/mcp"

// xss is a logged argument that must reach the UI as text.
const xss = `<img src=x onerror=alert(1)>`

// projectFiles is a project with one agent on a notes server, and roles.
var projectFiles = map[string]string{
	"lush.yaml": `project: audit-test
tool_classes:
  mcp://notes.example.com/mcp:
    search_notes: read
    post_note: {access: write, risk: write}
tool_grants:
  - tool: mcp://notes.example.com/mcp
    grants:
      - {principal: group:eng, access: write}
roles:
  audit: [group:auditors, user:carol]
  approve: [group:security]
`,
	// The project's own rules for audit/read: they can deny by what is asked for, and ask for
	// approvals (which the API does not wait for).
	"policies/audits.rego": `package lush.policies.audits

deny contains {"rule": "corp.audit.payroll", "message": "the payroll agent's decisions are read by HR only"} if {
	input.action == "audit/read"
	input.arguments.query.agent == "payroll"
}

approval contains {"rule": "corp.audit.pat", "message": "pat's reads need a second auditor"} if {
	input.action == "audit/read"
	input.principal.id == "user:pat"
}
`,
	"agents/researcher/spec.yaml": `name: researcher
model: gemini-2.5-flash
description: Reads and writes notes.
tools:
  - server: mcp://notes.example.com/mcp
    access: write
acl:
  - {principal: group:eng, role: execute}
`,
}

// env is a served audit API over a real decision log, a real build's policy and a real
// authenticator.
type env struct {
	t       testing.TB
	log     *decisionlog.Log
	hash    string
	engine  *authz.Engine
	gateway *enforce.Enforcer // records the decisions the auditors read
	auditor *enforce.Enforcer // the audit API's
	srv     *httptest.Server
	traces  *tracestore.Memory
	tracer  *sdktrace.TracerProvider
	ids     map[string]string // name -> decision id of the recorded calls
	// approvals is the approvals store, whose API (approvalhttp) is served beside the UI.
	approvals *decisionlog.Approvals
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// buildProject compiles projectFiles and returns the build.
func buildProject(t testing.TB) *compiler.Result {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range projectFiles {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("build failed: %v", res.Diagnostics)
	}
	return res
}

// newEnv serves the audit API (and the UI, and /traces) on a loopback listener. deploy false
// leaves the audit API without a policy; opts change the API's configuration.
func newEnv(t testing.TB, deploy bool, opts ...func(*audithttp.Config)) *env {
	t.Helper()
	ctx := context.Background()
	res := buildProject(t)
	eng := projecttest.Engine(t, res.Bundle)
	logPath := filepath.Join(t.TempDir(), "decisions.db")
	log, err := decisionlog.Open(ctx, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	approvals, err := decisionlog.OpenApprovals(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { approvals.Close() })
	auth, err := identity.New(ctx, identity.Config{APIKeys: []identity.APIKeyConfig{
		{Name: "carol", SHA256: sha(carolKey), Principal: "user:carol"},
		{Name: "zoe", SHA256: sha(zoeKey), Principal: "user:zoe", Groups: []string{"group:auditors"}},
		{Name: "alice", SHA256: sha(aliceKey), Principal: "user:alice", Groups: []string{"group:eng"}},
		{Name: "sam", SHA256: sha(samKey), Principal: "user:sam", Groups: []string{"group:security"}},
		{Name: "pat", SHA256: sha(patKey), Principal: "user:pat", Groups: []string{"group:auditors"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	e := &env{t: t, log: log, hash: res.Hash, engine: eng, ids: map[string]string{}, traces: tracestore.NewMemory(0), approvals: approvals}
	e.tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(e.traces))
	t.Cleanup(func() { e.tracer.Shutdown(context.Background()) })
	// The gateway's calls and the API's requests are decided in one process: one policy. Without
	// deploy, the API's own process has no build yet.
	policy := enforce.NewPolicy(enforce.Config{Environment: "test", Log: log})
	e.gateway = enforce.NewPolicy(enforce.Config{Environment: "test", Log: log}).Enforcer("mcp-gateway")
	e.gateway.Policy().Set(eng)
	e.auditor = policy.Enforcer(audithttp.Point)
	if deploy {
		policy.Set(eng)
	}
	cfg := audithttp.Config{Log: log, Decider: e.auditor, Auth: auth, Traces: e.traces}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := audithttp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	approver := e.gateway.Policy().Enforcer(approvalhttp.Point)
	ap, err := approvalhttp.New(approvalhttp.Config{Store: approvals, Log: log, Decider: approver, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", a.Handler())
	mux.Handle("/approvals", ap.Handler())
	mux.Handle("/approvals/", ap.Handler())
	th := tracestore.Handler(e.traces)
	mux.Handle("/traces/", th)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

// call records a decision of the gateway about a call of tool by principal, with its completion
// when allowed. It runs inside a span of a trace, so the decision carries the trace id.
func (e *env) call(name string, p authz.Principal, tool string, args map[string]any, live bool) string {
	e.t.Helper()
	ctx, span := e.tracer.Tracer("test").Start(context.Background(), "invoke_agent researcher")
	v := e.gateway.Decide(ctx, authz.Input{Action: authz.ActionToolsCall, Principal: p, Agent: "researcher", Chain: []string{"researcher"},
		Tool: &authz.Tool{Ref: notes, Name: tool}, Arguments: args, LiveWrites: live})
	if !v.Recorded {
		e.t.Fatalf("%s: not recorded: %+v", name, v.Decision)
	}
	if v.Allow {
		status := decisionlog.StatusOK
		if v.Outcome == authz.OutcomeStub {
			status = decisionlog.StatusStubbed
		}
		v.Complete(status, 12*time.Millisecond, json.RawMessage(`{"content":[{"type":"text","text":"posted"}]}`), "")
	}
	span.End()
	e.ids[name] = v.ID
	return v.ID
}

// seed records the calls the tests read back: three by alice (a read, a live write carrying the
// XSS argument, a stubbed write) and one by dave that is denied.
func (e *env) seed() {
	e.t.Helper()
	alice := authz.Principal{ID: "user:alice", Groups: []string{"group:eng"}}
	e.call("read", alice, "search_notes", map[string]any{"query": "revenue"}, false)
	e.call("live", alice, "post_note", map[string]any{"text": xss}, true)
	e.call("stub", alice, "post_note", map[string]any{"text": "draft"}, false)
	e.call("denied", authz.Principal{ID: "user:dave", Groups: []string{}}, "search_notes", map[string]any{"query": "salaries"}, false)
	e.sync()
}

func (e *env) sync() {
	e.t.Helper()
	if err := e.log.Sync(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// get sends GET path with the key as a bearer token ("" for none).
func (e *env) get(path, key string) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest("GET", e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, body
}

// record returns the logged decision with id, failing the test if there is none.
func (e *env) record(id string) decisionlog.Record {
	e.t.Helper()
	e.sync()
	recs, err := e.log.Query(context.Background(), decisionlog.Filter{DecisionID: id, Limit: 10})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range recs {
		if r.Event.DecisionID == id {
			return r
		}
	}
	e.t.Fatalf("decision %s is not in the log", id)
	return decisionlog.Record{}
}

type apiError struct {
	Error struct {
		Code       string         `json:"code"`
		Message    string         `json:"message"`
		DecisionID string         `json:"decision_id"`
		Reasons    []authz.Reason `json:"reasons"`
	} `json:"error"`
}
