package lush.authz_test

# Server requests (sampling/createMessage, elicitation/create, roots/list): a
# request of an allowed call is allowed (lush.server_request.call_allowed);
# one whose input.call does not name an allowed call is denied
# (lush.server_request.no_call); a project policy can deny it.

server_request(action, c) := {
	"action": action,
	"principal": alice,
	"agent": "researcher",
	"chain": ["researcher"],
	"depth": 1,
	"tool": {"ref": fs, "name": "read_file"},
	"live_writes": false,
	"call": c,
}

allowed_call := {"decision_id": "d-1", "action": "tools/call", "outcome": "allow"}

test_server_request_decisions[note] if {
	some note, tc in {
		"sampling": {"inp": server_request("sampling/createMessage", allowed_call), "allow": true},
		"elicitation": {"inp": server_request("elicitation/create", allowed_call), "allow": true},
		"roots": {"inp": server_request("roots/list", allowed_call), "allow": true},
		"during prompts/get": {"inp": server_request("sampling/createMessage", object.union(allowed_call, {"action": "prompts/get"})), "allow": true},
		"no call": {"inp": object.remove(server_request("sampling/createMessage", {}), ["call"]), "allow": false},
		"a denied call": {"inp": server_request("sampling/createMessage", object.union(allowed_call, {"outcome": "deny"})), "allow": false},
		"a stubbed call": {"inp": server_request("elicitation/create", object.union(allowed_call, {"outcome": "stub"})), "allow": false},
		"no decision id": {"inp": server_request("roots/list", object.remove(allowed_call, ["decision_id"])), "allow": false},
		"an empty decision id": {"inp": server_request("roots/list", object.union(allowed_call, {"decision_id": ""})), "allow": false},
		"another action": {"inp": server_request("roots/list", object.union(allowed_call, {"action": "tools/list"})), "allow": false},
		"call not an object": {"inp": server_request("roots/list", "d-1"), "allow": false},
	}
	d := decide(tc.inp)
	d.allow == tc.allow
	check_server_request(d, tc.allow)
}

check_server_request(d, true) if allowed(d, "allow", {"lush.server_request.call_allowed"})

check_server_request(d, false) if denied_by(d, {"lush.server_request.no_call"})

test_server_request_no_call_message if {
	messages(decide(object.remove(server_request("sampling/createMessage", {}), ["call"]))) == {"sampling/createMessage reaches the client only during a call that was allowed: input.call must name it (decision_id, action, outcome \"allow\")"}
}

# The fields the request needs: agent, tool.ref, a well-formed chain and depth.
test_server_request_input[note] if {
	some note, tc in {
		"no agent": {"inp": object.remove(server_request("roots/list", allowed_call), ["agent"]), "msg": "input.agent must be a non-empty string naming the agent (required for roots/list)"},
		"no tool": {"inp": object.remove(server_request("roots/list", allowed_call), ["tool"]), "msg": "input.tool.ref must be a non-empty string naming the server the request comes from (required for roots/list)"},
		"bad chain": {"inp": call(server_request("roots/list", allowed_call), {"chain": "researcher"}), "msg": "input.chain must be an array of agent names"},
		"bad depth": {"inp": call(server_request("roots/list", allowed_call), {"depth": "1"}), "msg": "input.depth must be a number"},
	}
	d := decide(tc.inp)
	denied_by(d, {"lush.input.invalid"})
	tc.msg in messages(d)
}

# A project policy denies sampling for one server, and nothing else.
no_sampling := {"deny": {{"rule": "example.no_sampling", "message": "no sampling for the filesystem server"}}}

test_server_request_project_denial if {
	d := decide_with(server_request("sampling/createMessage", allowed_call), {"no_sampling": no_sampling})
	d.allow == false
	rule_ids(d) == {"example.no_sampling"}
}
