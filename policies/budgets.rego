package lush.authz

# The budgets API: budget/read (usage of every budget) needs the budget or the
# audit role; budget/top-up (adding units to a budget's current period) needs
# the budget role. Roles come from lush.yaml roles:, compiled to
# data.lush.project.roles[role][principal]. Every top-up is itself a decision
# in the log, with who asked, for how much and why in input.arguments.

budget_reader if has_project_role("budget")

budget_reader if has_project_role("audit")

# METADATA
# title: Principal may read budget usage
# description: Some principal of the caller's match set holds the budget or the audit role in lush.yaml roles.
# custom:
#   id: lush.role.budget_read
allow_rules contains id if {
	input.action == "budget/read"
	budget_reader
	id := rego.metadata.rule().custom.id
}

# METADATA
# title: Principal may not read budget usage
# description: No principal of the caller's match set holds the budget or the audit role in lush.yaml roles.
# custom:
#   id: lush.role.no_budget_read
deny contains d if {
	input.action == "budget/read"
	principal_id
	not budget_reader
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"principal %s may not read budget usage: none of %s holds the budget or audit role in lush.yaml roles (add one of them to roles: budget)",
			[principal_id, principal_list],
		),
	}
}

# METADATA
# title: Principal may top budgets up
# description: Some principal of the caller's match set holds the budget role in lush.yaml roles.
# custom:
#   id: lush.role.budget
allow_rules contains id if {
	input.action == "budget/top-up"
	has_project_role("budget")
	id := rego.metadata.rule().custom.id
}

# METADATA
# title: Principal may not top budgets up
# description: No principal of the caller's match set holds the budget role in lush.yaml roles.
# custom:
#   id: lush.role.no_budget
deny contains d if {
	input.action == "budget/top-up"
	principal_id
	not has_project_role("budget")
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"principal %s may not top budgets up: none of %s holds the budget role in lush.yaml roles (add one of them to roles: budget)",
			[principal_id, principal_list],
		),
	}
}
