package lush.authz_test

# Writes (lush.writes.stub, lush.writes.live) and approvals (lush.approval.risk).

shell_call := call(write_call, {"tool": {"ref": "tools/shell"}})

unclassified_write := call(write_call, {"tool": {"ref": "tools/unclassified"}})

test_write_stubbed_unless_live[note] if {
	some note, tc in {
		"live_writes absent": {"patch": {}, "stub": true},
		"live_writes false": {"patch": {"live_writes": false}, "stub": true},
		"live_writes true": {"patch": {"live_writes": true}, "stub": false},
	}
	d := decide(call(unclassified_write, tc.patch))
	d.allow
	d.stub == tc.stub
	member(d.rules, "lush.writes.stub") == tc.stub
	member(d.rules, "lush.writes.live") == not_(tc.stub)
}

not_(b) := false if {
	b
} else := true

test_stub_full_decision if {
	decide(unclassified_write) == {
		"allow": true,
		"outcome": "stub",
		"stub": true,
		"approval_required": false,
		"access": "write",
		"risk": "write",
		"reasons": [],
		"approvals": [],
		"rules": ["lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant", "lush.writes.stub"],
	}
}

test_stub_message if {
	value("stub", unclassified_write) == {{
		"rule": "lush.writes.stub",
		"message": "tools/unclassified needs write access and live writes are off for it: the call is stubbed, not executed",
	}}
}

test_reads_are_never_stubbed if {
	d := decide(call(read_call, {"live_writes": false}))
	d.stub == false
	not "lush.writes.stub" in d.rules
	not "lush.writes.live" in d.rules
}

# Only tools/call executes anything: tools/list of a write tool is not stubbed.
test_only_tools_call_is_stubbed if {
	d := decide(call(unclassified_write, {"action": "tools/list"}))
	allowed(d, "allow", call_rules)
}

test_denied_write_is_not_stubbed if {
	d := decide(call(unclassified_write, {"principal": {"id": "user:nobody"}}))
	d.stub == false
	not "lush.writes.stub" in d.rules
}

test_approval_for_risk[note] if {
	some note, tc in {
		"destructive by default": {"inp": shell_call, "settings": {}, "approval": true},
		"read not by default": {"inp": read_call, "settings": {}, "approval": false},
		"network when listed": {"inp": call(write_call, {"tool": {"ref": "mcp://github", "name": "create_issue"}}), "settings": {"approval_risks": ["network"]}, "approval": true},
		"destructive not when unlisted": {"inp": shell_call, "settings": {"approval_risks": ["network"]}, "approval": false},
		"none when empty": {"inp": shell_call, "settings": {"approval_risks": []}, "approval": false},
		"default when malformed": {"inp": shell_call, "settings": {"approval_risks": "network"}, "approval": true},
		"unknown tool with destructive hint": {"inp": call(write_call, {"tool": {"ref": "tools/unclassified", "risk": "destructive"}}), "settings": {}, "approval": true},
	}
	proj := object.union(object.remove(project, ["settings"]), {"settings": tc.settings})
	d := decide_in(tc.inp, proj)
	d.allow
	d.approval_required == tc.approval
	member(d.rules, "lush.approval.risk") == tc.approval
	d.outcome == "approval_required" == tc.approval
}

test_approval_message if {
	d := decide(call(shell_call, {"live_writes": true}))
	d.approvals == [{
		"rule": "lush.approval.risk",
		"message": "tools/shell is classed destructive risk, which needs approval in project \"quickstart\"",
	}]
	d.rules == ["lush.acl.agent_execute", "lush.approval.risk", "lush.capability.allowlist", "lush.privilege.tool_grant", "lush.writes.live"]
}

# Approvals are for tools/call only: listing a destructive tool needs none.
test_no_approval_for_tools_list if {
	d := decide(call(shell_call, {"action": "tools/list"}))
	d.allow
	d.approval_required == false
	d.approvals == []
}

test_denied_call_needs_no_approval if {
	d := decide(call(shell_call, {"agent": "researcher"}))
	d.allow == false
	d.approval_required == false
	d.approvals == []
	not "lush.approval.risk" in d.rules
}

# approval_required and stubbed are only ever true for allowed calls.
test_denied_call_has_no_approval_nor_stub_rules if {
	denied := call(shell_call, {"agent": "researcher"})
	count(value("approval", denied)) == 1
	count(value("stub", denied)) == 1
	value("approval_required", denied) == false
	value("stubbed", denied) == false
}
