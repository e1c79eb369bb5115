package lush.authz_test

# Approvals: an approved call needs no approval (lush.approval.granted);
# approval/read needs the approve or audit role, approval/decide the approve
# role and not one's own call.

granted(by) := {"id": "0193a", "status": "approved", "approved_by": by}

test_approved_call_runs[note] if {
	some note, tc in {
		"live write": {"inp": call(shell_call, {"live_writes": true, "approval": granted("user:sam")}), "outcome": "allow"},
		"stubbed write": {"inp": call(shell_call, {"approval": granted("user:sam")}), "outcome": "stub"},
	}
	d := decide(tc.inp)
	d.allow
	d.outcome == tc.outcome
	d.approval_required == false
	d.approvals == []
	"lush.approval.granted" in d.rules
	not "lush.approval.risk" in d.rules
}

# Anything short of a well-formed approved approval still asks for one.
test_not_granted_still_needs_approval[note] if {
	some note, approval in {
		"denied": {"id": "0193a", "status": "denied", "approved_by": "user:sam"},
		"no approver": {"id": "0193a", "status": "approved", "approved_by": ""},
		"no id": {"id": "", "status": "approved", "approved_by": "user:sam"},
		"id not a string": {"id": 5, "status": "approved", "approved_by": "user:sam"},
		"not an object": "approved",
		"null": null,
	}
	d := decide(call(shell_call, {"live_writes": true, "approval": approval}))
	d.outcome == "approval_required"
	not "lush.approval.granted" in d.rules
}

# An approval does not lift a denial: a call the policy denies stays denied.
test_approval_does_not_lift_a_denial if {
	d := decide(call(shell_call, {"agent": "researcher", "approval": granted("user:sam")}))
	d.allow == false
	d.outcome == "deny"
}

# A project denial still wins over an approval (a project policy can refuse
# approvers it does not trust), and one approval satisfies the project's
# approvals too.
test_project_rules_and_approvals if {
	inp := call(shell_call, {"live_writes": true, "approval": granted("user:intern")})
	decide_with(inp, {"corp": {"deny": {"not approved by an intern"}}}).allow == false
	d := decide_with(inp, {"corp": {"approval": {"needs a second look"}}})
	d.outcome == "allow"
	d.approvals == []
}

test_approval_decisions[note] if {
	some note, tc in {
		"approver by group": {"inp": approval_decide(sam, "user:alice"), "allow": true, "rules": {"lush.role.approve"}},
		"own call": {"inp": approval_decide(sam, "user:sam"), "allow": false, "rules": {"lush.approval.self"}},
		"not an approver": {"inp": approval_decide(alice, "user:bob"), "allow": false, "rules": {"lush.role.no_approve"}},
		"not an approver, own call": {"inp": approval_decide(alice, "user:alice"), "allow": false, "rules": {"lush.role.no_approve", "lush.approval.self"}},
		"auditor cannot decide": {"inp": approval_decide(zoe, "user:alice"), "allow": false, "rules": {"lush.role.no_approve"}},
		"approver reads": {"inp": approval_read(sam), "allow": true, "rules": {"lush.role.approval_read"}},
		"auditor reads": {"inp": approval_read(zoe), "allow": true, "rules": {"lush.role.approval_read"}},
		"others do not read": {"inp": approval_read(alice), "allow": false, "rules": {"lush.role.no_approval_read"}},
		"no principal": {"inp": {"action": "approval/decide"}, "allow": false, "rules": {"lush.input.invalid"}},
	}
	d := decide(tc.inp)
	d.allow == tc.allow
	d.rules == sort(tc.rules)
	d.approval_required == false
}

test_approval_denial_messages if {
	messages(decide(approval_decide(alice, "user:bob"))) == {concat("", [
		"principal user:alice may not approve or deny calls: none of user:alice, group:engineering, group:everyone ",
		"holds the approve role in lush.yaml roles (add one of them to roles: approve)",
	])}
	messages(decide(approval_decide(sam, "user:sam"))) == {
		"principal user:sam made this call and may not decide its own approval: another holder of the approve role must",
	}
}
