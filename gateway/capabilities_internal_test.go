package gateway

import (
	"encoding/json"
	"testing"

	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/internal/upstream"
)

// An upstream's MissingRequiredClientCapability error reaches the client as it is, its message
// naming the capabilities its data lists (those the server's message does not name already).
func TestMissingCapabilityErrorNamesTheCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name, message, data, want string
	}{
		{"named already", "Missing required client capabilities: sampling", `{"requiredCapabilities":{"sampling":{}}}`,
			"Missing required client capabilities: sampling"},
		{"not named", "capability missing", `{"requiredCapabilities":{"sampling":{},"elicitation":{}}}`,
			"capability missing (the client did not declare the capabilities: elicitation, sampling)"},
		{"no data", "capability missing", ``, "capability missing"},
		{"malformed data", "capability missing", `{"requiredCapabilities":["sampling"]}`, "capability missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := clientError(&upstream.RPCError{Code: mcphttp.CodeMissingClientCapability, Message: tc.message, Data: json.RawMessage(tc.data)})
			if got.Code != mcphttp.CodeMissingClientCapability || got.Message != tc.want || string(got.Data.(json.RawMessage)) != tc.data {
				t.Errorf("error = %+v, want message %q", got, tc.want)
			}
		})
	}
	other := clientError(&upstream.RPCError{Code: -32602, Message: "bad", Data: json.RawMessage(`{"requiredCapabilities":{"x":{}}}`)})
	if other.Message != "bad" {
		t.Errorf("another error's message was changed: %q", other.Message)
	}
}
