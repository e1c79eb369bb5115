package lush.authz_test

# Project policies (data.lush.policies.<name>): normalization of deny, approval
# and stub values, and the guarantee that they can only add restrictions.
# The documents of project packages are mocked here; the Go tests compile real
# project modules against the library.

test_project_deny_normalization[note] if {
	some note, tc in {
		"string": {"deny": {"no writes on fridays"}, "want": {{"rule": "lush.policies.corp", "message": "no writes on fridays"}}},
		"object with rule": {"deny": {{"message": "m", "rule": "corp.fridays"}}, "want": {{"rule": "corp.fridays", "message": "m"}}},
		"object without rule": {"deny": {{"message": "m"}}, "want": {{"rule": "lush.policies.corp", "message": "m"}}},
		"object with empty rule": {"deny": {{"message": "m", "rule": ""}}, "want": {{"rule": "lush.policies.corp", "message": "m"}}},
		"object with non-string rule": {"deny": {{"message": "m", "rule": 7}}, "want": {{"rule": "lush.policies.corp", "message": "m"}}},
		"array": {"deny": ["a", "b"], "want": {{"rule": "lush.policies.corp", "message": "a"}, {"rule": "lush.policies.corp", "message": "b"}}},
		"single object": {"deny": {"message": "m", "rule": "corp.x"}, "want": {{"rule": "corp.x", "message": "m"}}},
		"single string": {"deny": "m", "want": {{"rule": "lush.policies.corp", "message": "m"}}},
		"boolean true": {"deny": true, "want": {{"rule": "lush.policies.corp", "message": "project policy lush.policies.corp denies this call; its deny rule gave a boolean where a message was expected"}}},
		"number": {"deny": {1}, "want": {{"rule": "lush.policies.corp", "message": "project policy lush.policies.corp denies this call; its deny rule gave a number where a message was expected"}}},
		"empty string": {"deny": {""}, "want": {{"rule": "lush.policies.corp", "message": "project policy lush.policies.corp denies this call; its deny rule gave an empty string where a message was expected"}}},
		"null": {"deny": null, "want": {{"rule": "lush.policies.corp", "message": "project policy lush.policies.corp denies this call; its deny rule gave null where a message was expected"}}},
		"object without message": {"deny": {{"reason": "x", "rule": "corp.y"}}, "want": {{"rule": "corp.y", "message": "project policy lush.policies.corp denies this call; its deny rule gave an object without a string message where a message was expected"}}},
		"nested array": {"deny": {["x"]}, "want": {{"rule": "lush.policies.corp", "message": "project policy lush.policies.corp denies this call; its deny rule gave an array where a message was expected"}}},
		"nested set": {"deny": {{"x"}}, "want": {{"rule": "lush.policies.corp", "message": "project policy lush.policies.corp denies this call; its deny rule gave a set where a message was expected"}}},
		"non-empty object of rules": {"deny": {"sub": true}, "want": {{"rule": "lush.policies.corp", "message": "project policy lush.policies.corp denies this call; its deny rule gave an object without a string message where a message was expected"}}},
	}
	project_denials(read_call, {"corp": {"deny": tc.deny}}) == tc.want
	d := decide_with(read_call, {"corp": {"deny": tc.deny}})
	d.allow == false
	d.outcome == "deny"
	d.reasons == sort_entries(tc.want)
}

project_denials(inp, policies) := v if {
	v := data.lush.authz.project_denials with input as inp
		with data.lush.project as project
		with data.lush.policies as policies
}

sort_entries(s) := [{"rule": t[0], "message": t[1]} | some t in sort({[e.rule, e.message] | some e in s})]

test_project_deny_nothing[note] if {
	some note, v in {"false": false, "empty set": set(), "empty array": [], "empty object": {}}
	project_denials(read_call, {"corp": {"deny": v}}) == set()
	allowed(decide_with(read_call, {"corp": {"deny": v}}), "allow", call_rules)
}

# Only deny, approval and stub are read: nothing else a project defines allows.
test_project_cannot_allow_a_denied_call[note] if {
	some note, policies in {
		"allow true": {"evil": {"allow": true}},
		"fake decision": {"evil": {"decision": {"allow": true, "outcome": "allow", "reasons": []}}},
		"fake rules": {"evil": {"rules": ["lush.acl.agent_execute"], "allow_rules": {"lush.acl.agent_execute"}}},
		"empty deny": {"evil": {"deny": set()}},
		"false deny": {"evil": {"deny": false}},
		"stub and approval": {"evil": {"stub": {"x"}, "approval": {"y"}}},
		"several packages": {"a": {"allow": true}, "b": {"deny": []}},
	}
	denied := call(read_call, {"principal": {"id": "user:bob"}})
	d := decide_with(denied, policies)
	denied_by(d, {"lush.acl.no_agent_execute", "lush.privilege.no_grant"})
}

test_project_deny_adds_to_base_denials if {
	denied := call(read_call, {"principal": {"id": "user:bob"}})
	d := decide_with(denied, {"corp": {"deny": {"corp says no"}}})
	denied_by(d, {"lush.acl.no_agent_execute", "lush.privilege.no_grant", "lush.policies.corp"})
}

test_project_deny_denies_an_allowed_call if {
	d := decide_with(read_call, {"corp": {"deny": {{"message": "not today", "rule": "corp.today"}}}})
	d == {
		"allow": false,
		"outcome": "deny",
		"stub": false,
		"approval_required": false,
		"access": "read",
		"risk": "read",
		"reasons": [{"rule": "corp.today", "message": "not today"}],
		"approvals": [],
		"rules": ["corp.today"],
	}
}

test_test_packages_are_ignored if {
	policies := {"corp_test": {"deny": true, "approval": true, "stub": true}}
	allowed(decide_with(read_call, policies), "allow", call_rules)
	allowed(decide_with(write_call, policies), "approval_required", {
		"lush.acl.agent_execute", "lush.approval.risk", "lush.capability.allowlist",
		"lush.privilege.tool_grant", "lush.writes.stub",
	})
}

test_project_approval if {
	d := decide_with(read_call, {"corp": {"approval": {"ask a human"}}})
	d.allow
	d.outcome == "approval_required"
	d.approval_required
	d.approvals == [{"rule": "lush.policies.corp", "message": "ask a human"}]
	d.rules == ["lush.acl.agent_execute", "lush.capability.allowlist", "lush.policies.corp", "lush.privilege.tool_grant"]
}

test_project_approval_boolean if {
	d := decide_with(read_call, {"corp": {"approval": true}})
	d.approvals == [{"rule": "lush.policies.corp", "message": "project policy lush.policies.corp requires approval for this call; its approval rule gave a boolean where a message was expected"}]
}

# Approvals apply to every allowed action, not only tools/call.
test_project_approval_on_loop if {
	d := decide_with(valid_inputs["loop/trigger"], {"corp": {"approval": {"loops need a human"}}})
	d.outcome == "approval_required"
}

test_project_approval_on_denied_call if {
	d := decide_with(call(read_call, {"principal": {"id": "user:bob"}}), {"corp": {"approval": {"ask"}}})
	denied_by(d, {"lush.acl.no_agent_execute", "lush.privilege.no_grant"})
}

test_project_stub_forces_stub_of_live_write if {
	live := call(unclassified_write, {"live_writes": true})
	allowed(decide(live), "allow", call_rules | {"lush.writes.live"})
	d := decide_with(live, {"corp": {"stub": {{"message": "dry run week", "rule": "corp.dry_run"}}}})
	allowed(d, "stub", call_rules | {"corp.dry_run"})
	d.stub
}

test_project_stub_of_read_call if {
	d := decide_with(read_call, {"corp": {"stub": true}})
	allowed(d, "stub", call_rules | {"lush.policies.corp"})
}

# Stubs mean nothing outside tools/call.
test_project_stub_ignored_outside_tools_call if {
	d := decide_with(valid_inputs["loop/read"], {"corp": {"stub": {"s"}}})
	allowed(d, "allow", {"lush.acl.loop_read"})
}

test_project_stub_on_denied_call if {
	d := decide_with(call(unclassified_write, {"agent": "researcher"}), {"corp": {"stub": {"s"}}})
	d.stub == false
	d.outcome == "deny"
}

test_project_entries_from_several_packages if {
	policies := {
		"a": {"deny": {"from a"}},
		"b": {"deny": true},
		"c": {"approval": {"from c"}},
	}
	d := decide_with(read_call, policies)
	rule_ids(d) == {"lush.policies.a", "lush.policies.b"}
}
