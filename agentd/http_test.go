package agentd

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/authz"
)

func TestDeniedInvocationAnswers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        *DeniedError
		code       int
		kind       string
		retryAfter string
	}{
		{"denied", &DeniedError{DecisionID: "d1", Outcome: "deny", Reasons: []authz.Reason{{Rule: "lush.acl.no_agent_execute", Message: "no"}}},
			http.StatusForbidden, "denied", ""},
		{"rate limited", &DeniedError{DecisionID: "d2", Outcome: "deny", RetryAfter: 1500 * time.Millisecond,
			Reasons: []authz.Reason{{Rule: "lush.rate.limited", Message: "rate limit user:a 1/s burst 1 exceeded: retry after 1500 ms"}}},
			http.StatusTooManyRequests, "rate_limited", "2"},
		{"rate limited briefly", &DeniedError{DecisionID: "d3", Outcome: "deny", RetryAfter: 10 * time.Millisecond,
			Reasons: []authz.Reason{{Rule: "lush.rate.limited", Message: "x"}}},
			http.StatusTooManyRequests, "rate_limited", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeInvokeError(w, tc.err)
			var body struct {
				Error struct {
					Code         string `json:"code"`
					DecisionID   string `json:"decision_id"`
					RetryAfterMS int64  `json:"retry_after_ms"`
				} `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if w.Code != tc.code || body.Error.Code != tc.kind || w.Header().Get("Retry-After") != tc.retryAfter ||
				body.Error.DecisionID != tc.err.DecisionID || body.Error.RetryAfterMS != tc.err.RetryAfter.Milliseconds() {
				t.Errorf("got %d Retry-After %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
			}
		})
	}
}
