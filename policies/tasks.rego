package lush.authz

# Tasks (the MCP tasks extension): a tools/call an upstream answers with a task
# is decided as the call it is; each later operation on that task is decided
# again, as tasks/read (tasks/get, tasks/result, tasks/list) or tasks/cancel
# (tasks/cancel, tasks/update), over input.task: the task as the gateway
# recorded it when the call that created it was allowed. The principal who
# created a task may operate on it at the agent it was created at, while they
# may still execute the agent; so may a holder of the tasks role in lush.yaml
# roles. Anyone else is denied, and the gateway answers them as it answers an
# unknown task.

task_owner if {
	p := input.task.principal
	p != ""
	p == principal_id
}

task_access if task_owner

task_access if has_project_role("tasks")

# METADATA
# title: Principal may operate on the task
# description: |
#   The caller created the task (its principal is the one recorded with it), or
#   some principal of the caller's match set holds the tasks role in lush.yaml
#   roles; and the task was created at this agent.
# custom:
#   id: lush.task.owner
allow_rules contains id if {
	task_actions[input.action]
	task_access
	input.task.agent == input.agent
	id := rego.metadata.rule().custom.id
}

# METADATA
# title: Principal may not operate on the task
# description: |
#   The task is unknown, was created by another principal and the caller holds
#   no tasks role, or was created at another agent.
# custom:
#   id: lush.task.not_owner
deny contains d if {
	task_actions[input.action]
	principal_id
	task_ok
	not task_permitted
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"principal %s may not %s task %q at %s: the task is unknown here, or another principal created it and none of %s holds the tasks role in lush.yaml roles",
			[principal_id, task_verb, input.task.id, agent_label, principal_list],
		),
	}
}

task_permitted if {
	task_access
	input.task.agent == input.agent
}

task_verb := "cancel" if input.action == "tasks/cancel"

else := "read"
