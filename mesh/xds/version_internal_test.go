package xds

import (
	"regexp"
	"testing"
)

// TestModernVersion: the route of MCP 2026 requests matches 2026-07-28 and every later date, and
// nothing earlier (Envoy matches the whole header value, as ^…$ does here).
func TestModernVersion(t *testing.T) {
	re := regexp.MustCompile(`^(?:` + modernVersion + `)$`)
	for v, want := range map[string]bool{
		"2026-07-28": true, "2026-07-31": true, "2026-08-01": true, "2026-12-31": true, "2027-01-15": true, "2099-06-30": true,
		"2026-07-27": false, "2026-06-30": false, "2025-11-25": false, "2025-06-18": false, "2024-11-05": false,
		"": false, "2026-07-28 ": false, "x2026-07-28": false, "2026-07-2": false, "latest": false,
	} {
		if got := re.MatchString(v); got != want {
			t.Errorf("%q: matches %v, want %v", v, got, want)
		}
	}
}
