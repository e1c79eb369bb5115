package audithttp_test

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/audit/audithttp"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func TestParseQuery(t *testing.T) {
	tests := []struct {
		query string
		want  decisionlog.Filter
	}{
		{"", decisionlog.Filter{Limit: 100}},
		{"principal=user:alice&group=group:eng&agent=researcher&tool=mcp://x&tool_name=t&action=tools/call&text=hi",
			decisionlog.Filter{Principal: "user:alice", Group: "group:eng", Agent: "researcher", Tool: "mcp://x", ToolName: "t", Action: "tools/call", Text: "hi", Limit: 100}},
		{"outcome=live_write", decisionlog.Filter{Outcome: "allow", Access: "write", Limit: 100}},
		{"outcome=live_write&access=write", decisionlog.Filter{Outcome: "allow", Access: "write", Limit: 100}},
		{"outcome=approval_required&access=read", decisionlog.Filter{Outcome: "approval_required", Access: "read", Limit: 100}},
		{"since=24h&until=1h", decisionlog.Filter{Since: now.Add(-24 * time.Hour), Until: now.Add(-time.Hour), Limit: 100}},
		{"since=7d", decisionlog.Filter{Since: now.Add(-7 * 24 * time.Hour), Limit: 100}},
		{"since=2026-01-02T15:04:05Z&until=2026-01-02T16:04:05.5%2B01:00", decisionlog.Filter{
			Since: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), Until: time.Date(2026, 1, 2, 15, 4, 5, 5e8, time.UTC), Limit: 100}},
		{"decision_id=01a2&revision=b29d&before=42&limit=1000", decisionlog.Filter{DecisionID: "01a2", Revision: "b29d", BeforeSeq: 42, Limit: 1000}},
		{"principal=&outcome=&limit=", decisionlog.Filter{Limit: 100}},
	}
	for _, tt := range tests {
		q, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := audithttp.ParseQuery(q, now)
		if err != nil {
			t.Errorf("%s: %v", tt.query, err)
			continue
		}
		if !got.Since.Equal(tt.want.Since) || !got.Until.Equal(tt.want.Until) {
			t.Errorf("%s: since %v until %v, want %v %v", tt.query, got.Since, got.Until, tt.want.Since, tt.want.Until)
		}
		got.Since, got.Until, tt.want.Since, tt.want.Until = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if got != tt.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.query, got, tt.want)
		}
	}
}

// FuzzParseQuery: any query string either gives a filter the decision log accepts, or an error
// naming a parameter of the query and saying how to fix it. Interesting inputs are kept in
// testdata/fuzz/FuzzParseQuery.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{
		"", "principal=user:alice&since=24h", "outcome=live_write&access=read", "since=2026-01-02T15:04:05Z&until=2026-01-02T15:04:05Z",
		"limit=1000&before=9223372036854775807", "since=9999999h", "since=106751d", "until=0001-01-01T00:00:00Z",
		"since=2262-04-11T23:47:16.854775808Z", "group=x&group=y", "text=%00", "%zz=1", "a=1;b=2", "since=-0s", "since=1e3h",
		"decision_id=%FF%FF", "limit=+5", "limit=0x10", "before=1_000",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw) // the server reads what parses, as r.URL.Query does
		filter, err := audithttp.ParseQuery(q, now)
		if err != nil {
			var pe *audithttp.ParamError
			if !errors.As(err, &pe) || pe.Message == "" {
				t.Fatalf("%q: error %v is not a *ParamError with a message", raw, err)
			}
			if _, ok := q[pe.Param]; !ok {
				t.Fatalf("%q: error names %q, which the query does not have", raw, pe.Param)
			}
			if pe.Param != "" && !strings.HasPrefix(err.Error(), "param "+pe.Param+": ") || !strings.HasSuffix(pe.Message, ")") {
				t.Fatalf("%q: error %q does not name the parameter and end with the fix", raw, err)
			}
			return
		}
		if filter.Limit < 1 || filter.Limit > audithttp.MaxLimit || filter.BeforeSeq < 0 || filter.AfterSeq != 0 || filter.Oldest {
			t.Fatalf("%q: filter %+v", raw, filter)
		}
		if filter.Outcome != "" && !slices.Contains(authz.Outcomes, filter.Outcome) {
			t.Fatalf("%q: outcome %q", raw, filter.Outcome)
		}
		if filter.Access != "" && filter.Access != "read" && filter.Access != "write" {
			t.Fatalf("%q: access %q", raw, filter.Access)
		}
		if !filter.Since.IsZero() && !filter.Until.IsZero() && !filter.Since.Before(filter.Until) {
			t.Fatalf("%q: since %v is not before until %v", raw, filter.Since, filter.Until)
		}
		for _, tm := range []time.Time{filter.Since, filter.Until} {
			if !tm.IsZero() && !time.Unix(0, tm.UnixNano()).Equal(tm) {
				t.Fatalf("%q: time %v is out of the log's range", raw, tm)
			}
		}
	})
}
