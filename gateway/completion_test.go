package gateway_test

import (
	"strings"
	"testing"

	"github.com/lush-agents/lush/gateway"
)

// completion/complete about a prompt or resource the caller cannot get answers exactly as
// prompts/get and resources/read do (the same code and message, bar the decision id), so that it
// reveals nothing they do not; about one the caller can get, it goes to its server.
func TestCompletionAnswersLikeGet(t *testing.T) {
	h := start(t, gateway.Config{})
	for _, tc := range []struct {
		name     string
		key      string
		ref      map[string]any
		get      string // the method completion must answer like
		getParam map[string]any
		ok       bool
	}{
		{"a prompt the caller may get", aliceKey, map[string]any{"type": "ref/prompt", "name": "greet"}, "prompts/get", map[string]any{"name": "greet"}, true},
		{"an unknown prompt", aliceKey, map[string]any{"type": "ref/prompt", "name": "nope"}, "prompts/get", map[string]any{"name": "nope"}, false},
		{"a prompt the caller may not get", bobKey, map[string]any{"type": "ref/prompt", "name": "greet"}, "prompts/get", map[string]any{"name": "greet"}, false},
		{"a resource the caller may not read", bobKey, map[string]any{"type": "ref/resource", "uri": "test://readme"}, "resources/read", map[string]any{"uri": "test://readme"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := h.client("assistant", tc.key)
			res, compErr := rpc(t, c, "completion/complete", map[string]any{"ref": tc.ref, "argument": map[string]any{"name": "who", "value": "a"}})
			_, getErr := rpc(t, c, tc.get, tc.getParam)
			if tc.ok {
				if compErr != nil || !strings.Contains(string(res), `"values"`) {
					t.Fatalf("completion: %s %+v", res, compErr)
				}
				return
			}
			if compErr == nil || getErr == nil {
				t.Fatalf("completion %s %+v, %s %+v: want errors", res, compErr, tc.get, getErr)
			}
			trim := func(m string) string { return strings.SplitN(m, " (decision ", 2)[0] }
			if compErr.Code != getErr.Code || trim(compErr.Message) != trim(getErr.Message) {
				t.Fatalf("completion answers %d %q, %s %d %q", compErr.Code, compErr.Message, tc.get, getErr.Code, getErr.Message)
			}
		})
	}
}
