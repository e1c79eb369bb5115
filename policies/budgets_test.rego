package lush.authz_test

# The budgets API: budget/read needs the budget or audit role
# (lush.role.budget_read), budget/top-up the budget role (lush.role.budget).

test_budget_api_decisions[note] if {
	some note, tc in {
		"reader with the budget role": {"inp": budget_read(fay), "allow": true, "rules": {"lush.role.budget_read"}},
		"reader with the audit role": {"inp": budget_read(zoe), "allow": true, "rules": {"lush.role.budget_read"}},
		"reader by user": {"inp": budget_read({"id": "user:erin"}), "allow": true, "rules": {"lush.role.budget_read"}},
		"no role reads nothing": {"inp": budget_read(alice), "allow": false, "rules": {"lush.role.no_budget_read"}},
		"approve is not budget": {"inp": budget_read(sam), "allow": false, "rules": {"lush.role.no_budget_read"}},
		"top-up with the budget role": {"inp": budget_top_up(fay), "allow": true, "rules": {"lush.role.budget"}},
		"an auditor may not top up": {"inp": budget_top_up(zoe), "allow": false, "rules": {"lush.role.no_budget"}},
		"no role tops up nothing": {"inp": budget_top_up(alice), "allow": false, "rules": {"lush.role.no_budget"}},
	}
	d := decide(tc.inp)
	d.allow == tc.allow
	d.rules == sort(tc.rules)
	d.stub == false
	d.approval_required == false
}

test_budget_api_denial_messages if {
	messages(decide(budget_read(alice))) == {concat("", [
		"principal user:alice may not read budget usage: none of user:alice, group:engineering, group:everyone ",
		"holds the budget or audit role in lush.yaml roles (add one of them to roles: budget)",
	])}
	messages(decide(budget_top_up(zoe))) == {concat("", [
		"principal user:zoe may not top budgets up: none of user:zoe, group:auditors, group:everyone ",
		"holds the budget role in lush.yaml roles (add one of them to roles: budget)",
	])}
}

# A project without roles denies both.
test_budget_api_without_roles[note] if {
	some note, inp in {"read": budget_read(fay), "top-up": budget_top_up(fay)}
	d := decide_in(inp, object.remove(project, ["roles"]))
	d.allow == false
}

# A project policy may deny a top-up (deny wins), never allow one.
test_budget_api_project_deny if {
	d := decide_with(budget_top_up(fay), {"corp": {"deny": {"no top-ups on Fridays"}}})
	d.allow == false
	"no top-ups on Fridays" in messages(d)
}

test_budget_api_project_cannot_allow if {
	d := decide_with(budget_top_up(alice), {"corp": {"allow_rules": {"lush.role.budget"}, "allow": true}})
	denied_by(d, {"lush.role.no_budget"})
}

# The budget verdict concerns calls: the API's own decisions need none, and a malformed one
# still denies (as for every action).
test_budget_api_needs_principal if {
	denied_by(decide({"action": "budget/top-up"}), {"lush.input.invalid"})
}
