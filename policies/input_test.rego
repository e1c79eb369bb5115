package lush.authz_test

# Input validation: lush.input.invalid and lush.action.unknown.

valid_inputs := {
	"tools/call": read_call,
	"tools/list": call(read_call, {"action": "tools/list"}),
	"resources/list": call(read_call, {"action": "resources/list", "tool": {"ref": "mcp://docs"}}),
	"resources/read": call(read_call, {"action": "resources/read", "tool": {"ref": "mcp://docs"}}),
	"prompts/list": call(read_call, {"action": "prompts/list", "tool": {"ref": "mcp://docs"}}),
	"prompts/get": call(read_call, {"action": "prompts/get", "tool": {"ref": "mcp://docs"}}),
	"agent/invoke": {"action": "agent/invoke", "principal": alice, "agent": "researcher", "chain": ["orchestrator"], "depth": 1},
	"loop/trigger": loop_call("loop/trigger", "daily-digest", {"id": "user:olga", "groups": ["group:ops"]}),
	"loop/read": loop_call("loop/read", "daily-digest", alice),
	"audit/read": audit_read(zoe),
	"approval/read": approval_read(sam),
	"approval/decide": approval_decide(sam, "user:alice"),
	"budget/read": budget_read(fay),
	"budget/top-up": budget_top_up(fay),
	"sampling/createMessage": server_request("sampling/createMessage", allowed_call),
	"elicitation/create": server_request("elicitation/create", allowed_call),
	"roots/list": server_request("roots/list", allowed_call),
}

# Every action has a valid input that passes validation and is allowed.
test_valid_input_per_action[act] if {
	some act, inp in valid_inputs
	value("input_problems", inp) == set()
	decide(inp).allow == true
}

test_valid_inputs_cover_every_action if {
	object.keys(valid_inputs) == data.lush.authz.known_actions
}

# Optional fields that are absent or null (or "" for tool hints) are fine.
test_optional_fields_may_be_absent_or_null[note] if {
	some note, patch in {
		"no groups": {"principal": {"id": "user:alice"}},
		"null groups": {"principal": {"id": "user:alice", "groups": null}},
		"null chain and depth": {"chain": null, "depth": null},
		"null live_writes": {"live_writes": null},
		"empty hints": {"tool": {"ref": fs, "name": "read_file", "access": "", "risk": ""}},
		"null hints": {"tool": {"ref": fs, "name": "read_file", "access": null, "risk": null}},
		"null name": {"tool": {"ref": "tools/clock", "name": null}},
	}
	value("input_problems", call(read_call, patch)) == set()
}

test_non_object_input[note] if {
	some note, inp in {"string": "x", "number": 1, "array": [], "null": null, "boolean": true}
	value("input_problems", inp) == {"input must be a JSON object"}
}

principal_id_message := "input.principal.id must be a string of the form user:<id>, group:<name> or serviceaccount:<name>"

test_principal_id_forms[id] if {
	some id in ["user:alice", "group:ops", "serviceaccount:digest-bot", "user:a:b", "user:alice@example.com"]
	value("principal_id", call(read_call, {"principal": {"id": id}})) == id
	not principal_id_message in value("input_problems", call(read_call, {"principal": {"id": id}}))
}

test_principal_id_rejected[note] if {
	some note, principal in {
		"no prefix": {"id": "alice"},
		"unknown kind": {"id": "admin:root"},
		"empty user": {"id": "user:"},
		"empty group": {"id": "group:"},
		"empty serviceaccount": {"id": "serviceaccount:"},
		"uppercase kind": {"id": "User:alice"},
		"number": {"id": 7},
		"missing id": {"groups": ["group:engineering"]},
		"principal string": "user:alice",
	}
	inp := call(read_call, {"principal": principal})
	principal_id_message in value("input_problems", inp)
	d := decide(inp)
	denied_by(d, {"lush.input.invalid"})
}

groups_message := "input.principal.groups must be an array of strings of the form group:<name>"

test_groups_rejected[note] if {
	some note, groups in {
		"string": "group:engineering",
		"object": {"group:engineering": true},
		"number element": [1],
		"user element": ["user:bob"],
		"empty group name": ["group:"],
		"one bad among good": ["group:engineering", "engineering"],
	}
	inp := call(read_call, {"principal": {"id": "user:alice", "groups": groups}})
	value("input_problems", inp) == {groups_message}
	value("groups", inp) == []
}

# A malformed group list is never matched, even partly.
test_malformed_groups_grant_nothing if {
	inp := call(read_call, {"principal": {"id": "user:alice", "groups": ["group:engineering", 5]}})
	value("principals", inp) == {"user:alice", "group:everyone"}
}

test_principal_match_set if {
	value("principals", read_call) == {"user:alice", "group:engineering", "group:everyone"}
	value("principals", call(read_call, {"principal": {"id": "bad"}})) == set()
}

test_action_problems[note] if {
	some note, tc in {
		"missing": {"inp": object.remove(read_call, ["action"]), "id": "lush.input.invalid"},
		"number": {"inp": call(read_call, {"action": 3}), "id": "lush.input.invalid"},
		"unknown": {"inp": call(read_call, {"action": "tools/delete"}), "id": "lush.action.unknown"},
		"wrong case": {"inp": call(read_call, {"action": "Tools/Call"}), "id": "lush.action.unknown"},
	}
	denied_by(decide(tc.inp), {tc.id})
}

test_unknown_action_message if {
	messages(decide(call(read_call, {"action": "tools/delete"}))) == {concat("", [
		"action \"tools/delete\" is not a known action; expected one of: agent/invoke, approval/decide, approval/read, audit/read, budget/read, budget/top-up, elicitation/create, loop/read, loop/trigger, ",
		"prompts/get, prompts/list, resources/list, resources/read, roots/list, sampling/createMessage, tools/call, tools/list",
	])}
}

test_missing_action_message if {
	messages(decide(object.remove(read_call, ["action"]))) == {concat("", [
		"input.action must be a string, one of: agent/invoke, approval/decide, approval/read, audit/read, budget/read, budget/top-up, elicitation/create, loop/read, loop/trigger, ",
		"prompts/get, prompts/list, resources/list, resources/read, roots/list, sampling/createMessage, tools/call, tools/list",
	])}
}

# Each required field, per action family, is named when missing or malformed.
test_required_field_problems[note] if {
	some note, tc in {
		"agent missing": {"inp": object.remove(read_call, ["agent"]), "msg": "input.agent must be a non-empty string naming the agent (required for tools/call)"},
		"agent empty": {"inp": call(read_call, {"agent": ""}), "msg": "input.agent must be a non-empty string naming the agent (required for tools/call)"},
		"agent number": {"inp": {"action": "agent/invoke", "principal": alice, "agent": 1}, "msg": "input.agent must be a non-empty string naming the agent (required for agent/invoke)"},
		"tool missing": {"inp": object.remove(read_call, ["tool"]), "msg": "input.tool.ref must be a non-empty string naming the tool or server (required for tools/call)"},
		"tool ref empty": {"inp": call(read_call, {"action": "tools/list", "tool": {"ref": ""}}), "msg": "input.tool.ref must be a non-empty string naming the tool or server (required for tools/list)"},
		"tool not object": {"inp": call(read_call, {"tool": fs}), "msg": "input.tool.ref must be a non-empty string naming the tool or server (required for tools/call)"},
		"resource ref missing": {"inp": call(read_call, {"action": "resources/read", "tool": {}}), "msg": "input.tool.ref must be a non-empty string naming the tool or server (required for resources/read)"},
		"loop missing": {"inp": {"action": "loop/read", "principal": alice}, "msg": "input.loop must be a non-empty string naming the loop (required for loop/read)"},
		"loop empty": {"inp": {"action": "loop/trigger", "principal": alice, "loop": ""}, "msg": "input.loop must be a non-empty string naming the loop (required for loop/trigger)"},
		"tool name number": {"inp": call(read_call, {"tool": {"ref": fs, "name": 1}}), "msg": "input.tool.name must be a string"},
		"tool name on tools/list": {"inp": call(read_call, {"action": "tools/list", "tool": {"ref": fs, "name": ["x"]}}), "msg": "input.tool.name must be a string"},
		"depth on agent/invoke": {"inp": object.union(valid_inputs["agent/invoke"], {"depth": true}), "msg": "input.depth must be a number"},
		"chain on resources": {"inp": call(valid_inputs["resources/read"], {"chain": {"a": 1}}), "msg": "input.chain must be an array of agent names"},
		"access unknown": {"inp": call(read_call, {"tool": {"ref": fs, "name": "read_file", "access": "admin"}}), "msg": "input.tool.access must be \"read\" or \"write\" when given"},
		"risk unknown": {"inp": call(read_call, {"tool": {"ref": fs, "name": "read_file", "risk": "low"}}), "msg": "input.tool.risk must be one of \"read\", \"write\", \"network\", \"destructive\" when given"},
		"chain string": {"inp": call(read_call, {"chain": "researcher"}), "msg": "input.chain must be an array of agent names"},
		"chain numbers": {"inp": call(read_call, {"chain": [1]}), "msg": "input.chain must be an array of agent names"},
		"depth string": {"inp": call(read_call, {"depth": "1"}), "msg": "input.depth must be a number"},
		"live_writes string": {"inp": call(read_call, {"live_writes": "true"}), "msg": "input.live_writes must be a boolean"},
	}
	value("input_problems", tc.inp) == {tc.msg}
	"lush.input.invalid" in rule_ids(decide(tc.inp))
	decide(tc.inp).allow == false
}

# Only the fields an action uses are checked: loops ignore agent, tool, chain,
# depth and live_writes; agent/invoke and resources ignore the tool's name,
# access and risk and live_writes; nothing checks environment or arguments.
test_unused_fields_are_ignored[note] if {
	some note, inp in {
		"loop": valid_inputs["loop/read"],
		"invoke": valid_inputs["agent/invoke"],
		"loop with garbage agent, tool, chain, depth": object.union(valid_inputs["loop/read"], {
			"agent": 1, "tool": "fs", "chain": "x", "depth": "deep", "live_writes": "yes", "environment": 3,
		}),
		"invoke with garbage tool and loop": object.union(valid_inputs["agent/invoke"], {
			"tool": {"ref": 1, "name": 2, "access": "all"}, "loop": [], "live_writes": 0,
		}),
		"resources with garbage hints": call(valid_inputs["resources/read"], {
			"tool": {"ref": "mcp://docs", "name": 5, "access": "all", "risk": 1}, "live_writes": "no",
		}),
		"tools/list with garbage live_writes": call(valid_inputs["tools/list"], {"live_writes": "yes"}),
		"call with garbage environment and arguments": call(read_call, {"environment": {"x": 1}, "arguments": "raw"}),
	}
	value("input_problems", inp) == set()
	value("input_ok", inp)
	decide(inp).allow
}

# A string "true" is not live writes: the write stays stubbed (and is flagged).
test_live_writes_only_when_true if {
	not value("live_writes", call(write_call, {"live_writes": "true"}))
	not value("live_writes", write_call)
	value("live_writes", call(write_call, {"live_writes": true}))
}

test_depth_is_max_of_depth_and_chain[note] if {
	some note, tc in {
		"neither": {"patch": {"chain": null, "depth": null}, "depth": 0},
		"chain longer": {"patch": {"chain": ["a", "b", "c"], "depth": 1}, "depth": 3},
		"depth larger": {"patch": {"chain": ["a"], "depth": 4}, "depth": 4},
		"malformed depth ignored": {"patch": {"chain": ["a", "b"], "depth": "9"}, "depth": 2},
		"malformed chain ignored": {"patch": {"chain": "a,b,c", "depth": 2}, "depth": 2},
	}
	value("depth", call(read_call, tc.patch)) == tc.depth
}

# input_ok (the fast path) and input_problems (the explanation) must agree on
# every input: each valid input with each field replaced by each sample value.
field_samples := {
	"action": ["tools/call", "loop/read", "audit/read", "nope", 5, null, "<absent>"],
	"principal": [
		{"id": "user:a"}, {"id": "x"}, {"id": "user:a", "groups": "g"}, {"id": "user:a", "groups": ["group:x", 1]},
		{"id": "user:a", "groups": null}, {"id": "user:a", "groups": ["group:"]}, "p", null, "<absent>",
	],
	"agent": ["researcher", "", 1, null, "<absent>"],
	"tool": [
		{"ref": fs}, {"ref": ""}, {"ref": fs, "name": 1}, {"ref": fs, "access": "x"}, {"ref": fs, "risk": "x"},
		{"ref": fs, "name": null, "access": "", "risk": null}, {"ref": 3}, {"name": "x"}, "t", null, "<absent>",
	],
	"chain": [["a"], [1], "a", null, {}, [], "<absent>"],
	"depth": [1, 2.5, "1", null, true, "<absent>"],
	"live_writes": [true, false, "x", null, "<absent>"],
	"loop": ["daily-digest", "", 2, null, "<absent>"],
}

with_field(base, field, "<absent>") := object.remove(base, [field])

with_field(base, field, v) := call(base, {field: v}) if v != "<absent>"

is_input_ok(inp) if {
	value("input_ok", inp)
} else := false

test_input_ok_agrees_with_problems[note] if {
	some base_name, base in valid_inputs
	some field, samples in field_samples
	some i, v in samples
	note := sprintf("%s/%s/%d", [base_name, field, i])
	inp := with_field(base, field, v)
	is_input_ok(inp) == ok_expected(inp)
}

ok_expected(inp) if {
	count(value("input_problems", inp)) == 0
	inp.action in data.lush.authz.known_actions
} else := false

test_input_ok_agrees_on_garbage[note] if {
	some note, inp in {"string": "x", "number": 1, "null": null, "array": [1], "empty": {}}
	is_input_ok(inp) == false
	count(value("input_problems", inp)) > 0
}
