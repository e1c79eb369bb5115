package decisionlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/authz"
)

// fixture logs six decisions one minute apart and completes two of them.
func fixture(t *testing.T) (*Log, time.Time) {
	t.Helper()
	ctx := context.Background()
	l := openLog(t)
	base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	type row struct {
		id, principal, agent, tool, toolName, outcome, revision, action string
	}
	rows := []row{
		{"aaaa-1", "user:alice", "researcher", "mcp://fs", "read_text_file", authz.OutcomeAllow, "rev1aaaa", "tools/call"},
		{"aaaa-2", "user:alice", "researcher", "mcp://fs", "write_file", authz.OutcomeStub, "rev1aaaa", "tools/call"},
		{"bbbb-3", "user:bob", "researcher", "mcp://fs", "write_file", authz.OutcomeDeny, "rev1aaaa", "tools/call"},
		{"bbbb-4", "user:bob", "writer", "tools/clock", "", authz.OutcomeAllow, "rev2bbbb", "tools/call"},
		{"cccc-5", "serviceaccount:digest-bot", "", "", "", authz.OutcomeAllow, "rev2bbbb", "loop/trigger"},
		{"cccc-6", "user:carol", "writer", "mcp://fs", "delete_file", authz.OutcomeApproval, "rev2bbbb", "tools/call"},
	}
	for i, r := range rows {
		e := &Event{DecisionID: r.id, Timestamp: base.Add(time.Duration(i) * time.Minute), Principal: r.principal, Agent: r.agent,
			Tool: r.tool, ToolName: r.toolName, Outcome: r.outcome, Revision: r.revision, Action: r.action, Rules: []string{"lush.x"},
			Access: "read", Groups: map[string][]string{"user:alice": {"group:eng"}, "user:bob": {"group:eng", "group:ops"}}[r.principal],
			Input: json.RawMessage(fmt.Sprintf(`{"action":%q,"arguments":{"path":"notes/%s.md"}}`, r.action, r.id))}
		if strings.HasPrefix(r.toolName, "write") || r.toolName == "delete_file" {
			e.Access = "write"
		}
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*Completion{{DecisionID: "aaaa-1", Status: StatusOK}, {DecisionID: "aaaa-2", Status: StatusStubbed}} {
		if err := l.Complete(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	return l, base
}

func ids(recs []Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.Event.DecisionID)
	}
	return out
}

func TestQueryFilters(t *testing.T) {
	l, base := fixture(t)
	tests := []struct {
		name string
		f    Filter
		want []string
	}{
		{"all, newest first", Filter{}, []string{"cccc-6", "cccc-5", "bbbb-4", "bbbb-3", "aaaa-2", "aaaa-1"}},
		{"oldest first", Filter{Oldest: true}, []string{"aaaa-1", "aaaa-2", "bbbb-3", "bbbb-4", "cccc-5", "cccc-6"}},
		{"principal", Filter{Principal: "user:bob"}, []string{"bbbb-4", "bbbb-3"}},
		{"agent", Filter{Agent: "writer"}, []string{"cccc-6", "bbbb-4"}},
		{"tool", Filter{Tool: "mcp://fs"}, []string{"cccc-6", "bbbb-3", "aaaa-2", "aaaa-1"}},
		{"tool name", Filter{ToolName: "write_file"}, []string{"bbbb-3", "aaaa-2"}},
		{"outcome", Filter{Outcome: authz.OutcomeAllow}, []string{"cccc-5", "bbbb-4", "aaaa-1"}},
		{"approval outcome", Filter{Outcome: authz.OutcomeApproval}, []string{"cccc-6"}},
		{"action", Filter{Action: "loop/trigger"}, []string{"cccc-5"}},
		{"decision id", Filter{DecisionID: "bbbb-3"}, []string{"bbbb-3"}},
		{"decision id prefix", Filter{DecisionID: "bbbb"}, []string{"bbbb-4", "bbbb-3"}},
		{"revision", Filter{Revision: "rev2bbbb"}, []string{"cccc-6", "cccc-5", "bbbb-4"}},
		{"revision prefix", Filter{Revision: "rev1"}, []string{"bbbb-3", "aaaa-2", "aaaa-1"}},
		{"since", Filter{Since: base.Add(4 * time.Minute)}, []string{"cccc-6", "cccc-5"}},
		{"until is exclusive", Filter{Until: base.Add(2 * time.Minute)}, []string{"aaaa-2", "aaaa-1"}},
		{"since and until", Filter{Since: base.Add(time.Minute), Until: base.Add(3 * time.Minute)}, []string{"bbbb-3", "aaaa-2"}},
		{"after seq", Filter{AfterSeq: 4, Oldest: true}, []string{"cccc-5", "cccc-6"}},
		{"before seq", Filter{BeforeSeq: 3}, []string{"aaaa-2", "aaaa-1"}},
		{"access", Filter{Access: "write"}, []string{"cccc-6", "bbbb-3", "aaaa-2"}},
		{"group member", Filter{Group: "group:ops"}, []string{"bbbb-4", "bbbb-3"}},
		{"group, or the principal itself", Filter{Group: "user:carol"}, []string{"cccc-6"}},
		{"text in arguments", Filter{Text: "bbbb-"}, []string{"bbbb-4", "bbbb-3"}},
		{"text not in arguments", Filter{Text: "user:alice"}, []string{}},
		{"limit", Filter{Limit: 2}, []string{"cccc-6", "cccc-5"}},
		{"limit oldest", Filter{Limit: 2, Oldest: true}, []string{"aaaa-1", "aaaa-2"}},
		{"combined", Filter{Principal: "user:alice", Outcome: authz.OutcomeStub, Tool: "mcp://fs"}, []string{"aaaa-2"}},
		{"nothing", Filter{Principal: "user:nobody"}, []string{}},
		{"far future", Filter{Since: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}, []string{}},
		{"far past", Filter{Until: time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)}, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := l.Query(context.Background(), tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(recs); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	recs, err := l.Query(context.Background(), Filter{Oldest: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.Seq != int64(i+1) {
			t.Errorf("seq %d at %d", r.Seq, i)
		}
		hasCompletion := r.Completion != nil
		if want := i < 2; hasCompletion != want {
			t.Errorf("%s: completion %v", r.Event.DecisionID, r.Completion)
		}
	}
	if recs[1].Completion.Status != StatusStubbed || recs[1].Completion.DecisionID != "aaaa-2" {
		t.Errorf("completion = %+v", recs[1].Completion)
	}
}

func TestQueryBadFilters(t *testing.T) {
	l, base := fixture(t)
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{Limit: -1}, "limit must not be negative"},
		{Filter{Limit: MaxLimit + 1}, "limit must be at most 10000, not 10001"},
		{Filter{Outcome: "allowed"}, `outcome must be one of [allow deny stub approval_required error], not "allowed"`},
		{Filter{Since: base, Until: base}, "since (2026-05-01T12:00:00Z) must be before until"},
	} {
		if _, err := l.Query(context.Background(), tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.f, err, tc.want)
		}
	}
}

func TestQueryDefaultLimit(t *testing.T) {
	l := openLog(t)
	for i := range DefaultLimit + 20 {
		if err := l.Record(context.Background(), sampleEvent(fmt.Sprintf("e%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := l.Query(context.Background(), Filter{})
	if err != nil || len(recs) != DefaultLimit || recs[0].Event.DecisionID != "e119" {
		t.Errorf("%d records, first %v (%v)", len(recs), ids(recs[:1]), err)
	}
	recs, err = l.Query(context.Background(), Filter{Limit: MaxLimit})
	if err != nil || len(recs) != DefaultLimit+20 {
		t.Errorf("%d records (%v)", len(recs), err)
	}
}

func TestOpenReaderErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope", "decisions.db")
	_, err := OpenReader(missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); err == nil {
		t.Error("OpenReader created a directory")
	}
	if _, err := OpenReader(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory: %v", err)
	}
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte(strings.Repeat("not a database\n", 100)), 0o600)
	if _, err := OpenReader(text); err == nil || !strings.Contains(err.Error(), text) {
		t.Errorf("text file: %v", err)
	}
	empty := filepath.Join(dir, "empty.db")
	os.WriteFile(empty, nil, 0o600)
	if _, err := OpenReader(empty); err == nil || !strings.Contains(err.Error(), "not a decision log") {
		t.Errorf("empty file: %v", err)
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"abc", "abd", true},
		{"ab\xff", "ac", true},
		{"\xff\xff", "", false},
		{"", "", false},
	} {
		got, ok := prefixEnd(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("prefixEnd(%q) = %q, %v", tc.in, got, ok)
		}
	}
}
