package lush.authz

# Approvals: calls that wait for a person, and the approvals API.
#
# A call the policy sends for approval (outcome approval_required) waits at the
# MCP gateway. When a person approves it, the gateway decides the same call
# again with input.approval:
#
#   {"id": "<the approval_required decision id>", "status": "approved", "approved_by": "user:erin"}
#
# and the call then needs no approval (lush.approval.granted): it runs, still
# subject to stubs and to every denial. Project policies can deny an approved
# call, for instance when approved_by is not a principal they trust. The
# gateway sets input.approval only for the exact call that was approved (its
# tool and arguments digest); a client cannot.
#
# approval/read (listing and reading approvals) needs the approve or audit
# role; approval/decide (approving or denying one) needs the approve role, and
# nobody decides an approval of their own call: input.arguments.requester is
# the principal whose call waits.

approval_granted if {
	input.approval.status == "approved"
	is_string(input.approval.id)
	input.approval.id != ""
	is_string(input.approval.approved_by)
	input.approval.approved_by != ""
}

# METADATA
# title: Approved by a person
# description: |
#   A person with the approve role approved this exact call (input.approval):
#   the approvals the policy would ask for are satisfied.
# custom:
#   id: lush.approval.granted
allow_rules contains id if {
	input.action == "tools/call"
	approval_granted
	id := rego.metadata.rule().custom.id
}

# METADATA
# title: Principal may decide approvals
# description: Some principal of the caller's match set holds the approve role in lush.yaml roles.
# custom:
#   id: lush.role.approve
allow_rules contains id if {
	input.action == "approval/decide"
	has_project_role("approve")
	id := rego.metadata.rule().custom.id
}

# METADATA
# title: Principal may not decide approvals
# description: No principal of the caller's match set holds the approve role in lush.yaml roles.
# custom:
#   id: lush.role.no_approve
deny contains d if {
	input.action == "approval/decide"
	principal_id
	not has_project_role("approve")
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"principal %s may not approve or deny calls: none of %s holds the approve role in lush.yaml roles (add one of them to roles: approve)",
			[principal_id, principal_list],
		),
	}
}

self_approval if {
	input.action == "approval/decide"
	principal_id
	input.arguments.requester == principal_id
}

# METADATA
# title: Own call
# description: Nobody approves or denies a call of their own (input.arguments.requester).
# custom:
#   id: lush.approval.self
deny contains d if {
	self_approval
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf("principal %s made this call and may not decide its own approval: another holder of the approve role must", [principal_id]),
	}
}

# METADATA
# title: Principal may read approvals
# description: Some principal of the caller's match set holds the approve or the audit role in lush.yaml roles.
# custom:
#   id: lush.role.approval_read
allow_rules contains id if {
	input.action == "approval/read"
	approval_reader
	id := rego.metadata.rule().custom.id
}

approval_reader if has_project_role("approve")

approval_reader if has_project_role("audit")

# METADATA
# title: Principal may not read approvals
# description: No principal of the caller's match set holds the approve or the audit role in lush.yaml roles.
# custom:
#   id: lush.role.no_approval_read
deny contains d if {
	input.action == "approval/read"
	principal_id
	not approval_reader
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"principal %s may not read approvals: none of %s holds the approve or audit role in lush.yaml roles",
			[principal_id, principal_list],
		),
	}
}
