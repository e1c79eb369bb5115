package budgethttp_test

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
	"strings"
	"testing"

	"github.com/lush-agents/lush/gateway/budgethttp"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
	"github.com/lush-agents/lush/test/projecttest"
)

const (
	fayKey = "fay-key-0123456789" // user:fay: the budget role
	zoeKey = "zoe-key-0123456789" // user:zoe: the audit role
	bobKey = "bob-key-0123456789" // user:bob: no role
)

func server(t *testing.T) (*httptest.Server, *decisionlog.Log) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	for rel, content := range map[string]string{
		"agents/helper/spec.yaml": "name: helper\nmodel: gemini-2.5-flash\ndescription: Helps.\ntools:\n" +
			"  - server: mcp://tests.internal/mcp\n    access: read\nacl:\n  - {principal: group:eng, role: execute}\n",
		"lush.yaml": `project: budget-api
tool_grants:
  - tool: mcp://tests.internal/mcp
    grants:
      - {principal: group:eng, access: read}
budgets:
  - {name: helper-calls, agent: helper, tool_calls: 5, per: day}
  - {name: eng-tokens, principal: group:eng, tokens: 1000, per: week}
roles:
  budget: [user:fay]
  audit: [user:zoe]
`,
	} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, eng := projecttest.Build(t, dir)
	log, err := decisionlog.Open(ctx, filepath.Join(t.TempDir(), "d.db"), decisionlog.CheckpointEvery(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	dec := enforce.NewPolicy(enforce.Config{Log: log}).Enforcer(budgethttp.Point)
	dec.Policy().Set(eng)
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	auth, err := identity.New(ctx, identity.Config{APIKeys: []identity.APIKeyConfig{
		{Name: "fay", SHA256: sum(fayKey), Principal: "user:fay"},
		{Name: "zoe", SHA256: sum(zoeKey), Principal: "user:zoe"},
		{Name: "bob", SHA256: sum(bobKey), Principal: "user:bob", Groups: []string{"group:eng"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	srv, err := budgethttp.New(budgethttp.Config{Store: log, Decider: dec, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts, log
}

func do(t *testing.T, ts *httptest.Server, method, path, key, body string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// Every answer of the API: who may read and top up, what a bad request is told, and that a
// top-up's grant exists exactly when its allowing decision does.
func TestAPI(t *testing.T) {
	ts, log := server(t)
	tests := []struct {
		name, method, path, key, body string
		code                          int
		want                          string
	}{
		{"no credentials", "GET", "/budgets", "", "", 401, "unauthenticated"},
		{"read with the budget role", "GET", "/budgets", fayKey, "", 200, `"subject": "helper"`},
		{"read with the audit role", "GET", "/budgets?budget=helper-calls", zoeKey, "", 200, `"remaining": 5`},
		{"read without a role", "GET", "/budgets", bobKey, "", 403, "lush.role.no_budget_read"},
		{"read an unknown budget", "GET", "/budgets?budget=nope", fayKey, "", 404, `there is no budget \"nope\"; the budgets are: eng-tokens, helper-calls`},
		{"top-up without the role", "POST", "/budgets/helper-calls/top-up", zoeKey, `{"amount": 3, "reason": "x"}`, 403, "lush.role.no_budget"},
		{"top-up, not JSON", "POST", "/budgets/helper-calls/top-up", fayKey, `{amount`, 400, "the body is not valid JSON"},
		{"top-up, empty", "POST", "/budgets/helper-calls/top-up", fayKey, ``, 400, "the body is empty"},
		{"top-up, amount a string", "POST", "/budgets/helper-calls/top-up", fayKey, `{"amount": "3", "reason": "x"}`, 400, "amount must be a whole number"},
		{"top-up, unknown field", "POST", "/budgets/helper-calls/top-up", fayKey, `{"amount": 3, "why": "x"}`, 400, `unknown field \"why\": the fields are subject, amount and reason`},
		{"top-up, negative", "POST", "/budgets/helper-calls/top-up", fayKey, `{"amount": -3, "reason": "x"}`, 400, "amount must be a whole number from 1 to"},
		{"top-up, no reason", "POST", "/budgets/helper-calls/top-up", fayKey, `{"amount": 3}`, 400, "reason is required"},
		{"top-up, another agent", "POST", "/budgets/helper-calls/top-up", fayKey, `{"subject": "coder", "amount": 3, "reason": "x"}`, 400,
			`subject: budget helper-calls has one subject, helper: subject \"coder\" is not it`},
		{"top-up of a group, no subject", "POST", "/budgets/eng-tokens/top-up", fayKey, `{"amount": 3, "reason": "x"}`, 400, "subject is required"},
		{"top-up of a group, not a principal", "POST", "/budgets/eng-tokens/top-up", fayKey, `{"subject": "bob", "amount": 3, "reason": "x"}`, 400, "subject must be a principal id"},
		{"top-up of an unknown budget", "POST", "/budgets/nope/top-up", fayKey, `{"amount": 3, "reason": "x"}`, 404, `there is no budget \"nope\"`},
		{"top-up", "POST", "/budgets/helper-calls/top-up", fayKey, `{"amount": 3, "reason": "release day"}`, 200, `"granted": 3`},
		{"top-up of a group member", "POST", "/budgets/eng-tokens/top-up", fayKey, `{"subject": "user:bob", "amount": 500, "reason": "x"}`, 200, `"remaining": 1500`},
		{"wrong method", "DELETE", "/budgets", fayKey, "", 405, "method_not_allowed"},
		{"top-up with GET", "GET", "/budgets/helper-calls/top-up", fayKey, "", 405, "a top-up is a POST"},
		{"no such route", "GET", "/budgets/helper-calls", fayKey, "", 404, "no such route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, h := do(t, ts, tt.method, tt.path, tt.key, tt.body)
			if code != tt.code || !strings.Contains(body, tt.want) {
				t.Errorf("%d %s\nwant %d with %q", code, body, tt.code, tt.want)
			}
			if code == 403 && (h.Get(policyhttp.HeaderDecisionID) == "" || !strings.Contains(body, `"decision_id"`)) {
				t.Errorf("a refusal without its decision id: %v %s", h, body)
			}
		})
	}
	// Only the two allowed top-ups granted anything.
	rows, err := log.BudgetUsage(context.Background(), decisionlog.BudgetFilter{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range rows {
		got[r.Budget+" "+r.Subject] += r.Granted
	}
	if len(got) != 2 || got["helper-calls helper"] != 3 || got["eng-tokens user:bob"] != 500 {
		t.Errorf("grants %v", got)
	}
	// Every request that got past authentication is a decision, with what was asked.
	recs, err := log.Query(context.Background(), decisionlog.Filter{Action: authz.ActionBudgetTopUp, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 13 {
		t.Errorf("%d top-up decisions, want 13", len(recs))
	}
	var in struct {
		Arguments map[string]any `json:"arguments"`
	}
	for _, r := range recs {
		json.Unmarshal(r.Event.Input, &in)
		if in.Arguments["reason"] == "release day" && (in.Arguments["amount"] != float64(3) || r.Event.Outcome != "allow" || r.Event.Principal != "user:fay") {
			t.Errorf("the top-up's decision: %+v %s", r.Event, r.Event.Input)
		}
	}
}
