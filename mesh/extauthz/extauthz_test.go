package extauthz_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/mesh/extauthz"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/test/projecttest"
	"github.com/lush-agents/lush/vault"
)

// Test principals: API keys, and the credentials the notes server takes from each.
const (
	aliceKey = "alice-key-0123456789"   // user:alice, group:eng: read, and write on write_note
	bobKey   = "bob-key-0123456789"     // user:bob: no grants
	botKey   = "bot-key-0123456789abcd" // serviceaccount:bot: write on everything

	notesRef       = "mcp://notes.internal/mcp"
	aliceNotes     = "alice-notes-token-5f1e9a"
	carolNotes     = "carol-notes-token-77c2d0"
	notesBotNotes  = "notes-bot-token-a81b3c"
	serverToolPath = "/agents/assistant/tools/notes/mcp"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

type harness struct {
	t         testing.TB
	srv       *extauthz.Server
	client    authv3.AuthorizationClient
	conn      *grpc.ClientConn
	log       *decisionlog.Log
	logPath   string
	hash      string
	signer    *identity.Signer
	socket    string
	approvals *decisionlog.Approvals
}

type harnessOpts struct {
	live      bool // live writes for every tool
	noDeploy  bool
	lushExtra string            // appended to the project's lush.yaml
	policies  map[string]string // more files of the project's policies/ directory: name → Rego
	approvals bool              // calls that need approval ask for one in the log's approvals store
	limits    jsonlimit.Limits
	failures  *identity.Failures
	logger    *slog.Logger // Lush's log (discarded when nil)
}

// start builds the test project, and serves an ext_authz server over it on loopback TCP and on a
// Unix socket; the client talks TCP.
func start(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/project")); err != nil {
		t.Fatal(err)
	}
	if o.lushExtra != "" {
		f, err := os.OpenFile(filepath.Join(dir, "lush.yaml"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("\n" + o.lushExtra)
		f.Close()
	}
	for name, rego := range o.policies {
		if err := os.WriteFile(filepath.Join(dir, "policies", name), []byte(rego), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, eng := projecttest.Build(t, dir)
	var err error
	h := &harness{t: t, hash: res.Hash, logPath: filepath.Join(t.TempDir(), "decisions.db")}
	if h.log, err = decisionlog.Open(ctx, h.logPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.log.Close() })

	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	h.signer = identity.NewSigner(priv, "")
	auth, err := identity.New(ctx, identity.Config{
		APIKeys: []identity.APIKeyConfig{
			{Name: "alice", SHA256: sha(aliceKey), Principal: "user:alice", Groups: []string{"group:eng"}},
			{Name: "bob", SHA256: sha(bobKey), Principal: "user:bob"},
			{Name: "bot", SHA256: sha(botKey), Principal: "serviceaccount:bot"},
		},
		Proxy:      &identity.ProxyConfig{Trusted: []string{"10.0.0.0/8"}},
		Delegation: &identity.DelegationConfig{Keys: []ed25519.PublicKey{pub}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })

	credFile := filepath.Join(t.TempDir(), "credentials.local")
	file := vault.OpenFile(credFile)
	for _, e := range []vault.FileEntry{
		{Tool: notesRef, Principal: "user:alice", Credential: vault.Credential{Type: "bearer", Token: aliceNotes}},
		{Tool: notesRef, Principal: "user:carol", Credential: vault.Credential{Type: "bearer", Token: carolNotes}},
		{Tool: notesRef, Principal: "serviceaccount:notes-bot", Credential: vault.Credential{Type: "bearer", Token: notesBotNotes}},
	} {
		if _, err := file.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	broker, err := vault.New(vault.Config{File: credFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)

	h.socket = filepath.Join(t.TempDir(), "ext_authz.sock")
	cfg := extauthz.Config{Listen: "127.0.0.1:0", Socket: h.socket, Identity: identity.EnvoyConfig{
		JWTMetadata: &identity.JWTMetadataConfig{},
		SPIFFE: []identity.SPIFFEMapping{{Prefix: "spiffe://example.org/ns/agents/sa/", Principal: "serviceaccount:{name}",
			Groups: []string{"group:agents"}}},
	}}
	policy := enforce.NewPolicy(enforce.Config{Environment: "dev", Log: h.log})
	opts := extauthz.Options{Policy: policy, Auth: auth, Broker: broker, LiveWrites: func(string) bool { return o.live },
		ArgumentLimits: o.limits, AuthFailures: o.failures, Logger: o.logger}
	if o.approvals {
		if h.approvals, err = decisionlog.OpenApprovals(h.logPath); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.approvals.Close() })
		opts.Approvals = h.approvals
	}
	h.srv, err = extauthz.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.srv.Stop(ctx)
	})
	if !o.noDeploy {
		policy.Set(eng)
		h.srv.Deploy(res.Manifest, res.Hash)
	}
	var tcp string
	for _, a := range h.srv.Addrs() {
		if a.Network() == "tcp" {
			tcp = a.String()
		}
	}
	h.conn, err = grpc.NewClient(tcp, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.conn.Close() })
	h.client = authv3.NewAuthorizationClient(h.conn)
	return h
}

// load reads a captured CheckRequest from testdata/checks.
func load(t testing.TB, name string) *authv3.CheckRequest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "checks", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	req := &authv3.CheckRequest{}
	if err := protojson.Unmarshal(data, req); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return req
}

func (h *harness) check(req *authv3.CheckRequest) *authv3.CheckResponse {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := h.client.Check(ctx, req)
	if err != nil {
		h.t.Fatalf("Check: %v", err)
	}
	return resp
}

func (h *harness) events() []decisionlog.Record {
	h.t.Helper()
	if err := h.log.Sync(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	r, err := decisionlog.OpenReader(h.logPath)
	if err != nil {
		h.t.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Query(context.Background(), decisionlog.Filter{Oldest: true, Limit: 1000})
	if err != nil {
		h.t.Fatal(err)
	}
	return recs
}

// answer is a CheckResponse in the terms a test checks.
type answer struct {
	allowed bool
	status  int               // HTTP status of an answer given at the sidecar
	headers map[string]string // added to the request (allowed) or of the answer (denied)
	remove  []string
	body    map[string]any // the JSON-RPC answer given at the sidecar
	meta    map[string]any // dynamic metadata
	grpc    code.Code
}

func read(t testing.TB, r *authv3.CheckResponse) answer {
	t.Helper()
	a := answer{headers: map[string]string{}, grpc: code.Code(r.GetStatus().GetCode()), meta: r.GetDynamicMetadata().AsMap()}
	if ok := r.GetOkResponse(); ok != nil {
		a.allowed = true
		for _, hv := range ok.GetHeaders() {
			a.headers[hv.GetHeader().GetKey()] = hv.GetHeader().GetValue()
		}
		a.remove = ok.GetHeadersToRemove()
		if a.grpc != code.Code_OK {
			t.Errorf("an OK response with status %v", a.grpc)
		}
		return a
	}
	d := r.GetDeniedResponse()
	if d == nil {
		t.Fatalf("the response has neither an OK nor a denied HTTP response: %v", r)
	}
	if a.grpc == code.Code_OK {
		t.Errorf("a denied response with status OK: Envoy would let the request through")
	}
	a.status = int(d.GetStatus().GetCode())
	for _, hv := range d.GetHeaders() {
		a.headers[hv.GetHeader().GetKey()] = hv.GetHeader().GetValue()
	}
	if err := json.Unmarshal([]byte(d.GetBody()), &a.body); err != nil {
		t.Errorf("the answer's body is not JSON: %q", d.GetBody())
	}
	return a
}

func (a answer) rpcError() (code float64, msg string, data map[string]any) {
	e, _ := a.body["error"].(map[string]any)
	code, _ = e["code"].(float64)
	msg, _ = e["message"].(string)
	data, _ = e["data"].(map[string]any)
	return
}

// TestCapturedChecks sends the captured CheckRequests of testdata/checks, shaped as Envoy sends
// them (bodies, headers, jwt_authn metadata, peer certificates), and checks the answer and the
// decision-log event of each.
func TestCapturedChecks(t *testing.T) {
	tests := []struct {
		file      string
		live      bool
		allowed   bool
		status    int // of an answer given at the sidecar
		grpc      code.Code
		outcome   string // of the logged event; "" means nothing is logged
		action    string
		principal string
		rule      string            // a rule of the decision
		cred      string            // the Authorization header the upstream gets
		msg       string            // in the JSON-RPC error message
		input     map[string]any    // fields of the logged input
		headers   map[string]string // of the answer
	}{
		{file: "call_read_apikey", allowed: true, outcome: "allow", action: "tools/call", principal: "user:alice", cred: "Bearer " + aliceNotes,
			input: map[string]any{"agent": "assistant", "chain": []any{"assistant"}, "tool": map[string]any{"ref": notesRef, "name": "search"},
				"arguments": map[string]any{"query": "standup"}, "live_writes": false, "environment": "dev"}},
		{file: "call_write_stub", status: 200, grpc: code.Code_PERMISSION_DENIED, outcome: "stub", action: "tools/call", principal: "user:alice",
			headers: map[string]string{"x-lush-outcome": "stub", "content-type": "application/json"}},
		{file: "call_write_stub", live: true, allowed: true, outcome: "allow", action: "tools/call", principal: "user:alice", cred: "Bearer " + aliceNotes,
			input: map[string]any{"live_writes": true}},
		{file: "call_denied_bob", status: 403, grpc: code.Code_PERMISSION_DENIED, outcome: "deny", action: "tools/call", principal: "user:bob",
			msg: "Lush denied this call", headers: map[string]string{"x-lush-outcome": "deny"}},
		{file: "call_jwt_metadata", allowed: true, outcome: "allow", action: "tools/call", principal: "user:carol", cred: "Bearer " + carolNotes},
		{file: "call_jwt_no_credential", status: 403, grpc: code.Code_PERMISSION_DENIED, outcome: "deny", action: "tools/call", principal: "user:dave",
			msg: "user:dave", input: map[string]any{"principal": map[string]any{"id": "user:dave", "groups": []any{"group:eng", "group:ops"}, "authentication": "envoy_jwt"}}},
		{file: "call_policy_error", status: 503, grpc: code.Code_UNAVAILABLE, outcome: "error", action: "tools/call", principal: "user:alice",
			msg: "could not decide", headers: map[string]string{"x-lush-outcome": "error"}},
		{file: "list_spiffe_cert", allowed: true, outcome: "allow", action: "tools/list", principal: "serviceaccount:notes-bot", cred: "Bearer " + notesBotNotes,
			input: map[string]any{"principal": map[string]any{"id": "serviceaccount:notes-bot", "groups": []any{"group:agents"}, "authentication": "spiffe"}}},
		{file: "spiffe_two_ids", status: 401, grpc: code.Code_UNAUTHENTICATED, msg: "exactly one"},
		{file: "spiffe_mismatch", status: 401, grpc: code.Code_UNAUTHENTICATED, msg: "is not the principal Envoy names"},
		{file: "trusted_header", allowed: true, outcome: "allow", action: "tools/call", principal: "user:alice", cred: "Bearer " + aliceNotes},
		{file: "untrusted_header", status: 401, grpc: code.Code_UNAUTHENTICATED, msg: "192.168.1.5", headers: map[string]string{"www-authenticate": `Bearer realm="lush"`}},
		{file: "no_identity", status: 401, grpc: code.Code_UNAUTHENTICATED, msg: "carries no credentials"},
		{file: "bad_body", status: 400, grpc: code.Code_INVALID_ARGUMENT, msg: "not a JSON-RPC message"},
		{file: "header_mismatch", status: 400, grpc: code.Code_INVALID_ARGUMENT, msg: `Mcp-Name header says "search" but the message's params.name is "write_note"`},
		{file: "headers_only_list", allowed: true, outcome: "allow", action: "tools/list", principal: "user:alice", cred: "Bearer " + aliceNotes},
		// Before 2026-07-28 servers do not check the headers against the body: the body decides.
		{file: "headers_only_list_legacy", status: 400, grpc: code.Code_INVALID_ARGUMENT, msg: "is decided from its body"},
		{file: "no_body_call", status: 400, grpc: code.Code_INVALID_ARGUMENT, msg: "with_request_body"},
		{file: "duplicate_name", status: 400, grpc: code.Code_INVALID_ARGUMENT, msg: `"name" appears twice`},
		{file: "batch", status: 400, grpc: code.Code_INVALID_ARGUMENT, msg: "batches"},
		{file: "initialize", allowed: true, outcome: "allow", action: "tools/list", principal: "user:alice", cred: "Bearer " + aliceNotes,
			input: map[string]any{"tool": map[string]any{"ref": notesRef}}},
		{file: "notification", status: 403, grpc: code.Code_PERMISSION_DENIED, outcome: "deny", action: "tools/list", principal: "user:bob"},
		{file: "sse_get", allowed: true, outcome: "allow", action: "tools/list", principal: "user:alice", cred: "Bearer " + aliceNotes},
		// agentd authenticates its callers itself: their credentials go on.
		{file: "agent_chat", allowed: true, outcome: "allow", action: "agent/invoke", principal: "user:alice",
			input: map[string]any{"agent": "helper", "chain": []any{"helper"}}},
		{file: "agent_mcp_path_only", status: 403, grpc: code.Code_PERMISSION_DENIED, outcome: "deny", action: "agent/invoke", principal: "user:bob"},
		{file: "unknown_route", status: 404, grpc: code.Code_NOT_FOUND, msg: "no agent or tool of the build"},
		{file: "gateway_route", allowed: true},
		// agentd decides every A2A method itself (a task read is not an invocation), and the Agent
		// Card is for clients that have not authenticated yet: nothing is decided or logged here,
		// even for bob, who may not invoke helper.
		{file: "a2a_tasks_get", allowed: true},
		{file: "a2a_card_anonymous", allowed: true},
	}
	hs := map[bool]*harness{false: start(t, harnessOpts{}), true: start(t, harnessOpts{live: true})}
	for _, tc := range tests {
		name := tc.file
		if tc.live {
			name += "/live"
		}
		t.Run(name, func(t *testing.T) {
			h := hs[tc.live]
			before := len(h.events())
			req := load(t, tc.file)
			a := read(t, h.check(req))
			if a.allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (status %d, body %v)", a.allowed, tc.allowed, a.status, a.body)
			}
			if !tc.allowed {
				if a.status != tc.status || a.grpc != tc.grpc {
					t.Errorf("answer %d (%v), want %d (%v); body %v", a.status, a.grpc, tc.status, tc.grpc, a.body)
				}
				// The answer echoes the request's id (null when it has none or cannot be read).
				var sent struct{ ID any }
				json.Unmarshal(req.GetAttributes().GetRequest().GetHttp().GetRawBody(), &sent)
				json.Unmarshal([]byte(req.GetAttributes().GetRequest().GetHttp().GetBody()), &sent)
				if id, ok := a.body["id"]; !ok || id != sent.ID {
					t.Errorf("JSON-RPC id = %v, want %v", a.body["id"], sent.ID)
				}
			}
			if _, msg, _ := a.rpcError(); !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q does not contain %q", msg, tc.msg)
			}
			for k, v := range tc.headers {
				if a.headers[k] != v {
					t.Errorf("header %s = %q, want %q", k, a.headers[k], v)
				}
			}
			if tc.allowed && tc.cred != "" {
				if a.headers["authorization"] != tc.cred {
					t.Errorf("the upstream gets Authorization %q, want %q", a.headers["authorization"], tc.cred)
				}
				if slices.Contains(a.remove, "authorization") {
					t.Errorf("the credential's header is also removed: %v", a.remove)
				}
			}
			if tc.allowed && tc.outcome != "" && tc.action != "agent/invoke" {
				// The caller's own credentials and identity headers never reach an MCP server.
				for _, hdr := range []string{"x-api-key", "x-lush-principal", "x-lush-groups"} {
					if !slices.Contains(a.remove, hdr) {
						t.Errorf("%s is not removed: %v", hdr, a.remove)
					}
				}
				if tc.cred == "" && !slices.Contains(a.remove, "authorization") {
					t.Errorf("the caller's Authorization header is passed on: %v", a.remove)
				}
			}

			evs := h.events()[before:]
			if tc.outcome == "" {
				if len(evs) != 0 {
					t.Fatalf("%d events logged, want none", len(evs))
				}
				return
			}
			if len(evs) != 1 {
				t.Fatalf("%d events logged, want 1", len(evs))
			}
			ev := evs[0].Event
			if ev.Point != extauthz.Point || ev.Outcome != tc.outcome || ev.Action != tc.action || ev.Principal != tc.principal || ev.Revision != h.hash {
				t.Errorf("event %s %s %s %s rev %s, want %s %s %s %s", ev.Point, ev.Outcome, ev.Action, ev.Principal, ev.Revision,
					extauthz.Point, tc.outcome, tc.action, tc.principal)
			}
			// The decision id is the same in the event, the headers and Envoy's metadata.
			if a.headers[extauthz.HeaderDecisionID] != ev.DecisionID || a.meta["decision_id"] != ev.DecisionID || a.meta["outcome"] != tc.outcome {
				t.Errorf("decision id: header %q, metadata %v, event %q", a.headers[extauthz.HeaderDecisionID], a.meta, ev.DecisionID)
			}
			if !tc.allowed {
				if _, _, data := a.rpcError(); data != nil && data["decision_id"] != ev.DecisionID {
					t.Errorf("the answer names decision %v, the log %s", data["decision_id"], ev.DecisionID)
				}
			}
			var in map[string]any
			json.Unmarshal(ev.Input, &in)
			for k, want := range tc.input {
				got, _ := json.Marshal(in[k])
				w, _ := json.Marshal(want)
				if string(got) != string(w) {
					t.Errorf("input.%s = %s, want %s", k, got, w)
				}
			}
			if tc.outcome == "stub" {
				checkStub(t, a, evs[0], ev.DecisionID)
			}
			// The decision joins the trace of the request (traceparent), when it has one.
			if tp := req.GetAttributes().GetRequest().GetHttp().GetHeaders()["traceparent"]; tp != "" && ev.TraceID != strings.Split(tp, "-")[1] {
				t.Errorf("the event's trace is %q; the request's traceparent is %s", ev.TraceID, tp)
			}
		})
	}
}

// checkStub: a stub is a JSON-RPC success marking the stub, and the log says it was stubbed.
func checkStub(t *testing.T, a answer, rec decisionlog.Record, id string) {
	t.Helper()
	res, _ := a.body["result"].(map[string]any)
	meta, _ := res["_meta"].(map[string]any)
	st, _ := meta["dev.lush/stub"].(map[string]any)
	if st["stubbed"] != true || st["decision_id"] != id || st["name"] != "write_note" {
		t.Errorf("stub result %v", a.body)
	}
	content, _ := res["content"].([]any)
	if len(content) == 0 || !strings.Contains(content[0].(map[string]any)["text"].(string), "NOT executed") {
		t.Errorf("stub content %v", res["content"])
	}
	if rec.Completion == nil || rec.Completion.Status != decisionlog.StatusStubbed {
		t.Errorf("completion %+v, want stubbed", rec.Completion)
	}
}

// A delegation token lets only its agent use that agent's tools; at an agent's endpoint, the
// token's chain is extended by the agent called.
func TestDelegationTokens(t *testing.T) {
	h := start(t, harnessOpts{})
	token := func(agent string, chain ...string) string {
		tok, err := h.signer.Sign(identity.Delegation{Principal: "user:alice", Groups: []string{"group:eng"}, Agent: agent, Chain: chain, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	req := load(t, "other_agents_token")
	req.Attributes.Request.Http.Headers["authorization"] = "Bearer " + token("helper", "helper")
	a := read(t, h.check(req))
	if _, msg, _ := a.rpcError(); a.status != 403 || !strings.Contains(msg, `lets agent "helper" act, not "assistant"`) {
		t.Errorf("a token of another agent: %d %q", a.status, msg)
	}
	req.Attributes.Request.Http.Headers["authorization"] = "Bearer " + token("assistant", "assistant")
	if a := read(t, h.check(req)); !a.allowed {
		t.Errorf("the agent's own token is refused: %v", a.body)
	}
	chat := load(t, "agent_chat")
	chat.Attributes.Request.Http.Headers["authorization"] = "Bearer " + token("assistant", "assistant")
	if a := read(t, h.check(chat)); !a.allowed {
		t.Errorf("assistant calling helper for alice: %v", a.body)
	}
	evs := h.events()
	var in authz.Input
	json.Unmarshal(evs[len(evs)-1].Event.Input, &in)
	if strings.Join(in.Chain, ",") != "assistant,helper" || in.Depth != 2 {
		t.Errorf("chain %v depth %d, want assistant,helper 2", in.Chain, in.Depth)
	}
}

// TestFailedAuthenticationsReported: each request ext_authz refuses for its credentials
// (Envoy-verified identities, bearer tokens, API keys, proxy headers, a token of another agent) is
// counted by method and reason and logged with the downstream peer's address, without the
// credential.
func TestFailedAuthenticationsReported(t *testing.T) {
	const wrongKey = "mallory-key-0123456789"
	for _, tc := range []struct {
		file           string
		auth           string // the Authorization header, when set
		method, reason string
		level, source  string
	}{
		{file: "no_identity", method: "none", reason: identity.CodeMissingCredentials, level: "DEBUG", source: "10.244.0.12"},
		{file: "no_identity", auth: "Bearer " + wrongKey, method: "apikey", reason: identity.CodeUnknownAPIKey, level: "WARN", source: "10.244.0.12"},
		{file: "untrusted_header", method: "proxy", reason: identity.CodeUntrustedProxy, level: "WARN", source: "192.168.1.5"},
		{file: "spiffe_two_ids", method: "spiffe", reason: identity.CodeInvalidRequest, level: "WARN", source: "10.244.0.31"},
		{file: "other_agents_token", auth: "delegation", method: "delegation", reason: identity.CodeForbiddenAgent, level: "WARN", source: "10.244.0.12"},
	} {
		t.Run(tc.file+" "+tc.method, func(t *testing.T) {
			var logs bytes.Buffer
			m := telemetry.NewMetrics()
			h := start(t, harnessOpts{failures: identity.NewFailures(m, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))})
			req := load(t, tc.file)
			auth := tc.auth
			if auth == "delegation" {
				tok, err := h.signer.Sign(identity.Delegation{Principal: "user:alice", Agent: "helper", Chain: []string{"helper"}, TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				auth = "Bearer " + tok
			}
			if auth != "" {
				req.Attributes.Request.Http.Headers["authorization"] = auth
			}
			if a := read(t, h.check(req)); a.allowed || a.status != 401 && a.status != 403 {
				t.Fatalf("answered %d: %v", a.status, a.body)
			}
			rec := httptest.NewRecorder()
			m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if want := fmt.Sprintf("lush_authentication_failures_total{method=%q,reason=%q} 1\n", tc.method, tc.reason); !strings.Contains(rec.Body.String(), want) {
				t.Errorf("not counted as %s", want)
			}
			var line struct{ Level, Msg, Source, Endpoint, Method, Reason string }
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil || line.Msg != "authentication failed" || line.Level != tc.level ||
				line.Source != tc.source || line.Endpoint != "ext_authz" || line.Method != tc.method || line.Reason != tc.reason {
				t.Errorf("logged %s (%v)", logs.String(), err)
			}
			if auth != "" && (strings.Contains(logs.String(), strings.TrimPrefix(auth, "Bearer ")) || strings.Contains(rec.Body.String(), strings.TrimPrefix(auth, "Bearer "))) {
				t.Errorf("the credential is in the log or the metrics: %s", logs.String())
			}
		})
	}
}

// Until a build is deployed, every Check is denied and health says NOT_SERVING.
// TestRateLimitedAtTheSidecar: a call over the project's rate limit is answered at the sidecar
// with 429 and the standard Retry-After hint, logged as the policy's denial.
func TestRateLimitedAtTheSidecar(t *testing.T) {
	h := start(t, harnessOpts{lushExtra: "rate_limits:\n  - principal: user:alice\n    rate: 1/m\n    burst: 1\n"})
	if a := read(t, h.check(load(t, "call_read_apikey"))); !a.allowed {
		t.Fatalf("first call: %d %v", a.status, a.body)
	}
	a := read(t, h.check(load(t, "call_read_apikey")))
	if a.allowed || a.status != 429 || a.grpc != code.Code_RESOURCE_EXHAUSTED || a.headers["retry-after"] == "" {
		t.Fatalf("second call: allowed %v status %d (%v) headers %v", a.allowed, a.status, a.grpc, a.headers)
	}
	if secs, err := strconv.Atoi(a.headers["retry-after"]); err != nil || secs < 1 || secs > 60 {
		t.Errorf("retry-after %q", a.headers["retry-after"])
	}
	evs := h.events()
	if last := evs[len(evs)-1].Event; last.Outcome != "deny" || !slices.Contains(last.Rules, "lush.rate.limited") {
		t.Errorf("logged %s %v", last.Outcome, last.Rules)
	}
}

// TestApprovalAtTheSidecar: a call that needs approval is refused with the pending approval's id
// (the sidecar does not hold Envoy's check); once a person approves it, the same call is let
// through, once; a different call is not covered.
func TestApprovalAtTheSidecar(t *testing.T) {
	h := start(t, harnessOpts{live: true, approvals: true, lushExtra: "authorization:\n  approval_required_for: [write]\n"})
	a := read(t, h.check(load(t, "call_write_stub")))
	_, msg, data := a.rpcError()
	id := a.headers[extauthz.HeaderApprovalID]
	if a.allowed || a.status != 403 || id == "" || !strings.Contains(msg, "Approval "+id+" is pending") || data["approval"] == nil {
		t.Fatalf("a call that needs approval: %d %q %v %v", a.status, msg, a.headers, data)
	}
	// Asked again while pending: the same approval, not a second one.
	if again := read(t, h.check(load(t, "call_write_stub"))); again.headers[extauthz.HeaderApprovalID] != id {
		t.Errorf("a repeat asked for approval %q, want %q", again.headers[extauthz.HeaderApprovalID], id)
	}
	if _, err := h.approvals.Decide(context.Background(), id, true, "user:bob", "ok", "dec-x"); err != nil {
		t.Fatal(err)
	}
	ok := read(t, h.check(load(t, "call_write_stub")))
	if !ok.allowed || ok.headers["authorization"] != "Bearer "+aliceNotes {
		t.Fatalf("the approved call: allowed %v %d %v", ok.allowed, ok.status, ok.body)
	}
	if third := read(t, h.check(load(t, "call_write_stub"))); third.allowed || third.headers[extauthz.HeaderApprovalID] == id {
		t.Errorf("a third call ran under a used approval: %v %v", third.allowed, third.headers)
	}
	var ran *decisionlog.Record
	for _, r := range h.events() {
		if r.Event.DecisionID == ok.headers[extauthz.HeaderDecisionID] {
			ran = &r
		}
	}
	if ran == nil || ran.Event.Outcome != "allow" || !slices.Contains(ran.Event.Rules, "lush.approval.granted") ||
		!strings.Contains(string(ran.Event.Input), `"approved_by":"user:bob"`) {
		t.Errorf("the approved call's decision: %+v", ran)
	}
}

func TestBeforeDeploy(t *testing.T) {
	h := start(t, harnessOpts{noDeploy: true})
	a := read(t, h.check(load(t, "call_read_apikey")))
	if a.allowed || a.status != 503 {
		t.Errorf("before deploy: allowed %v status %d", a.allowed, a.status)
	}
	hc := healthpb.NewHealthClient(h.conn)
	r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.auth.v3.Authorization"})
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health before deploy: %v %v", r.GetStatus(), err)
	}
}

// The server answers over its Unix socket too, reports health, and offers reflection.
func TestSocketHealthReflection(t *testing.T) {
	h := start(t, harnessOpts{})
	conn, err := grpc.NewClient("unix://"+h.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, load(t, "call_read_apikey"))
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("Check over the socket: %v %v", resp, err)
	}
	for _, svc := range []string{"", "envoy.service.auth.v3.Authorization"} {
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, r.GetStatus(), err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, "envoy.service.auth.v3.Authorization") || !slices.Contains(names, "grpc.health.v1.Health") {
		t.Errorf("reflection lists %v", names)
	}
}

// TestUnrecordedDecisionAtTheSidecar: when the decision log cannot be written, the call is
// refused (503) and the answer says that its decision was not recorded.
func TestUnrecordedDecisionAtTheSidecar(t *testing.T) {
	h := start(t, harnessOpts{})
	h.log.Close()
	a := read(t, h.check(load(t, "call_read_apikey")))
	_, msg, data := a.rpcError()
	id, _ := data["decision_id"].(string)
	if a.allowed || a.status != 503 || id == "" || data["recorded"] != false || !strings.HasPrefix(msg, "Lush could not record its decision on this call") ||
		!strings.HasSuffix(msg, "(decision "+id+", not recorded: the decision log cannot be written)") {
		t.Errorf("answered %d %q %v", a.status, msg, data)
	}
}

// No credential, API key or token appears in the decision log or in an answer, whatever the
// outcome; the upstream's credential appears only in the header the sidecar adds.
func TestSecretsStayOut(t *testing.T) {
	h := start(t, harnessOpts{})
	var answers []string
	for _, f := range []string{"call_read_apikey", "call_write_stub", "call_denied_bob", "call_jwt_metadata", "call_jwt_no_credential",
		"call_policy_error", "list_spiffe_cert", "untrusted_header", "no_identity"} {
		resp := h.check(load(t, f))
		if d := resp.GetDeniedResponse(); d != nil {
			answers = append(answers, d.GetBody())
		}
		answers = append(answers, resp.GetDynamicMetadata().String())
	}
	h.log.Sync(context.Background())
	h.log.Close()
	logged, err := os.ReadFile(h.logPath)
	if err != nil {
		t.Fatal(err)
	}
	wal, _ := os.ReadFile(h.logPath + "-wal")
	all := string(logged) + string(wal) + strings.Join(answers, "\n")
	for _, secret := range []string{aliceKey, bobKey, aliceNotes, carolNotes, notesBotNotes, "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0"} {
		if strings.Contains(all, secret) {
			t.Errorf("a secret (%s…) appears in the log or an answer", secret[:6])
		}
	}
}

// The config names its bad fields.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  extauthz.Config
		want string
	}{
		{extauthz.Config{Listen: "9191"}, "ext_authz.listen"},
		{extauthz.Config{Socket: "run/x.sock"}, "ext_authz.socket"},
		{extauthz.Config{Listen: ":1", Identity: identity.EnvoyConfig{SPIFFE: []identity.SPIFFEMapping{{ID: "spiffe://a/b", Prefix: "spiffe://a/"}}}}, "ext_authz.identity.spiffe[0]: set exactly one"},
		{extauthz.Config{Listen: ":1", Identity: identity.EnvoyConfig{SPIFFE: []identity.SPIFFEMapping{{Prefix: "https://a/", Principal: "serviceaccount:{name}"}}}}, "not a SPIFFE id"},
		{extauthz.Config{Listen: ":1", Identity: identity.EnvoyConfig{SPIFFE: []identity.SPIFFEMapping{{ID: "spiffe://a/b", Principal: "serviceaccount:{name}"}}}}, "use it with prefix"},
		{extauthz.Config{Listen: ":1", Identity: identity.EnvoyConfig{JWTMetadata: &identity.JWTMetadataConfig{PrincipalKind: "group"}}}, "principal_kind"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if err := (extauthz.Config{Listen: "127.0.0.1:9191"}).Validate(); err != nil {
		t.Error(err)
	}
}

// Beyond loopback, Check is served only over mTLS: its answers carry upstream credentials.
func TestListenBeyondLoopbackNeedsMTLS(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9191", ":9191", "10.0.0.7:9191", "lush.internal:9191"} {
		err := extauthz.Config{Listen: addr}.Validate()
		if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("%s without tls: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:9191", "[::1]:9191", "localhost:9191"} {
		if err := (extauthz.Config{Listen: addr}).Validate(); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	if err := (extauthz.Config{Listen: "0.0.0.0:9191", TLS: &extauthz.TLSConfig{CertFile: "c"}}).Validate(); err == nil || !strings.Contains(err.Error(), "client_ca_file") {
		t.Errorf("partial tls: %v", err)
	}
}

// With ext_authz.tls, only clients with a certificate of the client CA get an answer.
func TestMTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	srvCert, srvKey := issue(t, ca, caKey, "lush", []string{"127.0.0.1"})
	writePEM(t, filepath.Join(dir, "server.pem"), "CERTIFICATE", srvCert.Raw)
	writeKey(t, filepath.Join(dir, "server.key"), srvKey)
	cliCert, cliKey := issue(t, ca, caKey, "sidecar", nil)

	ctx := context.Background()
	logPath := filepath.Join(t.TempDir(), "d.db")
	dlog, err := decisionlog.Open(ctx, logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer dlog.Close()
	auth, err := identity.New(ctx, identity.Config{Dev: &identity.DevConfig{Principal: "user:dev"}})
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()
	srv, err := extauthz.New(extauthz.Config{Listen: "0.0.0.0:0", TLS: &extauthz.TLSConfig{CertFile: filepath.Join(dir, "server.pem"),
		KeyFile: filepath.Join(dir, "server.key"), ClientCAFile: filepath.Join(dir, "ca.pem")}}, extauthz.Options{Policy: enforce.NewPolicy(enforce.Config{Log: dlog}), Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve(ln)
	defer srv.Stop(ctx)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	call := func(certs []tls.Certificate) error {
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: certs, ServerName: "127.0.0.1"})))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = authv3.NewAuthorizationClient(conn).Check(ctx, load(t, "call_read_apikey"))
		return err
	}
	if err := call(nil); err == nil {
		t.Error("a client without a certificate was answered")
	}
	if err := call([]tls.Certificate{{Certificate: [][]byte{cliCert.Raw}, PrivateKey: cliKey}}); err != nil {
		t.Errorf("the sidecar's certificate: %v", err)
	}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, ips []string) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t *testing.T, path string, key *ecdsa.PrivateKey) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}
