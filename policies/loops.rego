package lush.authz

# Loop checks: loop/trigger needs execute on the loop's ACL; loop/read needs
# read or execute.

loop_known if is_object(data.lush.project.loops[loop_name])

has_loop_role(role) if {
	some p in principals
	data.lush.project.loops[loop_name].acl[role][p] == true
}

can_read_loop if has_loop_role("read")

can_read_loop if has_loop_role("execute")

# METADATA
# title: Unknown loop
# description: The loop named by the input is not defined in the project.
# custom:
#   id: lush.loop.unknown
deny contains d if {
	loop_actions[action]
	loop_name
	not loop_known
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf("loop %q is not defined in project %q", [loop_name, project_name]),
	}
}

# METADATA
# title: Principal may not trigger the loop
# description: No principal of the caller's match set holds execute in the loop's ACL.
# custom:
#   id: lush.acl.no_loop_execute
deny contains d if {
	input.action == "loop/trigger"
	loop_known
	principal_id
	not has_loop_role("execute")
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"principal %s may not trigger loop %q: none of %s holds execute in the loop's acl",
			[principal_id, loop_name, principal_list],
		),
	}
}

# METADATA
# title: Principal may not read the loop
# description: No principal of the caller's match set holds read or execute in the loop's ACL.
# custom:
#   id: lush.acl.no_loop_read
deny contains d if {
	input.action == "loop/read"
	loop_known
	principal_id
	not can_read_loop
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"principal %s may not read loop %q: none of %s holds read or execute in the loop's acl",
			[principal_id, loop_name, principal_list],
		),
	}
}

# METADATA
# title: Principal may trigger the loop
# description: Some principal of the caller's match set holds execute in the loop's ACL.
# custom:
#   id: lush.acl.loop_execute
allow_rules contains id if {
	input.action == "loop/trigger"
	loop_known
	has_loop_role("execute")
	id := rego.metadata.rule().custom.id
}

# METADATA
# title: Principal may read the loop
# description: Some principal of the caller's match set holds read or execute in the loop's ACL.
# custom:
#   id: lush.acl.loop_read
allow_rules contains id if {
	input.action == "loop/read"
	loop_known
	can_read_loop
	id := rego.metadata.rule().custom.id
}
