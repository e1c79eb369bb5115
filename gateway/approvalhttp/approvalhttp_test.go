package approvalhttp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/gateway/approvalhttp"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/test/projecttest"
)

const (
	samKey   = "sam-key-012345678901" // user:sam: approves
	zoeKey   = "zoe-key-012345678901" // user:zoe: audits (reads approvals, decides none)
	aliceKey = "alice-key-0123456789" // user:alice: neither
)

type env struct {
	t     testing.TB
	dec   *enforce.Enforcer // decides the approvals API's requests (and, in tests, calls to approve)
	srv   *httptest.Server
	store *decisionlog.Approvals
	log   *decisionlog.Log
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func newEnv(t testing.TB, deploy bool) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	for rel, content := range map[string]string{
		"lush.yaml":                  "project: approvals-test\nroles:\n  approve: [user:sam]\n  audit: [user:zoe]\n",
		"agents/ops/spec.yaml":       "name: ops\nmodel: gemini-2.5-flash\ndescription: Ops.\nacl:\n  - {principal: user:alice, role: execute}\n",
		"agents/ops/instructions.md": "Operate.\n",
		// The project's log mask: approvers see the arguments as logged, so not the token.
		"policies/logmask.rego": "package lush.policies.logmask\n\nmask contains \"/input/arguments/token\" if input.arguments.token\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, eng := projecttest.Build(t, dir)
	var err error
	path := filepath.Join(t.TempDir(), "decisions.db")
	e := &env{t: t}
	if e.log, err = decisionlog.Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.log.Close() })
	if e.store, err = decisionlog.OpenApprovals(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	auth, err := identity.New(ctx, identity.Config{APIKeys: []identity.APIKeyConfig{
		{Name: "sam", SHA256: sha(samKey), Principal: "user:sam"},
		{Name: "zoe", SHA256: sha(zoeKey), Principal: "user:zoe"},
		{Name: "alice", SHA256: sha(aliceKey), Principal: "user:alice"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	dec := enforce.NewPolicy(enforce.Config{Log: e.log}).Enforcer(approvalhttp.Point)
	e.dec = dec
	if deploy {
		dec.Policy().Set(eng)
	}
	s, err := approvalhttp.New(approvalhttp.Config{Store: e.store, Log: e.log, Decider: dec, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(s.Handler())
	t.Cleanup(e.srv.Close)
	now := time.Now().UTC()
	if err := e.store.Create(ctx, decisionlog.Approval{ID: "ap-1", Created: now, Expires: now.Add(time.Hour), Digest: "d1",
		Principal: "user:alice", Agent: "ops", Tool: "tools/shell"}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) do(method, path, key, body string) (int, string) {
	e.t.Helper()
	code, out, err := e.send(method, path, key, body)
	if err != nil {
		e.t.Fatal(err)
	}
	return code, out
}

func (e *env) send(method, path, key, body string) (int, string, error) {
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestRequests: who may do what, and bad requests named by their field.
func TestRequests(t *testing.T) {
	e := newEnv(t, true)
	tests := []struct {
		name, method, path, key, body string
		code                          int
		want                          string
	}{
		{"no credentials", "GET", "/approvals", "", "", 401, "unauthenticated"},
		{"approver lists", "GET", "/approvals", samKey, "", 200, `"id": "ap-1"`},
		{"auditor lists", "GET", "/approvals?status=all", zoeKey, "", 200, `"id": "ap-1"`},
		{"others do not", "GET", "/approvals", aliceKey, "", 403, "lush.role.no_approval_read"},
		{"others do not read one", "GET", "/approvals/ap-1", aliceKey, "", 403, "lush.role.no_approval_read"},
		{"bad status", "GET", "/approvals?status=maybe", samKey, "", 400, "status="},
		{"bad limit", "GET", "/approvals?limit=0", samKey, "", 400, "limit:"},
		{"unknown approval", "GET", "/approvals/ap-9", samKey, "", 404, "no approval"},
		{"long id", "GET", "/approvals/" + strings.Repeat("x", 200), samKey, "", 400, "too long"},
		{"auditor may not decide", "POST", "/approvals/ap-1", zoeKey, `{"decision": "approve"}`, 403, "lush.role.no_approve"},
		{"requester may not decide", "POST", "/approvals/ap-1", aliceKey, `{"decision": "approve"}`, 403, "lush.approval.self"},
		{"not JSON", "POST", "/approvals/ap-1", samKey, `approve`, 400, "must be JSON"},
		{"unknown field", "POST", "/approvals/ap-1", samKey, `{"decision": "approve", "by": "user:root"}`, 400, "unknown field"},
		{"bad decision", "POST", "/approvals/ap-1", samKey, `{"decision": "maybe"}`, 400, "decision:"},
		{"long reason", "POST", "/approvals/ap-1", samKey, `{"decision": "deny", "reason": "` + strings.Repeat("x", 3000) + `"}`, 400, "reason:"},
		{"unknown id, not allowed", "POST", "/approvals/ap-9", zoeKey, `{"decision": "approve"}`, 403, "lush.role.no_approve"},
		{"unknown id", "POST", "/approvals/ap-9", samKey, `{"decision": "approve"}`, 404, "no approval"},
		{"wrong method", "PUT", "/approvals/ap-1", samKey, "", 405, "method_not_allowed"},
		{"approve", "POST", "/approvals/ap-1", samKey, `{"decision": "approve", "reason": "ok"}`, 200, `"status": "approved"`},
		{"twice", "POST", "/approvals/ap-1", samKey, `{"decision": "deny"}`, 409, "already approved by user:sam"},
	}
	for _, tt := range tests {
		code, body := e.do(tt.method, tt.path, tt.key, tt.body)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("%s: %d %s\nwant %d with %q", tt.name, code, body, tt.code, tt.want)
		}
	}
	// Every request past authentication and validation was decided and logged.
	e.log.Sync(context.Background())
	recs, err := e.log.Query(context.Background(), decisionlog.Filter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 11 {
		t.Errorf("%d decisions logged, want 11", len(recs))
	}
}

// Fail closed: no policy, or a store that cannot be used, answers 503.
func TestFailClosed(t *testing.T) {
	e := newEnv(t, false)
	if code, body := e.do("GET", "/approvals", samKey, ""); code != 503 || !strings.Contains(body, "policy_error") {
		t.Errorf("without a policy: %d %s", code, body)
	}
	e = newEnv(t, true)
	e.store.Close()
	if code, body := e.do("GET", "/approvals", samKey, ""); code != 503 || !strings.Contains(body, "store_unavailable") || strings.Contains(body, "sql") {
		t.Errorf("a closed store: %d %s", code, body)
	}
	if code, body := e.do("POST", "/approvals/ap-1", samKey, `{"decision": "approve"}`); code != 503 {
		t.Errorf("deciding with a closed store: %d %s", code, body)
	}
}

// FuzzRequests: no id, query or body makes the API answer other than with JSON the caller can act
// on, and never with a 5xx while the store and the policy work.
func FuzzRequests(f *testing.F) {
	for _, s := range []string{`{"decision": "approve"}`, `{"decision": "deny", "reason": "x"}`, `{"decision": 1}`, `[]`, `null`,
		`{"decision": "approve", "decision": "deny"}`, `{"decision": "approve"} trailing`, "\x00", `{"reason": "` + strings.Repeat("é", 1500) + `"}`} {
		f.Add("ap-1", "pending", s)
	}
	f.Add("../ap-1", "all", `{}`)
	f.Add("ap-1%00", "a&limit=-1", `{"decision":"approve"}`)
	e := newEnv(f, true)
	f.Fuzz(func(t *testing.T, id, status, body string) {
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/approvals/" + url.PathEscape(id), body},
			{"GET", "/approvals?status=" + url.QueryEscape(status), ""},
			{"GET", "/approvals/" + url.PathEscape(id), ""},
		} {
			code, out, err := e.send(req.method, req.path, samKey, req.body)
			if err != nil {
				t.Fatal(err)
			}
			if code >= 500 || !strings.HasPrefix(strings.TrimSpace(out), "{") {
				t.Fatalf("%s %s %q: %d %s", req.method, req.path, req.body, code, out)
			}
		}
	})
}

// The arguments approvers see are the call's as the decision log holds them: what the project's
// mask removes (a token, here) never reaches them.
func TestArgumentsAreMasked(t *testing.T) {
	e := newEnv(t, true)
	const secret = "SECRET-TOKEN-0123"
	v := e.dec.Decide(context.Background(), authz.Input{Action: authz.ActionToolsCall, Principal: authz.Principal{ID: "user:alice", Groups: []string{}},
		Agent: "ops", Tool: &authz.Tool{Ref: "tools/shell"}, Arguments: map[string]any{"host": "db-1", "token": secret}})
	if !v.Recorded {
		t.Fatalf("the call's decision was not recorded: %+v", v.Decision)
	}
	now := time.Now().UTC()
	if err := e.store.Create(context.Background(), decisionlog.Approval{ID: v.ID, Created: now, Expires: now.Add(time.Hour), Digest: "d2",
		Principal: "user:alice", Agent: "ops", Tool: "tools/shell"}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/approvals/" + v.ID, "/approvals"} {
		code, body := e.do("GET", path, samKey, "")
		if code != 200 || !strings.Contains(body, `"host": "db-1"`) || strings.Contains(body, secret) {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
}
