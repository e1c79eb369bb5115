# METADATA
# title: Lush base authorization library
# description: |
#   Decides every MCP tool call, agent-to-agent call and loop access through one
#   query, data.lush.authz.decision, over the input document and the compiled
#   project (data.lush.project). This file reads and validates the input.
# scope: package
package lush.authz

# Performance note: the decision runs on every call. Each rule reference and
# function call costs about as much as several expressions in topdown, so the
# hot path keeps to few rules, constant sets are literals, and lookups into the
# project are indexed by keys from the input (never iterated).

# The actions Lush decides, by family.
tool_actions := {"tools/call", "tools/list"}

content_actions := {"resources/list", "resources/read", "prompts/list", "prompts/get"}

scoped_actions := {"tools/call", "tools/list", "resources/list", "resources/read", "prompts/list", "prompts/get"}

agent_actions := {"tools/call", "tools/list", "resources/list", "resources/read", "prompts/list", "prompts/get", "agent/invoke"}

loop_actions := {"loop/trigger", "loop/read"}

known_actions := {
	"tools/call", "tools/list", "resources/list", "resources/read", "prompts/list", "prompts/get",
	"agent/invoke", "loop/trigger", "loop/read",
}

known_action_list := "agent/invoke, loop/read, loop/trigger, prompts/get, prompts/list, resources/list, resources/read, tools/call, tools/list"

risk_classes := {"read", "write", "network", "destructive"}

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

valid_group(g) if {
	is_string(g)
	regex.match(`^group:[\s\S]`, g)
}

# groups_ok: principal.groups is absent, null, or an array of group:<name>.
groups_ok if not has_groups

groups_ok if {
	is_array(input.principal.groups)
	not bad_group
}

has_groups if input.principal.groups != null

bad_group if {
	some g in input.principal.groups
	not valid_group(g)
}

# The caller's groups; none when malformed (the input is then invalid anyway).
groups := input.principal.groups if {
	has_groups
	groups_ok
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

chain_length := count(input.chain) if {
	is_array(input.chain)
} else := 0

depth := max({chain_length, input.depth}) if {
	is_number(input.depth)
} else := chain_length

# The principal match set: the caller, its groups and group:everyone.
principals contains principal_id

principals contains g if some g in groups

principals contains "group:everyone" if principal_id

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

chain_ok if object.get(input, "chain", null) == null

chain_ok if {
	is_array(input.chain)
	not bad_chain_entry
}

bad_chain_entry if {
	some x in input.chain
	not is_string(x)
}

depth_ok if object.get(input, "depth", null) == null

depth_ok if is_number(input.depth)

live_writes_ok if type_name(object.get(input, "live_writes", null)) in {"null", "boolean"}

# input_ok: the action is known and the input is well formed; the fast path
# for the common case. It must agree with input_problems (the tests check it):
# input_ok holds exactly when the action is known and there is no problem.
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

# Well-formedness problems, one message per field. Values are never echoed.
# Only the fields an action uses are checked; others are ignored.
input_is_object if is_object(input)

input_problems contains "input must be a JSON object" if not input_is_object

input_problems contains msg if {
	is_object(input)
	not principal_id
	msg := "input.principal.id must be a string of the form user:<id>, group:<name> or serviceaccount:<name>"
}

input_problems contains "input.principal.groups must be an array of strings of the form group:<name>" if {
	is_object(input)
	not groups_ok
}

input_problems contains msg if {
	is_object(input)
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
