package lush.authz

# Writes and approvals of tools/call. They only take effect when the call is
# allowed (see decision.rego): a denial always wins.

approval_risks := r if {
	r := data.lush.project.settings.approval_risks
	is_array(r)
} else := ["destructive"]

# METADATA
# title: Write stubbed
# description: |
#   An allowed tools/call that needs write access while live writes are off for
#   the tool is stubbed: the enforcement point does not execute it.
# custom:
#   id: lush.writes.stub
stub contains s if {
	input.action == "tools/call"
	effective_access == "write"
	not live_writes
	s := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf("%s needs write access and live writes are off for it: the call is stubbed, not executed", [tool_label]),
	}
}

# METADATA
# title: Live write
# description: |
#   An allowed tools/call that needs write access runs for real: live writes are
#   on for the tool and no project policy forces a stub.
# custom:
#   id: lush.writes.live
allow_rules contains id if {
	input.action == "tools/call"
	effective_access == "write"
	live_writes
	count(project_stubs) == 0
	id := rego.metadata.rule().custom.id
}

# METADATA
# title: Risk needs approval
# description: |
#   An allowed tools/call whose effective risk is listed in the project's
#   settings.approval_risks (["destructive"] when not set) needs a human approval.
# custom:
#   id: lush.approval.risk
approval contains a if {
	input.action == "tools/call"
	effective_risk in approval_risks
	a := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf("%s is classed %s risk, which needs approval in project %q", [tool_label, effective_risk, project_name]),
	}
}
