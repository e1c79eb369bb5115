package policyhttp_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
	"github.com/lush-agents/lush/test/projecttest"
)

// callers authenticates by the X-Test-Caller header: a principal id, or "agent:<name>" for an
// agent acting for user:alice with a delegation token. No header is a missing credential.
type callers struct{}

func (callers) Authenticate(r *http.Request) (identity.Caller, error) {
	h := r.Header.Get("X-Test-Caller")
	switch {
	case h == "":
		return identity.Caller{}, &identity.Error{Code: identity.CodeMissingCredentials, Message: "send a token"}
	case strings.HasPrefix(h, "agent:"):
		agent := strings.TrimPrefix(h, "agent:")
		return identity.Caller{ID: "user:alice", Method: identity.MethodDelegation, Agent: agent, Chain: []string{"orchestrator", agent}}, nil
	case h == "broken":
		return identity.Caller{}, errors.New("dial tcp 10.0.0.1:443: secret internals")
	}
	groups := map[string][]string{"user:sec": {"group:security"}, "user:ops": {"group:ops"}}[h]
	return identity.Caller{ID: h, Groups: groups}, nil
}

var (
	engineOnce sync.Once
	engine     *authz.Engine
	engineErr  error
)

// quickstart is the policy of the quickstart project: loops with ACLs, and the audit role.
func quickstart(t *testing.T) *authz.Engine {
	t.Helper()
	engineOnce.Do(func() {
		res, err := compiler.Build(context.Background(), "../../examples/quickstart", compiler.Offline(true))
		if err != nil || !res.OK() {
			engineErr = errors.Join(err, errors.New("the quickstart does not build"))
			return
		}
		engine, engineErr = authz.FromBytes(context.Background(), res.Bundle, authz.Timeout(projecttest.DecisionTimeout))
	})
	if engineErr != nil {
		t.Fatal(engineErr)
	}
	return engine
}

// gate returns a gate deciding with the quickstart's policy (unless noPolicy) into a fresh log.
func gate(t *testing.T, noPolicy bool) (*policyhttp.Gate, *decisionlog.Log) {
	t.Helper()
	log, err := decisionlog.Open(context.Background(), filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	policy := enforce.NewPolicy(enforce.Config{Environment: "test", Log: log})
	if !noPolicy {
		policy.Set(quickstart(t))
	}
	return &policyhttp.Gate{Auth: callers{}, Decider: policy.Enforcer("test-api"), NotFound: []string{"lush.loop.unknown"}}, log
}

type answer struct {
	Error struct {
		Code       string         `json:"code"`
		Message    string         `json:"message"`
		DecisionID string         `json:"decision_id"`
		Reasons    []authz.Reason `json:"reasons"`
	} `json:"error"`
}

func TestGate(t *testing.T) {
	for _, tc := range []struct {
		name, caller, route string
		in                  authz.Input
		noPolicy            bool
		code                int
		kind, message       string
		decided             bool // a decision is logged
	}{
		{"allowed", "user:bob", "/loops/x", authz.Input{Action: authz.ActionLoopRead, Loop: "weekday-digest"}, false, 200, "", "", true},
		{"no credentials", "", "/loops/x", authz.Input{Action: authz.ActionLoopRead, Loop: "weekday-digest"}, false, 401, "unauthenticated", "send a token", false},
		{"an authenticator's internals are not shown", "broken", "/loops/x", authz.Input{Action: authz.ActionLoopRead, Loop: "weekday-digest"}, false,
			401, "unauthenticated", "authentication failed", false},
		{"denied", "user:bob", "/loops/x", authz.Input{Action: authz.ActionLoopTrigger, Loop: "weekday-digest"}, false, 403, "forbidden", "", true},
		{"unknown", "user:bob", "/loops/x", authz.Input{Action: authz.ActionLoopRead, Loop: "nope"}, false, 404, "not_found", "nope", true},
		{"no policy", "user:bob", "/loops/x", authz.Input{Action: authz.ActionLoopRead, Loop: "weekday-digest"}, true, 503, "policy_error", "no policy", true},
		{"a role", "user:sec", "/loops/x", authz.Input{Action: authz.ActionAuditRead}, false, 200, "", "", true},
		{"without the role", "user:bob", "/loops/x", authz.Input{Action: authz.ActionAuditRead}, false, 403, "forbidden", "", true},
		{"an agent for its principal", "agent:researcher", "/agents/researcher/x", authz.Input{Action: authz.ActionLoopRead, Loop: "weekday-digest"},
			false, 200, "", "", true},
		{"an agent's token at another agent's route", "agent:researcher", "/agents/orchestrator/x", authz.Input{Action: authz.ActionLoopRead, Loop: "weekday-digest"},
			false, 403, "forbidden", "researcher", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, log := gate(t, tc.noPolicy)
			var got *enforce.Verdict
			mux := http.NewServeMux()
			handler := g.Authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if got = g.Allow(w, r, tc.in, "doing it"); got != nil {
					got.Complete(decisionlog.StatusOK, 0, nil, "")
					w.WriteHeader(200)
				}
			}))
			mux.Handle("/agents/{agent}/x", handler)
			mux.Handle("/loops/x", handler)
			req := httptest.NewRequest("GET", tc.route, nil)
			if tc.caller != "" {
				req.Header.Set("X-Test-Caller", tc.caller)
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.code, rec.Body)
			}
			if tc.code == 401 && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if tc.code != 200 {
				var a answer
				if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
					t.Fatalf("answer %s: %v", rec.Body, err)
				}
				if a.Error.Code != tc.kind || !strings.Contains(a.Error.Message, tc.message) || strings.Contains(rec.Body.String(), "internals") {
					t.Errorf("answer %s, want code %s and a message with %q", rec.Body, tc.kind, tc.message)
				}
				if tc.decided && (a.Error.DecisionID == "" || a.Error.DecisionID != rec.Header().Get(policyhttp.HeaderDecisionID)) {
					t.Errorf("refusal %s without its decision id (header %q)", rec.Body, rec.Header().Get(policyhttp.HeaderDecisionID))
				}
			}
			log.Sync(context.Background())
			recs, err := log.Query(context.Background(), decisionlog.Filter{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if tc.decided != (len(recs) == 1) {
				t.Fatalf("%d decisions logged, want a decision: %v", len(recs), tc.decided)
			}
			if !tc.decided {
				return
			}
			ev := recs[0].Event
			if ev.Point != "test-api" || ev.Action != tc.in.Action || ev.Environment != "test" {
				t.Errorf("logged %+v", ev)
			}
			if strings.HasPrefix(tc.caller, "agent:") && (ev.Principal != "user:alice" || ev.Agent != "researcher" || len(ev.Chain) != 2) {
				t.Errorf("an agent's request is logged as principal %s, agent %q, chain %v", ev.Principal, ev.Agent, ev.Chain)
			}
			if (tc.code == 200) != (got != nil) {
				t.Errorf("Allow returned %v for status %d", got, tc.code)
			}
		})
	}
}

// Authorize authenticates and decides in one step; a custom WriteRefusal answers refusals, with
// the authentication error itself for a 401.
func TestAuthorizeAndWriteRefusal(t *testing.T) {
	g, _ := gate(t, false)
	var refusals []policyhttp.Refusal
	g.WriteRefusal = func(w http.ResponseWriter, r policyhttp.Refusal) {
		refusals = append(refusals, r)
		w.WriteHeader(r.Status)
	}
	in := authz.Input{Action: authz.ActionLoopTrigger, Loop: "weekday-digest"}
	for _, tc := range []struct {
		caller string
		code   int
	}{{"", 401}, {"user:bob", 403}, {"user:ops", 200}} {
		req := httptest.NewRequest("POST", "/loops/weekday-digest/trigger", nil)
		if tc.caller != "" {
			req.Header.Set("X-Test-Caller", tc.caller)
		}
		rec := httptest.NewRecorder()
		v, caller := g.Authorize(rec, req, in, "triggering a loop")
		if (v != nil) != (tc.code == 200) || tc.code == 200 && (rec.Code != 200 || caller.ID != "user:ops" || !v.Recorded) {
			t.Errorf("%q: verdict %v, caller %+v, status %d", tc.caller, v, caller, rec.Code)
		}
		if v == nil && rec.Code != tc.code {
			t.Errorf("%q: status %d, want %d", tc.caller, rec.Code, tc.code)
		}
	}
	var ie *identity.Error
	if len(refusals) != 2 || !errors.As(refusals[0].Err, &ie) || ie.Code != identity.CodeMissingCredentials ||
		refusals[1].Verdict == nil || refusals[1].Code != "forbidden" || len(refusals[1].Reasons) == 0 {
		t.Errorf("refusals: %+v", refusals)
	}
}

// TestGateReportsFailedAuthentication: every request the gate refuses for its credentials, through
// Authenticated or Authorize, is counted by method and reason and logged with its source address,
// one line per address and reason per interval; no credential reaches the log or the metrics.
func TestGateReportsFailedAuthentication(t *testing.T) {
	const key, wrongKey = "lush_ci_5d1e0f3a9b7c2e4d6f8a0b1c3d5e7f9a", "lush_ci_5d1e0f3a9b7c2e4d6f8a0b1c3d5e7f90"
	digest := sha256.Sum256([]byte(key))
	signing := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	auth, err := identity.New(context.Background(), identity.Config{
		APIKeys:    []identity.APIKeyConfig{{Name: "ci", SHA256: hex.EncodeToString(digest[:]), Principal: "serviceaccount:ci"}},
		Delegation: &identity.DelegationConfig{Keys: []ed25519.PublicKey{signing.Public().(ed25519.PublicKey)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()
	deleg, err := identity.NewSigner(signing, "").Sign(identity.Delegation{Principal: "user:alice", Agent: "researcher", Chain: []string{"researcher"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		Level, Msg, Source, Endpoint, Method, Reason string
		Suppressed                                   int
	}
	for _, tc := range []struct {
		name           string
		authorize      bool     // through Authorize rather than Authenticated
		route          string   // the request's path
		headers        []string // name, value pairs
		times          int      // the same request this many times
		status         int
		method, reason string
		level          string
	}{
		{"no credentials", false, "/loops/x", nil, 1, 401, "none", identity.CodeMissingCredentials, "DEBUG"},
		{"an unknown API key", false, "/loops/x", []string{"X-API-Key", wrongKey}, 1, 401, "apikey", identity.CodeUnknownAPIKey, "WARN"},
		{"an unknown API key, authorizing", true, "/loops/x", []string{"Authorization", "Bearer " + wrongKey}, 1, 401, "apikey", identity.CodeUnknownAPIKey, "WARN"},
		{"a flood from one address: one line", false, "/loops/x", []string{"X-API-Key", wrongKey}, 5, 401, "apikey", identity.CodeUnknownAPIKey, "WARN"},
		{"a malformed bearer token", false, "/loops/x", []string{"Authorization", "Bearer " + deleg + " extra"}, 1, 401, "unknown", identity.CodeInvalidRequest, "WARN"},
		{"a delegation token at another agent's route", false, "/agents/orchestrator/x", []string{"Authorization", "Bearer " + deleg}, 1, 403,
			"delegation", identity.CodeForbiddenAgent, "WARN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := gate(t, false)
			var logs bytes.Buffer
			m := telemetry.NewMetrics()
			g.Auth, g.Failures = auth, identity.NewFailures(m, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			mux := http.NewServeMux()
			ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
			mux.Handle("/agents/{agent}/x", g.Authenticated(ok))
			if tc.authorize {
				mux.HandleFunc("/loops/x", func(w http.ResponseWriter, r *http.Request) {
					g.Authorize(w, r, authz.Input{Action: authz.ActionLoopRead, Loop: "weekday-digest"}, "reading loops")
				})
			} else {
				mux.Handle("/loops/x", g.Authenticated(ok))
			}
			for range tc.times {
				req := httptest.NewRequest("GET", tc.route, nil)
				req.RemoteAddr = "203.0.113.5:41234"
				for i := 0; i < len(tc.headers); i += 2 {
					req.Header.Set(tc.headers[i], tc.headers[i+1])
				}
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, req)
				if rec.Code != tc.status {
					t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
				}
			}
			metrics := scrape(m)
			if want := fmt.Sprintf("lush_authentication_failures_total{method=%q,reason=%q} %d\n", tc.method, tc.reason, tc.times); !strings.Contains(metrics, want) {
				t.Errorf("not counted as %s", want)
			}
			var lines []line
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var ll line
				if err := json.Unmarshal([]byte(l), &ll); err != nil {
					t.Fatalf("log %q: %v", logs.String(), err)
				}
				lines = append(lines, ll)
			}
			pattern := "/loops/x"
			if strings.HasPrefix(tc.route, "/agents/") {
				pattern = "/agents/{agent}/x"
			}
			want := line{Level: tc.level, Msg: "authentication failed", Source: "203.0.113.5", Endpoint: pattern, Method: tc.method, Reason: tc.reason}
			if len(lines) != 1 || lines[0] != want {
				t.Errorf("logged %+v, want one line %+v", lines, want)
			}
			for _, secret := range []string{key, wrongKey, deleg} {
				if strings.Contains(logs.String(), secret) || strings.Contains(metrics, secret) {
					t.Errorf("a credential is in the log or the metrics:\n%s", logs.String())
				}
			}
		})
	}
}

// scrape is m as Prometheus scrapes it.
func scrape(m *telemetry.Metrics) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestRefusalOfAnUnrecordedDecision: when the decision log cannot be written, the request is
// refused (503) and the answer says that its decision was not recorded, so that nobody looks
// for its id in the log.
func TestRefusalOfAnUnrecordedDecision(t *testing.T) {
	g, log := gate(t, false)
	log.Close()
	req := httptest.NewRequest("POST", "/loops/weekday-digest/trigger", nil)
	req.Header.Set("X-Test-Caller", "user:ops")
	rec := httptest.NewRecorder()
	if v, _ := g.Authorize(rec, req, authz.Input{Action: authz.ActionLoopTrigger, Loop: "weekday-digest"}, "triggering a loop"); v != nil {
		t.Fatalf("allowed: %+v", v)
	}
	var a struct {
		Error struct {
			Code, Message string
			DecisionID    string `json:"decision_id"`
			Recorded      *bool
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	e := a.Error
	want := "(decision " + e.DecisionID + ", not recorded: the decision log cannot be written)"
	if rec.Code != 503 || e.Code != "policy_error" || e.DecisionID == "" || !strings.HasSuffix(e.Message, want) || e.Recorded == nil || *e.Recorded {
		t.Errorf("answer %d %s, want 503 whose message ends %q, with recorded: false", rec.Code, rec.Body, want)
	}
}

// resource is an OAuth protected resource's authenticator: X-Test-Scope "none" is a valid token
// without the scopes required.
type resource struct{}

func (resource) Authenticate(r *http.Request) (identity.Caller, error) {
	if r.Header.Get("X-Test-Scope") == "none" {
		return identity.Caller{}, &identity.Error{Code: identity.CodeInsufficientScope, Method: identity.MethodOAuth, Message: "ask for scope mcp:tools"}
	}
	return callers{}.Authenticate(r)
}

func (resource) Challenge(r *http.Request, err error) (string, bool) {
	return "Bearer challenge-for " + r.URL.Path + " " + err.Error(), true
}

func (resource) Metadata(path string) (identity.ResourceMetadata, bool) {
	return identity.ResourceMetadata{Resource: "https://lush.example.com" + path, AuthorizationServers: []string{"https://login.example.com"},
		BearerMethodsSupported: []string{"header"}}, true
}

func TestProtectedResource(t *testing.T) {
	m := telemetry.NewMetrics()
	g := &policyhttp.Gate{Auth: resource{}, Failures: identity.NewFailures(m, nil)}
	h := g.Authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, tt := range []struct {
		name, scope string
		status      int
		challenge   string
	}{
		{"no token: 401 with the resource's challenge", "", http.StatusUnauthorized, "Bearer challenge-for /agents/a/mcp missing_credentials: send a token"},
		{"insufficient scope: 403 with the challenge", "none", http.StatusForbidden, "Bearer challenge-for /agents/a/mcp insufficient_scope: ask for scope mcp:tools"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/agents/a/mcp", nil)
			if tt.scope != "" {
				r.Header.Set("X-Test-Scope", tt.scope)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.status || w.Header().Get("WWW-Authenticate") != tt.challenge {
				t.Fatalf("%d %q, want %d %q", w.Code, w.Header().Get("WWW-Authenticate"), tt.status, tt.challenge)
			}
		})
	}
	mw := httptest.NewRecorder()
	m.Handler().ServeHTTP(mw, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if want := `lush_authentication_failures_total{method="oauth",reason="insufficient_scope"} 1`; !strings.Contains(mw.Body.String(), want) {
		t.Errorf("metrics do not count the refusal as %s", want)
	}

	meta := g.ResourceMetadata(func(path string) bool { return path == "" || path == "/agents/a/mcp" })
	for _, tt := range []struct {
		path   string
		status int
		want   string
	}{
		{"/.well-known/oauth-protected-resource/agents/a/mcp", 200, `"resource":"https://lush.example.com/agents/a/mcp"`},
		{"/.well-known/oauth-protected-resource", 200, `"resource":"https://lush.example.com"`},
		{"/.well-known/oauth-protected-resource/agents/b/mcp", 404, "no protected resource"},
		{"/.well-known/oauth-protected-resource/agents/a/sse", 404, "no protected resource"},
		{"/.well-known/oauth-protected-resource/approvals", 404, "no protected resource"},
	} {
		w := httptest.NewRecorder()
		meta.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if w.Code != tt.status || !strings.Contains(w.Body.String(), tt.want) {
			t.Errorf("%s: %d %s", tt.path, w.Code, w.Body.String())
		}
	}
	// Without OAuth (an authenticator that is no protected resource): the old challenge, no metadata.
	plain := &policyhttp.Gate{Auth: callers{}}
	w := httptest.NewRecorder()
	plain.Authenticated(h).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/agents/a/mcp", nil))
	if w.Code != 401 || w.Header().Get("WWW-Authenticate") != `Bearer realm="lush"` {
		t.Errorf("without OAuth: %d %q", w.Code, w.Header().Get("WWW-Authenticate"))
	}
	w = httptest.NewRecorder()
	plain.ResourceMetadata(func(string) bool { return true }).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/.well-known/oauth-protected-resource", nil))
	if w.Code != 404 {
		t.Errorf("metadata without OAuth: %d", w.Code)
	}
}
