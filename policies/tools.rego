package lush.authz

# The two-step authorization of tool, resource and prompt actions:
#   capability: the agent's exhaustive tools allowlist covers the call;
#   privilege:  the principal's match set holds a tool_grant covering the call.
# Every lookup is indexed by keys from the input, never by iterating the project.

# An allowlist entry or grant at access A covers a call needing access N when
# A is in {"read": {"read", "write"}, "write": {"write"}}[N] (written out where
# it is used: a literal costs less than a rule): write covers read. An entry
# without access is a read; an unknown access covers nothing.
#
# Narrowing: an entry or grant with `only` admits a tool call only if `only` is
# an array naming the tool; it never admits resources or prompts.

# How the call reads in messages.
call_label := tool_label if {
	tool_actions[action]
} else := sprintf("%s for %s", [tool_ref, action])

# names_admit(only): an entry's or grant's `only` list (a missing one is
# [tool_name]) admits the call's tool. A session (a whole server's tools/list)
# is admitted whatever the list: narrowing limits the tools that may be called,
# not whether the server may be talked to.
names_admit(_) if session

names_admit(only) if {
	is_array(only)
	tool_name in only
}

# --- capability ---

allowlist_entry := e if {
	e := data.lush.project.agents[agent_name].tools[tool_ref]
	is_object(e)
}

allowlisted if {
	input.action in {"tools/call", "tools/list"}
	names_admit(object.get(allowlist_entry, "only", [tool_name]))
}

allowlisted if {
	input.action in {"resources/list", "resources/read", "prompts/list", "prompts/get"}
	e := allowlist_entry
	not "only" in object.keys(e)
}

# capability_ok: allowlisted, at an access that covers the call. (Written out
# rather than over allowlisted, which only the deny rules need.)
capability_ok if {
	input.action in {"tools/call", "tools/list"}
	e := allowlist_entry
	names_admit(object.get(e, "only", [tool_name]))
	object.get(e, "access", "read") in {"read": {"read", "write"}, "write": {"write"}}[effective_access]
}

capability_ok if {
	input.action in {"resources/list", "resources/read", "prompts/list", "prompts/get"}
	e := allowlist_entry
	not "only" in object.keys(e)
	object.get(e, "access", "read") in {"read": {"read", "write"}, "write": {"write"}}[effective_access]
}

# Why the allowlist does not admit the call.
not_allowlisted_note := "not in its tools allowlist" if {
	not allowlist_entry
} else := sprintf("its allowlist entry for %s is narrowed to %s", [tool_ref, names]) if {
	tool_actions[action]
	is_array(allowlist_entry.only)
	names := concat(", ", sort([n | some n in allowlist_entry.only; is_string(n)]))
} else := sprintf("its allowlist entry for %s has a malformed only (expected an array of tool names)", [tool_ref]) if {
	tool_actions[action]
} else := sprintf("its allowlist entry for %s is narrowed to specific tools (only), which does not cover resources or prompts: allowlist the server without only", [tool_ref])

# METADATA
# title: Tool not in the agent's allowlist
# description: |
#   The tool (or server, for resources and prompts) is not in the agent's
#   exhaustive tools allowlist, or the entry's only list does not admit the call
#   (another tool of the server, or a resource/prompt action).
# custom:
#   id: lush.capability.not_allowlisted
call_deny contains d if {
	scoped_actions[action]
	agent_known
	tool_ref
	not allowlisted
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf("agent %q may not use %s: %s", [agent_name, call_label, not_allowlisted_note]),
	}
}

# METADATA
# title: Unknown tool
# description: |
#   A tools/call of a name the agent has no tool by (input.tool.ref "" and
#   input.tool.name the name asked for, input.rego): a tool of another agent,
#   of no agent, or one the agent's allowlist leaves out. The message is the
#   same for each, so a caller probing for tools learns nothing but that the
#   agent has no such tool for it, and the probe is in the decision log.
# custom:
#   id: lush.capability.unknown_tool
call_deny contains d if {
	unknown_tool_call
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"agent %q has no tool %q that you may call: call tools/list for the tools you can use",
			[agent_name, tool_name],
		),
	}
}

# METADATA
# title: Allowlist access too low
# description: |
#   The agent's allowlist admits the tool at read, but the call needs write
#   (by the tool's class, an unknown class, or the caller's access hint).
# custom:
#   id: lush.capability.access_exceeded
call_deny contains d if {
	allowlisted
	not capability_ok
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"agent %q may use %s only with access %q, but the call needs %q: allowlist it with access %q",
			[agent_name, call_label, object.get(allowlist_entry, "access", "read"), effective_access, effective_access],
		),
	}
}

# METADATA
# title: Tool in the agent's allowlist
# description: The agent's tools allowlist admits the call at the access it needs.
# custom:
#   id: lush.capability.allowlist
allow_rules contains id if {
	capability_ok
	id := rego.metadata.rule().custom.id
}

# --- privilege ---

# The grants of the caller's match set on the ref that admit the call.
matching_grants contains g if {
	input.action == "tools/call"
	grants := data.lush.project.grants[tool_ref]
	some p in principals
	some g in grants[p]
	is_object(g)

	# names_admit written out: a tools/call is never a session.
	only := object.get(g, "only", [tool_name])
	is_array(only)
	tool_name in only
}

matching_grants contains g if {
	input.action == "tools/list"
	some p in principals
	some g in data.lush.project.grants[tool_ref][p]
	is_object(g)
	names_admit(object.get(g, "only", [tool_name]))
}

matching_grants contains g if {
	content_actions[action]
	some p in principals
	some g in data.lush.project.grants[tool_ref][p]
	is_object(g)
	not "only" in object.keys(g)
}

# privilege_ok: some grant of matching_grants covers the access of the call.
# (Written out rather than over matching_grants, so that it stops at the
# first covering grant.)
privilege_ok if {
	input.action in {"tools/call", "tools/list"}
	grants := data.lush.project.grants[tool_ref]
	some p in principals
	some g in grants[p]
	is_object(g)
	names_admit(object.get(g, "only", [tool_name]))
	object.get(g, "access", "read") in {"read": {"read", "write"}, "write": {"write"}}[effective_access]
}

privilege_ok if {
	input.action in {"resources/list", "resources/read", "prompts/list", "prompts/get"}
	grants := data.lush.project.grants[tool_ref]
	some p in principals
	some g in grants[p]
	is_object(g)
	not "only" in object.keys(g)
	object.get(g, "access", "read") in {"read": {"read", "write"}, "write": {"write"}}[effective_access]
}

grant_scope_note := "" if {
	tool_actions[action]
} else := " (grants narrowed with only do not cover resources or prompts)"

# METADATA
# title: No tool grant
# description: |
#   No principal of the caller's match set holds a tool_grant on the tool (or,
#   for resources and prompts, an un-narrowed grant on the server).
# custom:
#   id: lush.privilege.no_grant
call_deny contains d if {
	scoped_actions[action]
	tool_ref
	principal_id
	count(matching_grants) == 0
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"principal %s holds no grant on %s%s: add a tool_grant with access %q for one of %s",
			[principal_id, call_label, grant_scope_note, effective_access, principal_list],
		),
	}
}

# METADATA
# title: Tool grant access too low
# description: |
#   The caller's match set holds grants on the tool, but none at the access the
#   call needs (only read grants for a write).
# custom:
#   id: lush.privilege.access_exceeded
call_deny contains d if {
	levels := {object.get(g, "access", "read") | some g in matching_grants}
	count(levels) > 0

	# not privilege_ok, from the grants already matched: none at an access
	# that covers the call.
	count(levels & {"read": {"read", "write"}, "write": {"write"}}[effective_access]) == 0
	held := concat(", ", sort({sprintf("%v", [l]) | some l in levels}))
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf(
			"principal %s holds only %s grants on %s, but the call needs %q: grant %q to one of %s",
			[principal_id, held, call_label, effective_access, effective_access, principal_list],
		),
	}
}

# METADATA
# title: Principal holds a tool grant
# description: Some principal of the caller's match set holds a tool_grant covering the call.
# custom:
#   id: lush.privilege.tool_grant
allow_rules contains id if {
	privilege_ok
	id := rego.metadata.rule().custom.id
}
