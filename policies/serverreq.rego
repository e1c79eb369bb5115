package lush.authz

# Server requests: the requests an MCP server sends to the client during a
# call (sampling/createMessage, elicitation/create, roots/list). The MCP
# gateway decides each before it reaches the client, as an action of its own,
# with the principal, agent, chain and tool of the call it belongs to, and
# input.call naming that call: its decision id, its action and its outcome.
# The gateway asks only about calls it allowed; the base allows a server
# request of an allowed call (lush.server_request.call_allowed), and a project
# policy can deny it (no sampling for one server, say).

server_request_actions := {"sampling/createMessage", "elicitation/create", "roots/list"}

# call_allowed: input.call names a call that was allowed.
call_allowed if {
	input.call.outcome == "allow"
	id := input.call.decision_id
	is_string(id)
	id != ""
	input.call.action in {"tools/call", "prompts/get", "resources/read"}
}

input_ok if {
	input.action in server_request_actions
	principal_id
	groups_ok
	agent_name
	tool_ref
	chain_ok
	depth_ok
}

input_problems contains msg if {
	server_request_actions[action]
	not agent_name
	msg := sprintf("input.agent must be a non-empty string naming the agent (required for %s)", [action])
}

input_problems contains msg if {
	server_request_actions[action]
	not tool_ref
	msg := sprintf("input.tool.ref must be a non-empty string naming the server the request comes from (required for %s)", [action])
}

input_problems contains "input.chain must be an array of agent names" if {
	server_request_actions[action]
	not chain_ok
}

input_problems contains "input.depth must be a number" if {
	server_request_actions[action]
	not depth_ok
}

# METADATA
# title: Server request outside an allowed call
# description: |
#   A request a server sends to the client (sampling, elicitation, roots) whose
#   input.call does not name a call that was allowed: a decision id, an action
#   of tools/call, prompts/get or resources/read, and outcome "allow".
# custom:
#   id: lush.server_request.no_call
deny contains d if {
	server_request_actions[action]
	not call_allowed
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf("%s reaches the client only during a call that was allowed: input.call must name it (decision_id, action, outcome \"allow\")", [action]),
	}
}

# METADATA
# title: Server request of an allowed call
# description: |
#   A request a server sends to the client during a call that was allowed
#   (input.call): allowed unless a project policy denies it.
# custom:
#   id: lush.server_request.call_allowed
allow_rules contains id if {
	input.action in server_request_actions
	call_allowed
	id := rego.metadata.rule().custom.id
}
