package lush.authz_test

# Loop checks: lush.loop.unknown, lush.acl.no_loop_execute, lush.acl.no_loop_read
# and the allow-side lush.acl.loop_execute and lush.acl.loop_read.

ops := {"id": "user:olga", "groups": ["group:ops"]}

test_loop_decisions[note] if {
	some note, tc in {
		"trigger with execute": {"inp": loop_call("loop/trigger", "daily-digest", ops), "allow": true, "rules": {"lush.acl.loop_execute"}},
		"trigger with read only": {"inp": loop_call("loop/trigger", "daily-digest", alice), "allow": false, "rules": {"lush.acl.no_loop_execute"}},
		"read via group:everyone read": {"inp": loop_call("loop/read", "daily-digest", alice), "allow": true, "rules": {"lush.acl.loop_read"}},
		"read via execute": {"inp": loop_call("loop/read", "ops-only", ops), "allow": true, "rules": {"lush.acl.loop_read"}},
		"read without read nor execute": {"inp": loop_call("loop/read", "ops-only", alice), "allow": false, "rules": {"lush.acl.no_loop_read"}},
		"unknown loop trigger": {"inp": loop_call("loop/trigger", "ghost", ops), "allow": false, "rules": {"lush.loop.unknown"}},
		"unknown loop read": {"inp": loop_call("loop/read", "ghost", ops), "allow": false, "rules": {"lush.loop.unknown"}},
		"loop entry not an object": {"inp": loop_call("loop/read", "notobject", ops), "allow": false, "rules": {"lush.loop.unknown"}},
	}
	d := decide(tc.inp)
	d.allow == tc.allow
	d.rules == sort(tc.rules)
	d.access == "read"
	d.risk == "read"
}

test_loop_messages[note] if {
	some note, tc in {
		"unknown": {
			"inp": loop_call("loop/trigger", "ghost", ops),
			"msg": "loop \"ghost\" is not defined in project \"quickstart\"",
		},
		"no execute": {
			"inp": loop_call("loop/trigger", "daily-digest", alice),
			"msg": "principal user:alice may not trigger loop \"daily-digest\": none of user:alice, group:engineering, group:everyone holds execute in the loop's acl",
		},
		"no read": {
			"inp": loop_call("loop/read", "ops-only", alice),
			"msg": "principal user:alice may not read loop \"ops-only\": none of user:alice, group:engineering, group:everyone holds read or execute in the loop's acl",
		},
	}
	messages(decide(tc.inp)) == {tc.msg}
}

# Loop actions ignore agent checks entirely.
test_loop_ignores_agent_fields if {
	inp := object.union(loop_call("loop/read", "daily-digest", alice), {"agent": "ghost", "depth": 50})
	allowed(decide(inp), "allow", {"lush.acl.loop_read"})
}

test_loop_acl_value_must_be_true if {
	proj := object.union(project, {"loops": {"daily-digest": {"acl": {"execute": {"group:ops": "true"}}}}})
	denied_by(decide_in(loop_call("loop/trigger", "daily-digest", ops), proj), {"lush.acl.no_loop_execute"})
}

test_loop_with_invalid_principal if {
	denied_by(decide(loop_call("loop/read", "daily-digest", {"id": "olga"})), {"lush.input.invalid"})
}
