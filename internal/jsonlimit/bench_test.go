package jsonlimit

import (
	"strings"
	"testing"
)

// BenchmarkCheck reads 3.8 MiB values with limits too high to stop it: nested arrays (500 ×
// 4000 levels), one string, and a list of numbers; the nested value with the default limits,
// which stop at the 65th level; and a typical tool call's arguments (about 200 bytes) with the
// defaults, what every call pays.
//
//	go test ./internal/jsonlimit -run '^$' -bench Check -benchmem
func BenchmarkCheck(b *testing.B) {
	one := strings.Repeat("[", 4000) + strings.Repeat("]", 4000)
	nested := `{"items":[` + strings.Repeat(one+",", 499) + one + `]}`
	flat := `{"items":"` + strings.Repeat("a", len(nested)-12) + `"}`
	numbers := `{"items":[` + strings.Repeat("12345,", len(nested)/6-3) + `1]}`
	all := Limits{MaxDepth: MaxDepthLimit, MaxNodes: 1 << 30, MaxBytes: 1 << 30}
	for _, tc := range []struct {
		name string
		lim  Limits
		json string
	}{
		{"nested/unlimited", all, nested},
		{"flat/unlimited", all, flat},
		{"numbers/unlimited", all, numbers},
		{"nested/depth-64", Limits{MaxBytes: 1 << 30}, nested},
		{"typical/defaults", Limits{}, `{"path": "drafts/q3-report.md", "content": "# Q3\n\nRevenue grew 12% (\u00e9t\u00e9).", "tags": ["finance", "q3"], "overwrite": false, "mode": 420}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			data := []byte(tc.json)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				err := tc.lim.Check(data)
				if (err == nil) != (tc.name != "nested/depth-64") {
					b.Fatal(err)
				}
			}
		})
	}
}
