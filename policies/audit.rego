package lush.authz

# Project roles (lush.yaml roles:, compiled to data.lush.project.roles[role][principal]):
# audit/read, reading the decision log, needs the audit role.

has_project_role(role) if {
	some p in principals
	data.lush.project.roles[role][p] == true
}

# METADATA
# title: Principal may not read the decision log
# description: No principal of the caller's match set holds the audit role in lush.yaml roles.
# custom:
#   id: lush.role.no_audit
deny contains d if {
	input.action == "audit/read"
	principal_id
	not has_project_role("audit")
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"principal %s may not read the decision log: none of %s holds the audit role in lush.yaml roles (add one of them to roles: audit)",
			[principal_id, principal_list],
		),
	}
}

# METADATA
# title: Principal may read the decision log
# description: Some principal of the caller's match set holds the audit role in lush.yaml roles.
# custom:
#   id: lush.role.audit
allow_rules contains id if {
	input.action == "audit/read"
	has_project_role("audit")
	id := rego.metadata.rule().custom.id
}
