# METADATA
# title: Lush base authorization library
# description: |
#   Decides every MCP tool call, agent-to-agent call, loop access and read of
#   the decision log through one query, data.lush.authz.decision, over the input
#   document and the compiled project (data.lush.project). This file reads and
#   validates the input.
# scope: package
package lush.authz

# Performance note: the decision runs on every call the engine's cache does
# not answer. Each rule reference and function call costs about as much as
# several expressions in topdown, so the hot path (an allowed call; see
# decision.rego) keeps to few rules, constant sets it tests are literals,
# lookups into the project are indexed by keys from the input (never
# iterated), and the deny rules are evaluated only when something may deny.
#
# The engine caches decisions keyed on the parts of the input the modules
# reference, so the library reads the input field by field: never input as a
# whole (is_object(input) depends only on its type, which the engine knows).

# The actions Lush decides, by family.
tool_actions := {"tools/call", "tools/list"}

content_actions := {"resources/list", "resources/read", "prompts/list", "prompts/get"}

scoped_actions := {"tools/call", "tools/list", "resources/list", "resources/read", "prompts/list", "prompts/get"}

agent_actions := {"tools/call", "tools/list", "resources/list", "resources/read", "prompts/list", "prompts/get", "agent/invoke"}

loop_actions := {"loop/trigger", "loop/read"}

known_actions := {
	"tools/call", "tools/list", "resources/list", "resources/read", "prompts/list", "prompts/get",
	"agent/invoke", "loop/trigger", "loop/read", "audit/read", "approval/read", "approval/decide",
	"budget/read", "budget/top-up", "sampling/createMessage", "elicitation/create", "roots/list",
}

known_action_list := "agent/invoke, approval/decide, approval/read, audit/read, budget/read, budget/top-up, elicitation/create, loop/read, loop/trigger, prompts/get, prompts/list, resources/list, resources/read, roots/list, sampling/createMessage, tools/call, tools/list"

# The fields of the input, each defined only when present and well formed.

action := a if {
	a := input.action
	is_string(a)
}

principal_id := id if {
	id := input.principal.id
	is_string(id)
	regex.match(`^(user|group|serviceaccount):[\s\S]`, id)
}

# valid_groups: the caller's groups when principal.groups is well formed, an
# array of group:<name> or absent or null (no groups); undefined otherwise.
valid_groups := gs if {
	gs := input.principal.groups
	is_array(gs)
	every g in gs {
		is_string(g)
		regex.match(`^group:[\s\S]`, g)
	}
} else := [] if {
	not has_groups
}

# has_<field>: the field is present and not null. (A function would not do:
# `not f(input.x)` is false, not true, when input.x is absent.)
has_groups if input.principal.groups != null

has_chain if input.chain != null

has_depth if input.depth != null

has_live_writes if input.live_writes != null

# groups_ok: principal.groups is absent, null, or an array of group:<name>.
groups_ok if valid_groups

# The caller's groups; none when malformed (the input is then invalid anyway).
groups := gs if {
	gs := valid_groups
} else := []

agent_name := a if {
	a := input.agent
	is_string(a)
	a != ""
}

tool_ref := r if {
	r := input.tool.ref
	is_string(r)
	r != ""
}

# The MCP tool name within the server; "" for single-tool refs and when absent.
tool_name := n if {
	n := input.tool.name
	is_string(n)
} else := ""

loop_name := l if {
	l := input.loop
	is_string(l)
	l != ""
}

live_writes if input.live_writes == true

# unknown_tool_call: a tools/call of a name the enforcement point has no tool
# by for the agent (the MCP gateway: the agent's catalog has none), sent with
# tool.ref "" and tool.name the name asked for. It is well formed, and denied
# (lush.capability.unknown_tool, tools.rego).
unknown_tool_call if {
	input.action == "tools/call"
	input.tool.ref == ""
	n := input.tool.name
	is_string(n)
	n != ""
}

# depth: max(input.depth, count(input.chain)), each counting as 0 when absent
# or malformed.
depth := max({count(input.chain), input.depth}) if {
	is_array(input.chain)
	is_number(input.depth)
} else := max({0, input.depth}) if {
	is_number(input.depth)
} else := count(input.chain) if {
	is_array(input.chain)
} else := 0

# The principal match set: the caller, its groups and group:everyone (only the
# groups when the caller's id is malformed; the input is then invalid anyway).
principals := {p | some p in array.concat([principal_id, "group:everyone"], groups)} if {
	principal_id
} else := {g | some g in groups}

# The match set for messages: the caller first, then its groups.
principal_list := concat(", ", array.concat([principal_id], sort(principals - {principal_id})))

# Optional fields: absent or null count as not given (and "" for the tool's
# name, access and risk); when given they must have their type.
tool_hints_ok if {
	is_object(input.tool)
	type_name(object.get(input.tool, "name", null)) in {"string", "null"}
	object.get(input.tool, "access", null) in {null, "", "read", "write"}
	object.get(input.tool, "risk", null) in {null, "", "read", "write", "network", "destructive"}
}

chain_ok if {
	is_array(input.chain)
	every x in input.chain {
		is_string(x)
	}
}

chain_ok if not has_chain

depth_ok if is_number(input.depth)

depth_ok if not has_depth

live_writes_ok if is_boolean(input.live_writes)

live_writes_ok if not has_live_writes

# input_ok: the action is known and the input is well formed; the fast path
# for the common case. It must agree with input_problems (the tests check it):
# input_ok holds exactly when the action is known and there is no problem.
# The first body is the shape every enforcement point sends (authz.Input:
# chain, depth, live_writes and groups always present), checked inline; the
# general bodies accept absent and null optional fields too.
input_ok if {
	input.action == "tools/call"
	principal_id
	valid_groups
	agent_name
	tool_ref
	is_string(input.tool.name)
	object.get(input.tool, "access", null) in {null, "", "read", "write"}
	object.get(input.tool, "risk", null) in {null, "", "read", "write", "network", "destructive"}
	is_array(input.chain)
	every x in input.chain {
		is_string(x)
	}
	is_number(input.depth)
	is_boolean(input.live_writes)
}

input_ok if {
	input.action == "tools/call"
	principal_id
	groups_ok
	agent_name
	tool_ref
	tool_hints_ok
	chain_ok
	depth_ok
	live_writes_ok
}

input_ok if {
	unknown_tool_call
	principal_id
	groups_ok
	agent_name
	tool_hints_ok
	chain_ok
	depth_ok
	live_writes_ok
}

input_ok if {
	input.action == "tools/list"
	principal_id
	groups_ok
	agent_name
	tool_ref
	tool_hints_ok
	chain_ok
	depth_ok
}

input_ok if {
	input.action in content_actions
	principal_id
	groups_ok
	agent_name
	tool_ref
	chain_ok
	depth_ok
}

input_ok if {
	input.action == "agent/invoke"
	principal_id
	groups_ok
	agent_name
	chain_ok
	depth_ok
}

input_ok if {
	input.action in loop_actions
	principal_id
	groups_ok
	loop_name
}

input_ok if {
	input.action in {"audit/read", "approval/read", "approval/decide", "budget/read", "budget/top-up"}
	principal_id
	groups_ok
}

# Well-formedness problems, one message per field. Values are never echoed.
# Only the fields an action uses are checked; others are ignored.
input_is_object if is_object(input)

input_problems contains "input must be a JSON object" if not input_is_object

input_problems contains msg if {
	input_is_object
	not principal_id
	msg := "input.principal.id must be a string of the form user:<id>, group:<name> or serviceaccount:<name>"
}

input_problems contains "input.principal.groups must be an array of strings of the form group:<name>" if {
	input_is_object
	not groups_ok
}

input_problems contains msg if {
	input_is_object
	not action
	msg := sprintf("input.action must be a string, one of: %s", [known_action_list])
}

input_problems contains msg if {
	agent_actions[action]
	not agent_name
	msg := sprintf("input.agent must be a non-empty string naming the agent (required for %s)", [action])
}

input_problems contains msg if {
	scoped_actions[action]
	not tool_ref
	not unknown_tool_call
	msg := sprintf("input.tool.ref must be a non-empty string naming the tool or server (required for %s)", [action])
}

input_problems contains msg if {
	loop_actions[action]
	not loop_name
	msg := sprintf("input.loop must be a non-empty string naming the loop (required for %s)", [action])
}

input_problems contains "input.tool.name must be a string" if {
	tool_actions[action]
	n := input.tool.name
	n != null
	not is_string(n)
}

input_problems contains "input.tool.access must be \"read\" or \"write\" when given" if {
	tool_actions[action]
	a := input.tool.access
	not a in {null, "", "read", "write"}
}

input_problems contains msg if {
	tool_actions[action]
	r := input.tool.risk
	not r in {null, "", "read", "write", "network", "destructive"}
	msg := "input.tool.risk must be one of \"read\", \"write\", \"network\", \"destructive\" when given"
}

input_problems contains "input.chain must be an array of agent names" if {
	agent_actions[action]
	not chain_ok
}

input_problems contains "input.depth must be a number" if {
	agent_actions[action]
	not depth_ok
}

input_problems contains "input.live_writes must be a boolean" if {
	input.action == "tools/call"
	not live_writes_ok
}

# METADATA
# title: Malformed input
# description: |
#   The input document is not well formed: a field the action needs is missing,
#   or a field it uses has the wrong type or form. The message names the field.
# custom:
#   id: lush.input.invalid
deny contains d if {
	not input_ok
	some msg in input_problems
	d := {"rule": rego.metadata.rule().custom.id, "message": msg}
}

# METADATA
# title: Unknown action
# description: The input's action is a string but not one of the actions Lush decides.
# custom:
#   id: lush.action.unknown
deny contains d if {
	a := action
	not known_actions[a]
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf("action %q is not a known action; expected one of: %s", [a, known_action_list]),
	}
}
