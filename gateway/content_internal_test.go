package gateway

import (
	"testing"

	"github.com/lush-agents/lush/internal/mcphttp"
)

// An unknown resource is CodeResourceNotFound before 2026-07-28 and invalid params from it
// (SEP-2164), with the URI in the error's data.
func TestResourceNotFoundByProtocol(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		code     int
	}{
		{"2024-11-05", CodeResourceNotFound},
		{"2025-06-18", CodeResourceNotFound},
		{"2025-11-25", CodeResourceNotFound},
		{"2026-07-28", mcphttp.CodeInvalidParams},
	} {
		c := &call{agent: "a", req: &mcphttp.Request{Protocol: tc.protocol}}
		err := c.resourceNotFound("test://nope").(*mcphttp.Error)
		if err.Code != tc.code || err.Data.(map[string]string)["uri"] != "test://nope" {
			t.Errorf("%s: %d %v, want %d with the uri", tc.protocol, err.Code, err.Data, tc.code)
		}
	}
}
