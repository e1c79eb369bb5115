package lush.authz_test

# Agent-scoped checks: lush.agent.unknown, lush.acl.no_agent_execute,
# lush.depth.exceeded and the allow-side lush.acl.agent_execute.

invoke(principal, agent) := {"action": "agent/invoke", "principal": principal, "agent": agent}

test_unknown_agent_on_every_agent_action[act] if {
	some act in data.lush.authz.agent_actions
	inp := call(read_call, {"action": act, "agent": "ghost", "tool": {"ref": "mcp://docs"}})
	d := decide(inp)
	"lush.agent.unknown" in rule_ids(d)
	not "lush.acl.no_agent_execute" in rule_ids(d)
	not "lush.capability.not_allowlisted" in rule_ids(d)
	"agent \"ghost\" is not defined in project \"quickstart\"" in messages(d)
}

# An agent entry that is not an object is not an agent.
test_agent_entry_must_be_object if {
	denied_by(decide(invoke(alice, "notobject")), {"lush.agent.unknown"})
}

test_agent_execute_via_match_set[note] if {
	some note, tc in {
		"group": {"principal": alice, "agent": "researcher"},
		"user id": {"principal": {"id": "user:carol"}, "agent": "editor"},
		"service account": {"principal": {"id": "serviceaccount:orchestrator"}, "agent": "researcher"},
		"group:everyone": {"principal": {"id": "user:anyone"}, "agent": "public"},
		"group principal": {"principal": {"id": "group:writers"}, "agent": "editor"},
	}
	d := decide(invoke(tc.principal, tc.agent))
	allowed(d, "allow", {"lush.acl.agent_execute"})
}

test_agent_execute_denied[note] if {
	some note, tc in {
		"stranger": {"principal": {"id": "user:bob"}, "agent": "researcher"},
		"other group": {"principal": {"id": "user:bob", "groups": ["group:ops"]}, "agent": "researcher"},
		"acl value not true": {"principal": {"id": "user:mallory"}, "agent": "editor"},
		"no acl at all": {"principal": alice, "agent": "broken-acl"},
	}
	proj := object.union(project, {"agents": {"broken-acl": {"tools": {}}}})
	d := decide_in(invoke(tc.principal, tc.agent), proj)
	denied_by(d, {"lush.acl.no_agent_execute"})
}

test_agent_execute_message if {
	d := decide(invoke({"id": "user:bob", "groups": ["group:ops", "group:eng"]}, "researcher"))
	messages(d) == {"principal user:bob may not execute agent \"researcher\": none of user:bob, group:eng, group:everyone, group:ops holds execute in the agent's acl"}
}

# An invalid principal is reported once, as invalid input, not as an ACL miss.
test_invalid_principal_not_reported_as_acl_miss if {
	denied_by(decide(invoke({"id": "bob"}, "researcher")), {"lush.input.invalid"})
}

test_depth_limit[note] if {
	some note, tc in {
		"at the limit by depth": {"patch": {"depth": 5}, "denied": false},
		"at the limit by chain": {"patch": {"chain": ["a", "b", "c", "d", "e"]}, "denied": false},
		"over by depth": {"patch": {"depth": 6}, "denied": true},
		"over by chain": {"patch": {"chain": ["a", "b", "c", "d", "e", "f"], "depth": 1}, "denied": true},
		"depth understated": {"patch": {"chain": ["a", "b", "c", "d", "e", "f"], "depth": 0}, "denied": true},
	}
	d := decide(call(read_call, tc.patch))
	member(rule_ids(d), "lush.depth.exceeded") == tc.denied
	d.allow != tc.denied
}

test_depth_message if {
	d := decide(call(read_call, {"depth": 7}))
	messages(d) == {"call chain depth 7 at agent \"researcher\" exceeds the project's max_depth of 5: shorten the chain of agent calls or raise authorization.max_call_depth in lush.yaml"}
}

test_depth_message_without_agent if {
	d := decide({"action": "agent/invoke", "principal": alice, "depth": 9})
	"call chain depth 9 at the agent exceeds the project's max_depth of 5: shorten the chain of agent calls or raise authorization.max_call_depth in lush.yaml" in messages(d)
}

test_max_depth_from_settings[note] if {
	some note, tc in {
		"default when absent": {"settings": {}, "max": 5},
		"default when not a number": {"settings": {"max_depth": "10"}, "max": 5},
		"set lower": {"settings": {"max_depth": 1}, "max": 1},
		"set higher": {"settings": {"max_depth": 10}, "max": 10},
	}
	proj := object.union(object.remove(project, ["settings"]), {"settings": tc.settings})
	data.lush.authz.max_depth == tc.max with data.lush.project as proj
	d := decide_in(call(read_call, {"depth": tc.max + 1}), proj)
	denied_by(d, {"lush.depth.exceeded"})
	decide_in(call(read_call, {"depth": tc.max}), proj).allow
}

# Depth applies to agent actions only, not to loops.
test_depth_not_checked_for_loops if {
	inp := object.union(valid_inputs["loop/read"], {"depth": 99})
	decide(inp).allow
}

test_agent_invoke_needs_no_tool_checks if {
	d := decide(invoke(alice, "researcher"))
	allowed(d, "allow", {"lush.acl.agent_execute"})
	d.access == "read"
	d.risk == "read"
}
