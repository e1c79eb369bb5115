package lush.authz_test

# Tasks: tasks/read and tasks/cancel of a task a tools/call created are allowed
# for the principal who created it (lush.task.owner), at the agent it was
# created at, while they may execute the agent; or for a holder of the tasks
# role. Everyone else is denied (lush.task.not_owner).

bob := {"id": "user:bob", "groups": ["group:engineering"]}

task_op(action, principal, creator) := {
	"action": action,
	"principal": principal,
	"agent": "researcher",
	"chain": ["researcher"],
	"depth": 1,
	"tool": {"ref": "mcp://docs", "name": ""},
	"task": {"id": "task-1", "principal": creator, "agent": "researcher", "decision_id": "0193a"},
}

task_rules := {"lush.acl.agent_execute", "lush.task.owner"}

with_tasks_role := object.union(project, {"roles": {"tasks": {"group:ops": true}}})

test_task_decisions[note] if {
	some note, tc in {
		"creator reads": {"inp": task_op("tasks/read", alice, "user:alice"), "allow": true, "rules": task_rules},
		"creator cancels": {"inp": task_op("tasks/cancel", alice, "user:alice"), "allow": true, "rules": task_rules},
		"another principal reads": {"inp": task_op("tasks/read", bob, "user:alice"), "allow": false, "rules": {"lush.task.not_owner"}},
		"another principal cancels": {"inp": task_op("tasks/cancel", bob, "user:alice"), "allow": false, "rules": {"lush.task.not_owner"}},
		"unknown task": {"inp": task_op("tasks/read", alice, ""), "allow": false, "rules": {"lush.task.not_owner"}},
		"a group is not its members": {"inp": task_op("tasks/read", alice, "group:engineering"), "allow": false, "rules": {"lush.task.not_owner"}},
		"created at another agent": {
			"inp": object.union(task_op("tasks/read", alice, "user:alice"), {"task": {"agent": "public"}}),
			"allow": false, "rules": {"lush.task.not_owner"},
		},
		"creator without execute": {"inp": task_op("tasks/read", carol, "user:carol"), "allow": false, "rules": {"lush.acl.no_agent_execute"}},
	}
	d := decide(tc.inp)
	d.allow == tc.allow
	d.rules == sort(tc.rules)
	rule_ids(d) == {r | some r in tc.rules; not tc.allow}
	d.stub == false
	d.approval_required == false
}

# A holder of the tasks role may operate on the tasks of others, at agents they may execute.
test_task_role[note] if {
	some note, tc in {
		"role holder reads": {"p": {"id": "user:olga", "groups": ["group:ops", "group:engineering"]}, "allow": true},
		"role holder without execute": {"p": {"id": "user:olga", "groups": ["group:ops"]}, "allow": false},
		"no role": {"p": bob, "allow": false},
	}
	d := decide_in(task_op("tasks/cancel", tc.p, "user:alice"), with_tasks_role)
	d.allow == tc.allow
}

test_task_denial_message if {
	messages(decide(task_op("tasks/cancel", bob, "user:alice"))) == {concat("", [
		"principal user:bob may not cancel task \"task-1\" at agent \"researcher\": the task is unknown here, ",
		"or another principal created it and none of user:bob, group:engineering, group:everyone holds the tasks role in lush.yaml roles",
	])}
}

# The task must be well formed; a malformed one denies with the field named.
test_task_input[note] if {
	some note, inp in {
		"no task": object.remove(task_op("tasks/read", alice, "user:alice"), ["task"]),
		"task id a number": object.union(task_op("tasks/read", alice, "user:alice"), {"task": {"id": 7}}),
		"task a string": object.union(object.remove(task_op("tasks/read", alice, "user:alice"), ["task"]), {"task": "task-1"}),
		"no creator": object.union(object.remove(task_op("tasks/read", alice, "user:alice"), ["task"]), {"task": {"id": "t", "agent": "researcher", "decision_id": "d"}}),
	}
	d := decide(inp)
	d.allow == false
	"lush.input.invalid" in rule_ids(d)
	some m in messages(d)
	contains(m, "input.task must be an object")
}

test_task_depth_exceeded if {
	d := decide(object.union(task_op("tasks/read", alice, "user:alice"), {"depth": 9}))
	d.allow == false
	"lush.depth.exceeded" in rule_ids(d)
}
