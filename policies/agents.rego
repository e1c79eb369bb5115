package lush.authz

# Agent-scoped checks (tools/*, resources/*, prompts/*, agent/invoke): the agent
# exists, the principal may execute it, and the call chain is not too deep.

project_name := n if {
	n := data.lush.project.name
	is_string(n)
} else := "(unnamed)"

agent_label := sprintf("agent %q", [agent_name]) if {
	agent_name
} else := "the agent"

agent_known if is_object(data.lush.project.agents[agent_name])

has_agent_execute if {
	acl := data.lush.project.agents[agent_name].acl.execute
	some p in principals
	acl[p] == true
}

depth_exceeded if {
	agent_actions[input.action]
	depth > max_depth
}

max_depth := m if {
	m := data.lush.project.settings.max_depth
	is_number(m)
} else := 5

# METADATA
# title: Unknown agent
# description: The agent named by the input is not defined in the project.
# custom:
#   id: lush.agent.unknown
call_deny contains d if {
	agent_actions[action]
	agent_name
	not agent_known
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf("agent %q is not defined in project %q", [agent_name, project_name]),
	}
}

# METADATA
# title: Principal may not execute the agent
# description: |
#   No principal of the caller's match set (its id, its groups, group:everyone)
#   holds execute in the agent's ACL.
# custom:
#   id: lush.acl.no_agent_execute
call_deny contains d if {
	agent_actions[action]
	agent_known
	principal_id
	not has_agent_execute
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"principal %s may not execute agent %q: none of %s holds execute in the agent's acl",
			[principal_id, agent_name, principal_list],
		),
	}
}

# METADATA
# title: Call chain too deep
# description: |
#   The depth of the agent call chain, max(input.depth, count(input.chain)),
#   exceeds the project's settings.max_depth (5 when not set).
# custom:
#   id: lush.depth.exceeded
deny contains d if {
	depth_exceeded
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"call chain depth %v at %s exceeds the project's max_depth of %v: shorten the chain of agent calls or raise authorization.max_call_depth in lush.yaml",
			[depth, agent_label, max_depth],
		),
	}
}

# METADATA
# title: Principal may execute the agent
# description: Some principal of the caller's match set holds execute in the agent's ACL.
# custom:
#   id: lush.acl.agent_execute
allow_rules contains id if {
	agent_actions[input.action]
	has_agent_execute # implies agent_known: the agent has an acl
	id := rego.metadata.rule().custom.id
}
