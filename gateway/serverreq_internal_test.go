package gateway

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A server request reaches the client only when the client declared it: sampling, roots, or
// elicitation in the request's mode (modes absent: form only).
func TestClientDeclares(t *testing.T) {
	tests := []struct {
		caps, method, params string
		ok                   bool
	}{
		{`{"sampling":{}}`, "sampling/createMessage", `{}`, true},
		{`{}`, "sampling/createMessage", `{}`, false},
		{`{"sampling":null}`, "sampling/createMessage", `{}`, false},
		{`{"sampling":true}`, "sampling/createMessage", `{}`, false},
		{`{"roots":{"listChanged":true}}`, "roots/list", ``, true},
		{`{"sampling":{}}`, "roots/list", ``, false},
		{`{"elicitation":{}}`, "elicitation/create", `{"message":"m"}`, true},
		{`{"elicitation":{}}`, "elicitation/create", `{"mode":"form"}`, true},
		{`{"elicitation":{}}`, "elicitation/create", `{"mode":"url","url":"https://x"}`, false},
		{`{"elicitation":{"form":{}}}`, "elicitation/create", `{"mode":"url"}`, false},
		{`{"elicitation":{"url":{}}}`, "elicitation/create", `{"mode":"url"}`, true},
		{`{"elicitation":{"url":{}}}`, "elicitation/create", `{}`, false},
		{`{"elicitation":{"form":{},"url":{}}}`, "elicitation/create", `{}`, true},
		{``, "elicitation/create", `{}`, false},
		{`{"sampling":{}}`, "ping", `{}`, false},
	}
	for _, tt := range tests {
		err := clientDeclares(json.RawMessage(tt.caps), tt.method, json.RawMessage(tt.params))
		if (err == nil) != tt.ok {
			t.Errorf("caps %s, %s %s: %v, want ok %v", tt.caps, tt.method, tt.params, err, tt.ok)
		}
	}
}

// What the policy sees of a server request: the elicitation's mode (and URL), sampling's
// maxTokens; never messages, schemas or forms.
func TestRequestSummary(t *testing.T) {
	tests := []struct {
		method, params string
		want           any
	}{
		{"elicitation/create", `{"message":"secret?","requestedSchema":{}}`, map[string]any{"mode": "form"}},
		{"elicitation/create", `{"mode":"url","url":"https://idp/x","message":"m"}`, map[string]any{"mode": "url", "url": "https://idp/x"}},
		{"sampling/createMessage", `{"messages":[{"role":"user"}],"maxTokens":100}`, map[string]any{"maxTokens": float64(100)}},
		{"sampling/createMessage", `{"messages":[]}`, nil},
		{"roots/list", `{}`, nil},
	}
	for _, tt := range tests {
		if got := requestSummary(tt.method, json.RawMessage(tt.params)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s %s: %v, want %v", tt.method, tt.params, got, tt.want)
		}
	}
}
