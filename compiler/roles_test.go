package compiler_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
)

// TestRoles: lush.yaml roles: compile into the manifest and into data.lush.project.roles, and the
// compiled policy decides audit/read with them.
func TestRoles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	copyTree(t, quickstart, dir, false)
	appendYAML(t, dir, "lush.yaml", "roles:\n  audit: [user:carol, group:auditors, user:carol]\n  approve: [group:security]\n")
	res, err := compiler.Build(ctx, dir, compiler.Offline(true))
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("build failed:\n%s", render(res.Diagnostics))
	}
	// The duplicate is a warning, with its position.
	var dup *diag.Diagnostic
	for i, d := range res.Diagnostics {
		if d.Code == "duplicate-role-member" {
			dup = &res.Diagnostics[i]
		}
	}
	if dup == nil || dup.Severity != diag.Warning || dup.File != "lush.yaml" || dup.Col != 39 {
		t.Errorf("duplicate warning = %+v\n%s", dup, render(res.Diagnostics))
	}

	want := map[string][]string{"approve": {"group:security"}, "audit": {"group:auditors", "user:carol"}}
	if len(res.Manifest.Roles) != 2 || !slices.Equal(res.Manifest.Roles["audit"], want["audit"]) || !slices.Equal(res.Manifest.Roles["approve"], want["approve"]) {
		t.Errorf("manifest roles = %v, want %v", res.Manifest.Roles, want)
	}
	if !strings.Contains(string(res.ManifestJSON), `"roles": {`) {
		t.Errorf("the manifest JSON has no roles:\n%s", res.ManifestJSON)
	}
	if _, err := manifest.Decode(res.ManifestJSON, res.Hash); err != nil {
		t.Errorf("decode: %v", err)
	}
	data := compiler.PolicyData(res.Manifest)["lush"].(map[string]any)["project"].(map[string]any)["roles"].(map[string]any)
	audit, _ := data["audit"].(map[string]any)
	if len(audit) != 2 || audit["group:auditors"] != true || audit["user:carol"] != true {
		t.Errorf("data.lush.project.roles = %v", data)
	}

	eng, err := authz.FromBytes(ctx, res.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who    authz.Principal
		allow  bool
		rule   string
		reason string
	}{
		{authz.Principal{ID: "user:carol", Groups: []string{}}, true, "lush.role.audit", ""},
		{authz.Principal{ID: "user:zoe", Groups: []string{"group:auditors"}}, true, "lush.role.audit", ""},
		{authz.Principal{ID: "user:sam", Groups: []string{"group:security"}}, false, "lush.role.no_audit",
			"principal user:sam may not read the decision log: none of user:sam, group:everyone, group:security holds the audit role in lush.yaml roles"},
	} {
		d := eng.Decide(ctx, authz.Input{Action: "audit/read", Principal: tc.who})
		if d.Allow != tc.allow || !slices.Equal(d.Rules, []string{tc.rule}) {
			t.Errorf("%s: allow %v rules %v, want %v %s (%+v)", tc.who.ID, d.Allow, d.Rules, tc.allow, tc.rule, d.Reasons)
		}
		if tc.reason != "" && (len(d.Reasons) != 1 || !strings.HasPrefix(d.Reasons[0].Message, tc.reason)) {
			t.Errorf("%s: reasons %+v", tc.who.ID, d.Reasons)
		}
	}
}

// TestNoRoles: a project without roles (or with roles: {}) has no roles key in its manifest, so
// its hash is what it was before roles existed, and nobody may read the decision log.
func TestNoRoles(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, quickstart, dir, false)
	appendYAML(t, dir, "lush.yaml", "roles: {}\n")
	res := build(t, dir)
	if res.Manifest.Roles != nil || strings.Contains(string(res.ManifestJSON), `"roles"`) {
		t.Errorf("the manifest of a project without roles has roles: %v", res.Manifest.Roles)
	}
	eng, err := authz.FromBytes(context.Background(), res.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	d := eng.Decide(context.Background(), authz.Input{Action: "audit/read", Principal: authz.Principal{ID: "user:alice", Groups: []string{}}})
	if d.Allow || !slices.Equal(d.Rules, []string{"lush.role.no_audit"}) {
		t.Errorf("audit/read without roles: %+v", d)
	}
}

// TestRoleProblems: each problem with roles: is reported with its position and a hint.
func TestRoleProblems(t *testing.T) {
	tests := []struct {
		name, roles string
		want        string // the rendered diagnostic
	}{
		{"principal without kind", "roles:\n  audit: [carol]\n",
			`lush.yaml:%d:11: error: roles.audit: principal "carol" has no kind (write user:carol, group:carol or serviceaccount:carol)`},
		{"principal with a misspelt kind", "roles:\n  audit: [grp:auditors]\n",
			`lush.yaml:%d:11: error: roles.audit: principal "grp:auditors" has unknown kind "grp" (did you mean group:auditors?)`},
		{"undeclared service account", "roles:\n  approve: [serviceaccount:digest-bto]\n",
			`lush.yaml:%d:13: error: roles.approve names service account "digest-bto", which lush.yaml does not declare (did you mean "digest-bot"?)`},
		{"unknown role", "roles:\n  auditor: [user:carol]\n",
			`lush.yaml:%d:3: error: unknown role "auditor" in roles (did you mean "audit"? (the roles are audit, approve, budget and tasks))`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, quickstart, dir, false)
			appendYAML(t, dir, "lush.yaml", tt.roles)
			res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
			if err != nil {
				t.Fatal(err)
			}
			if res.OK() {
				t.Fatal("the build succeeded")
			}
			line := lineOf(t, filepath.Join(dir, "lush.yaml"), "roles:") + 1
			want := strings.Replace(tt.want, "%d", strconv.Itoa(line), 1)
			if got := render(res.Diagnostics); !strings.Contains(got, want) {
				t.Errorf("diagnostics:\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func lineOf(t *testing.T, path, prefix string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, prefix) {
			return i + 1
		}
	}
	t.Fatalf("%s has no line starting with %q", path, prefix)
	return 0
}
