package lush.authz_test

# The decision object: shape, outcome precedence, sorting, fail-closed backstop.

test_allowed_read_call_full_decision if {
	decide(read_call) == {
		"allow": true,
		"outcome": "allow",
		"stub": false,
		"approval_required": false,
		"access": "read",
		"risk": "read",
		"reasons": [],
		"approvals": [],
		"rules": ["lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant"],
	}
}

test_denied_call_full_decision if {
	inp := call(read_call, {"principal": {"id": "user:bob"}, "tool": {"ref": fs, "name": "write_file"}})
	decide(inp) == {
		"allow": false,
		"outcome": "deny",
		"stub": false,
		"approval_required": false,
		"access": "write",
		"risk": "destructive",
		"reasons": [
			{
				"rule": "lush.acl.no_agent_execute",
				"message": "principal user:bob may not execute agent \"researcher\": none of user:bob, group:everyone holds execute in the agent's acl",
			},
			{
				"rule": "lush.capability.not_allowlisted",
				"message": sprintf("agent \"researcher\" may not use %s (write_file): its allowlist entry for %s is narrowed to list_directory, read_file", [fs, fs]),
			},
			{
				"rule": "lush.privilege.no_grant",
				"message": sprintf("principal user:bob holds no grant on %s (write_file): add a tool_grant with access \"write\" for one of user:bob, group:everyone", [fs]),
			},
		],
		"approvals": [],
		"rules": ["lush.acl.no_agent_execute", "lush.capability.not_allowlisted", "lush.privilege.no_grant"],
	}
}

# Garbage of every type still yields a complete, denying decision.
test_decision_defined_for_garbage_input[note] if {
	some note, inp in {
		"empty object": {},
		"string": "tools/call",
		"number": 42,
		"null": null,
		"false": false,
		"array": [read_call],
		"wrong types everywhere": {
			"action": ["tools/call"], "principal": "user:alice", "agent": 7,
			"chain": "a,b", "depth": "9", "tool": "fs", "arguments": null,
			"live_writes": "yes", "environment": 3, "loop": {},
		},
		"wrong nested types": {
			"action": "tools/call", "principal": {"id": ["user:a"], "groups": {"group:x": true}},
			"agent": "researcher", "tool": {"ref": 1, "name": {}, "access": 2, "risk": []},
		},
	}
	d := decide(inp)
	well_formed_denial(d)
	"lush.input.invalid" in rule_ids(d)
}

well_formed_denial(d) if {
	object.keys(d) == {"allow", "outcome", "stub", "approval_required", "access", "risk", "reasons", "approvals", "rules"}
	d.allow == false
	d.outcome == "deny"
	count(d.reasons) > 0
	d.rules == sort(rule_ids(d))
}

test_decision_defined_without_input if {
	d := data.lush.authz.decision with data.lush.project as project with data.lush.policies as {}
	denied_by(d, {"lush.input.invalid"})
	messages(d) == {"input must be a JSON object"}
}

# Absent or malformed project data means nothing is granted.
test_decision_defined_for_missing_project[note] if {
	some note, proj in {"empty": {}, "null": null, "array": [project], "string": "quickstart"}
	d := decide_in(read_call, proj)
	denied_by(d, {"lush.agent.unknown", "lush.privilege.no_grant"})
	sprintf("agent \"researcher\" is not defined in project %q", ["(unnamed)"]) in messages(d)
}

test_several_failures_reported_together if {
	inp := {
		"action": "tools/call", "principal": {"id": "user:zed"}, "agent": "researcher",
		"depth": 9, "tool": {"ref": "mcp://unknown", "name": "x"},
	}
	denied_by(decide(inp), {
		"lush.acl.no_agent_execute", "lush.capability.not_allowlisted",
		"lush.depth.exceeded", "lush.privilege.no_grant",
	})
}

test_reasons_sorted_by_rule_then_message if {
	d := decide({"action": "tools/call", "principal": {"id": "bad", "groups": "x"}, "tool": {"risk": "x"}})
	d.reasons == [
		{"rule": "lush.input.invalid", "message": "input.agent must be a non-empty string naming the agent (required for tools/call)"},
		{"rule": "lush.input.invalid", "message": "input.principal.groups must be an array of strings of the form group:<name>"},
		{"rule": "lush.input.invalid", "message": "input.principal.id must be a string of the form user:<id>, group:<name> or serviceaccount:<name>"},
		{"rule": "lush.input.invalid", "message": "input.tool.ref must be a non-empty string naming the tool or server (required for tools/call)"},
		{"rule": "lush.input.invalid", "message": "input.tool.risk must be one of \"read\", \"write\", \"network\", \"destructive\" when given"},
	]
	d.rules == ["lush.input.invalid"]
}

# Messages never repeat argument values.
test_messages_never_echo_arguments if {
	inp := call(write_call, {"principal": {"id": "user:nobody"}})
	d := decide(inp)
	count(d.reasons) > 0
	every m in messages(d) {
		not contains(m, "secret-argument-value")
	}
}

# Outcome precedence: deny > approval_required > stub > allow.
test_outcome_precedence[note] if {
	some note, tc in {
		"write stubbed and approval": {"inp": write_call, "outcome": "approval_required", "stub": true, "approval": true},
		"live destructive write": {"inp": call(write_call, {"live_writes": true}), "outcome": "approval_required", "stub": false, "approval": true},
		"stub only": {"inp": call(write_call, {"tool": {"ref": "tools/unclassified"}}), "outcome": "stub", "stub": true, "approval": false},
		"allow": {"inp": read_call, "outcome": "allow", "stub": false, "approval": false},
		"deny wins": {"inp": call(write_call, {"agent": "researcher"}), "outcome": "deny", "stub": false, "approval": false},
	}
	d := decide(tc.inp)
	d.outcome == tc.outcome
	d.stub == tc.stub
	d.approval_required == tc.approval
}

test_allowed_write_with_approval_full_decision if {
	decide(write_call) == {
		"allow": true,
		"outcome": "approval_required",
		"stub": true,
		"approval_required": true,
		"access": "write",
		"risk": "destructive",
		"reasons": [],
		"approvals": [{
			"rule": "lush.approval.risk",
			"message": sprintf("%s (write_file) is classed destructive risk, which needs approval in project \"quickstart\"", [fs]),
		}],
		"rules": [
			"lush.acl.agent_execute", "lush.approval.risk", "lush.capability.allowlist",
			"lush.privilege.tool_grant", "lush.writes.stub",
		],
	}
}

# The backstop: without the allow-side evidence an action requires, the
# decision denies even when no denial fired.
test_fallback_deny_without_evidence if {
	d := data.lush.authz.decision with input as read_call
		with data.lush.project as project
		with data.lush.policies as {}
		with data.lush.authz.allow_rules as {"lush.acl.agent_execute"}
		with data.lush.authz.fast_read as false # it checks the evidence itself (below)
	denied_by(d, {"lush.default.deny"})
	d.reasons == [{
		"rule": "lush.default.deny",
		"message": "no rule allows tools/call: it needs lush.capability.allowlist, lush.privilege.tool_grant",
	}]
}

# If the fast validity check and the problem list ever disagreed, the call
# would still be denied.
test_fallback_deny_when_input_not_ok if {
	d := data.lush.authz.decision with input as read_call
		with data.lush.project as project
		with data.lush.policies as {}
		with data.lush.authz.input_ok as false
	denied_by(d, {"lush.default.deny"})
	messages(d) == {"no rule allows the call: the input is not well formed"}
}

test_fallback_deny_for_unknown_action if {
	d := data.lush.authz.decision with input as {"action": "x", "principal": alice}
		with data.lush.project as project
		with data.lush.policies as {}
		with data.lush.authz.deny as set()
	denied_by(d, {"lush.default.deny"})
	messages(d) == {"no rule allows the call: the input is not well formed"}
}

test_required_rules_cover_every_action if {
	object.keys(data.lush.authz.required_rules) == data.lush.authz.known_actions
}

# The fast paths give exactly the decision of the full evaluation (the Go tests
# compare them on random inputs too).
test_fast_paths_match_full_evaluation[note] if {
	some note, inp in {
		"allow": read_call,
		"approval and stub": write_call,
		"stub": unclassified_write,
		"deny": call(read_call, {"principal": {"id": "user:bob"}}),
		"loop": valid_inputs["loop/read"],
	}
	full := data.lush.authz.decision with input as inp
		with data.lush.project as project
		with data.lush.policies as {}
		with data.lush.authz.nothing_denies as false
	decide(inp) == full
}

# fast_read decides the allowed read call, and no call that needs more than the
# three allow-side rules: the decision is the one the other branches give.
test_fast_read_decides_allowed_read if {
	data.lush.authz.fast_read with input as read_call
		with data.lush.project as project
		with data.lush.index as index
		with data.lush.policies as {}
	decide(read_call) == data.lush.authz.decision with input as read_call
		with data.lush.project as project
		with data.lush.index as index
		with data.lush.policies as {}
		with data.lush.authz.fast_read as false
}

test_fast_read_not_for_other_calls[note] if {
	some note, inp in {
		"write hint": call(read_call, {"tool": {"ref": fs, "name": "read_file", "access": "write"}}),
		"write tool": call(read_call, {"tool": {"ref": fs, "name": "write_file"}}),
		"not allowlisted": call(read_call, {"tool": {"ref": fs, "name": "delete_file"}}),
		"no execute": call(read_call, {"principal": {"id": "user:bob"}}),
		"too deep": call(read_call, {"depth": 6}),
		"schema verdict": call(read_call, {"tool": {"ref": fs, "name": "read_file", "arguments_valid": false}}),
		"refused": call(read_call, {"tool": {"ref": fs, "name": "read_file", "refusal": "no"}}),
		"rate limited": call(read_call, {"rate_limit": {"exceeded": true}}),
		"budget exhausted": call(read_call, {"budget": {"exhausted": true}}),
		"approved": call(read_call, {"approval": {"status": "approved", "id": "a1", "approved_by": "user:sam"}}),
		"tools/list": call(read_call, {"action": "tools/list"}),
		"malformed groups": call(read_call, {"principal": {"id": "user:alice", "groups": ["ops"]}}),
	}
	not data.lush.authz.fast_read with input as inp
		with data.lush.project as project
		with data.lush.index as index
		with data.lush.policies as {}
}

test_fast_read_not_with_project_entries[note] if {
	some note, policies in {
		"deny": {"corp": {"deny": {"no"}}},
		"approval": {"corp": {"approval": {"ask"}}},
		"stub": {"corp": {"stub": {"stub it"}}},
	}
	not data.lush.authz.fast_read with input as read_call
		with data.lush.project as project
		with data.lush.index as index
		with data.lush.policies as policies
}
