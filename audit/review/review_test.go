package review_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lush-agents/lush/audit/review"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/test/projecttest"
)

const fs = "mcp://npx/@modelcontextprotocol/server-filesystem"

func build(t *testing.T, edit func(dir string)) *review.Review {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../../examples/quickstart")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, ".lush"))
	if edit != nil {
		edit(dir)
	}
	ctx := context.Background()
	res, eng := projecttest.Build(t, dir)
	rv, err := review.Compute(ctx, res.Manifest, eng)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

func find(rv *review.Review, subject, agent, tool, name string) *review.Row {
	for i, r := range rv.Rows {
		if r.Subject == subject && r.Agent == agent && r.Tool == tool && r.Name == name {
			return &rv.Rows[i]
		}
	}
	return nil
}

// What the quickstart's policy lets each subject do, with what gives it.
func TestQuickstart(t *testing.T) {
	rv := build(t, nil)
	for _, tc := range []struct {
		subject, agent, tool, name, access, outcome, grantedBy string
	}{
		{"group:engineering", "researcher", fs, "read_text_file", "read", "allow", "grant group:engineering read"},
		// The project's drafts policy decides each write by its path: granted, conditionally.
		{"serviceaccount:digest-bot", "orchestrator", fs, "write_file", "write", review.Conditional, "grant serviceaccount:digest-bot write only write_file"},
		{"serviceaccount:digest-bot", "notifier", "mcp://notes.example.com/mcp", "post_note", "write", "stub", "grant serviceaccount:digest-bot write"},
		{"serviceaccount:digest-bot", "orchestrator", "lush://researcher", "", "read", "allow", "acl serviceaccount:digest-bot execute"},
	} {
		r := find(rv, tc.subject, tc.agent, tc.tool, tc.name)
		if r == nil {
			t.Errorf("no row for %s %s %s %s", tc.subject, tc.agent, tc.tool, tc.name)
			continue
		}
		if r.Access != tc.access || r.Outcome != tc.outcome || !strings.Contains(strings.Join(r.GrantedBy, "; "), tc.grantedBy) {
			t.Errorf("%s %s %s %s: %+v", tc.subject, tc.agent, tc.tool, tc.name, r)
		}
	}
	if r := find(rv, "serviceaccount:digest-bot", "orchestrator", fs, "write_file"); r != nil && strings.Join(r.Conditions, ",") != "quickstart.drafts.outside" {
		t.Errorf("conditions %v", r.Conditions)
	}
	// What the policy refuses is not in the review.
	for _, tc := range [][4]string{
		{"group:contractors", "researcher", fs, "read_text_file"},                     // may run the researcher, holds no grant
		{"group:engineering", "researcher", fs, "write_file"},                         // narrowed out of the researcher's allowlist
		{"group:engineering", "notifier", "mcp://notes.example.com/mcp", "post_note"}, // not in the notifier's ACL
	} {
		if r := find(rv, tc[0], tc[1], tc[2], tc[3]); r != nil {
			t.Errorf("a row the policy does not allow: %+v", r)
		}
	}
}

// A change's review diff: what it grants and what it revokes.
func TestDiff(t *testing.T) {
	old := build(t, nil)
	changed := build(t, func(dir string) {
		p := filepath.Join(dir, "lush.yaml")
		data, _ := os.ReadFile(p)
		s := strings.Replace(string(data), "      - principal: group:engineering\n        access: read\n", "", 1) // engineering loses the filesystem
		os.WriteFile(p, []byte(s), 0o644)
	})
	var revoked, granted int
	for _, c := range review.Diff(old, changed) {
		switch c.Change {
		case "revoked":
			revoked++
			if c.Old.Subject != "group:engineering" || c.Old.Tool != fs {
				t.Errorf("revoked %+v", c.Old)
			}
		case "granted":
			granted++
		}
	}
	if revoked == 0 || granted != 0 {
		t.Errorf("revoked %d, granted %d", revoked, granted)
	}
	if d := review.Diff(old, old); len(d) != 0 {
		t.Errorf("a build against itself: %v", d)
	}
}

// TestAuditRole: who may read the decision log is in the review, decided by the policy, and a
// change of the audit role shows in the diff.
func TestAuditRole(t *testing.T) {
	old := build(t, nil) // roles: audit: [group:security]
	var auditors []string
	for _, r := range old.Rows {
		if r.Action == authz.ActionAuditRead {
			auditors = append(auditors, r.Subject)
			if r.Access != "read" || r.Outcome != authz.OutcomeAllow || len(r.GrantedBy) != 1 || r.GrantedBy[0] != "role audit group:security" {
				t.Errorf("audit row %+v", r)
			}
		}
	}
	if len(auditors) != 1 || auditors[0] != "group:security" {
		t.Fatalf("auditors %v", auditors)
	}
	changed := build(t, func(dir string) {
		p := filepath.Join(dir, "lush.yaml")
		data, _ := os.ReadFile(p)
		os.WriteFile(p, []byte(strings.Replace(string(data), "audit: [group:security]", "audit: [user:carol]", 1)), 0o644)
	})
	var got []string
	for _, c := range review.Diff(old, changed) {
		r := c.New
		if r == nil {
			r = c.Old
		}
		if r.Action == authz.ActionAuditRead {
			got = append(got, c.Change+" "+r.Subject)
		}
	}
	if strings.Join(got, ",") != "revoked group:security,granted user:carol" {
		t.Errorf("diff of the audit role: %v", got)
	}
}

// TestApproveRole: who may list and decide approvals is in the review: approve gives both,
// audit only the listing.
func TestApproveRole(t *testing.T) {
	rv := build(t, func(dir string) {
		p := filepath.Join(dir, "lush.yaml")
		data, _ := os.ReadFile(p)
		os.WriteFile(p, []byte(strings.Replace(string(data), "approve: [group:security]", "approve: [user:carol]", 1)), 0o644)
	})
	var got []string
	for _, r := range rv.Rows {
		if r.Action == authz.ActionApprovalRead || r.Action == authz.ActionApprovalDecide {
			got = append(got, fmt.Sprintf("%s %s %v", r.Subject, r.Action, r.GrantedBy))
		}
	}
	want := []string{
		"group:security approval/read [role audit group:security]",
		"user:carol approval/read [role approve user:carol]",
		"user:carol approval/decide [role approve user:carol]",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("approval rows:\n got %q\nwant %q", got, want)
	}
}

// TestTasksRole: who may read and cancel other principals' tasks, agent by agent, is in the review:
// the holders of the tasks role, wherever they may execute the agent; nobody without it.
func TestTasksRole(t *testing.T) {
	tasks := func(rv *review.Review) []string {
		var got []string
		for _, r := range rv.Rows {
			if r.Action == authz.ActionTasksRead || r.Action == authz.ActionTasksCancel {
				got = append(got, fmt.Sprintf("%s %s %s %s %v", r.Subject, r.Action, r.Agent, r.Access, r.GrantedBy))
			}
		}
		slices.Sort(got)
		return got
	}
	if got := tasks(build(t, nil)); len(got) != 0 {
		t.Fatalf("task rows without a tasks role: %q", got)
	}
	rv := build(t, func(dir string) {
		p := filepath.Join(dir, "lush.yaml")
		data, _ := os.ReadFile(p)
		os.WriteFile(p, []byte(strings.Replace(string(data), "approve: [group:security]", "approve: [group:security]\n  tasks: [group:engineering]", 1)), 0o644)
	})
	got := tasks(rv)
	if len(got) == 0 {
		t.Fatal("no task rows for the tasks role")
	}
	for _, g := range got {
		if !strings.HasPrefix(g, "group:engineering ") || !strings.Contains(g, "role tasks group:engineering") {
			t.Errorf("task row %q: want group:engineering's, granted by its role", g)
		}
	}
	// group:engineering may execute the researcher (its ACL): it may read and cancel others' tasks there.
	for _, want := range []string{"group:engineering tasks/read researcher read", "group:engineering tasks/cancel researcher write"} {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, want) }) {
			t.Errorf("no row %q in %q", want, got)
		}
	}
}
