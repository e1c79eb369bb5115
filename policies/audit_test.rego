package lush.authz_test

# Project roles: audit/read needs the audit role (lush.role.audit), else
# lush.role.no_audit denies.

test_audit_decisions[note] if {
	some note, tc in {
		"auditor by group": {"inp": audit_read(zoe), "allow": true, "rules": {"lush.role.audit"}},
		"auditor by user": {"inp": audit_read({"id": "user:erin"}), "allow": true, "rules": {"lush.role.audit"}},
		"auditor by user, other groups": {"inp": audit_read({"id": "user:erin", "groups": ["group:ops"]}), "allow": true, "rules": {"lush.role.audit"}},
		"not an auditor": {"inp": audit_read(alice), "allow": false, "rules": {"lush.role.no_audit"}},
		"approve is not audit": {"inp": audit_read({"id": "user:sam", "groups": ["group:security"]}), "allow": false, "rules": {"lush.role.no_audit"}},
		"value not true": {"inp": audit_read({"id": "user:mallory"}), "allow": false, "rules": {"lush.role.no_audit"}},
		"group id as principal": {"inp": audit_read({"id": "group:auditors"}), "allow": true, "rules": {"lush.role.audit"}},
		"service account": {"inp": audit_read({"id": "serviceaccount:digest-bot"}), "allow": false, "rules": {"lush.role.no_audit"}},
	}
	d := decide(tc.inp)
	d.allow == tc.allow
	d.rules == sort(tc.rules)
	d.access == "read"
	d.risk == "read"
	d.stub == false
	d.approval_required == false
}

test_audit_denial_message if {
	messages(decide(audit_read(alice))) == {concat("", [
		"principal user:alice may not read the decision log: none of user:alice, group:engineering, group:everyone ",
		"holds the audit role in lush.yaml roles (add one of them to roles: audit)",
	])}
}

# group:everyone in the audit role lets every authenticated principal read.
test_audit_everyone if {
	proj := object.union(project, {"roles": {"audit": {"group:everyone": true}}})
	allowed(decide_in(audit_read({"id": "user:nobody"}), proj), "allow", {"lush.role.audit"})
}

# A project without roles (or with broken roles data) denies every read.
test_audit_without_roles[note] if {
	some note, roles in {
		"absent": null,
		"empty": {},
		"audit not an object": {"audit": ["user:erin"]},
		"audit empty": {"audit": {}},
		"roles a string": "audit",
	}
	proj := with_roles(roles)
	denied_by(decide_in(audit_read({"id": "user:erin"}), proj), {"lush.role.no_audit"})
}

with_roles(null) := object.remove(project, ["roles"])

with_roles(roles) := object.union(object.remove(project, ["roles"]), {"roles": roles}) if roles != null

# audit/read needs a principal; other fields are ignored.
test_audit_input[note] if {
	some note, tc in {
		"no principal": {"inp": {"action": "audit/read"}, "rules": {"lush.input.invalid"}},
		"bad principal": {"inp": audit_read({"id": "zoe"}), "rules": {"lush.input.invalid"}},
		# The malformed group is not in the match set, so the role check denies too.
		"bad groups": {"inp": audit_read({"id": "user:zoe", "groups": ["auditors"]}), "rules": {"lush.input.invalid", "lush.role.no_audit"}},
	}
	denied_by(decide(tc.inp), tc.rules)
}

test_audit_ignores_other_fields if {
	inp := object.union(audit_read(zoe), {"agent": "ghost", "depth": 50, "chain": "x", "tool": 1, "loop": 2, "live_writes": "no"})
	allowed(decide(inp), "allow", {"lush.role.audit"})
}

# Project policies may deny an audit read (deny wins), but not allow one.
test_audit_project_deny if {
	d := decide_with(audit_read(zoe), {"corp": {"deny": {"no audits on Sundays"}}})
	d.allow == false
	"no audits on Sundays" in messages(d)
}

test_audit_project_cannot_allow if {
	d := decide_with(audit_read(alice), {"corp": {"allow_rules": {"lush.role.audit"}, "allow": true}})
	denied_by(d, {"lush.role.no_audit"})
}

# A project stub does not apply to audit/read (stubs only concern tools/call).
test_audit_project_stub_ignored if {
	allowed(decide_with(audit_read(zoe), {"corp": {"stub": {"s"}}}), "allow", {"lush.role.audit"})
}
