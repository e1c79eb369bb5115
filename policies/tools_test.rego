package lush.authz_test

# Capability (the agent's allowlist) and privilege (tool grants) of tool,
# resource and prompt actions, and the effective classification.

tool(ref, name) := {"ref": ref, "name": name}

# --- classification ---

test_classification[note] if {
	some note, tc in {
		"class of the tool": {"tool": tool(fs, "write_file"), "access": "write", "risk": "destructive"},
		"read tool": {"tool": tool(fs, "read_file"), "access": "read", "risk": "read"},
		"server default": {"tool": tool(fs, "list_directory"), "access": "read", "risk": "read"},
		"single-tool default": {"tool": {"ref": "tools/clock"}, "access": "read", "risk": "read"},
		"tool class without default": {"tool": tool("mcp://github", "create_issue"), "access": "write", "risk": "network"},
		"unknown tool of a server without default": {"tool": tool("mcp://github", "delete_repo"), "access": "write", "risk": "write"},
		"unknown ref": {"tool": {"ref": "tools/unclassified"}, "access": "write", "risk": "write"},
		"unknown with destructive hint": {"tool": {"ref": "tools/unclassified", "risk": "destructive"}, "access": "write", "risk": "destructive"},
		"unknown with network hint": {"tool": {"ref": "tools/unclassified", "risk": "network"}, "access": "write", "risk": "network"},
		"unknown with read hint": {"tool": {"ref": "tools/unclassified", "risk": "read", "access": "read"}, "access": "write", "risk": "write"},
		"write hint raises a read class": {"tool": {"ref": fs, "name": "read_file", "access": "write"}, "access": "write", "risk": "read"},
		"read hint does not lower a write class": {"tool": {"ref": fs, "name": "write_file", "access": "read"}, "access": "write", "risk": "destructive"},
		"known class ignores risk hint": {"tool": {"ref": fs, "name": "read_file", "risk": "destructive"}, "access": "read", "risk": "read"},
		"malformed class is a write": {"tool": tool(fs, "bad_class"), "access": "write", "risk": "write"},
		"non-object class falls back to default": {"tool": tool(fs, "not_object"), "access": "read", "risk": "read"},
	}
	c := value("classification", call(read_call, {"tool": tc.tool}))
	c == {"access": tc.access, "risk": tc.risk}
}

test_classification_of_non_tool_actions[act] if {
	some act in (data.lush.authz.known_actions - data.lush.authz.tool_actions)
	inp := call(read_call, {"action": act, "tool": {"ref": fs, "name": "write_file", "access": "write", "risk": "destructive"}})
	value("classification", inp) == {"access": "read", "risk": "read"}
}

test_classification_of_invalid_input if {
	value("classification", {}) == {"access": "read", "risk": "read"}
	value("classification", {"action": "tools/call"}) == {"access": "write", "risk": "write"}
}

# --- capability ---

test_not_allowlisted_messages[note] if {
	some note, tc in {
		"ref absent": {
			"inp": call(read_call, {"tool": {"ref": "tools/shell"}}),
			"msg": "agent \"researcher\" may not use tools/shell: not in its tools allowlist",
		},
		"name narrowed out": {
			"inp": call(read_call, {"tool": tool(fs, "move_file")}),
			"msg": sprintf("agent \"researcher\" may not use %s (move_file): its allowlist entry for %s is narrowed to list_directory, read_file", [fs, fs]),
		},
		"no name on a narrowed entry": {
			"inp": call(read_call, {"tool": {"ref": fs}}),
			"msg": sprintf("agent \"researcher\" may not use %s: its allowlist entry for %s is narrowed to list_directory, read_file", [fs, fs]),
		},
		"malformed only": {
			"inp": call(read_call, {"agent": "broken", "tool": tool(fs, "read_file")}),
			"msg": sprintf("agent \"broken\" may not use %s (read_file): its allowlist entry for %s has a malformed only (expected an array of tool names)", [fs, fs]),
		},
		"entry not an object": {
			"inp": call(read_call, {"agent": "broken", "tool": {"ref": "tools/notobject"}}),
			"msg": "agent \"broken\" may not use tools/notobject: not in its tools allowlist",
		},
		"resource ref absent": {
			"inp": call(read_call, {"action": "resources/list", "tool": {"ref": "mcp://other"}}),
			"msg": "agent \"researcher\" may not use mcp://other for resources/list: not in its tools allowlist",
		},
		"prompt on a narrowed entry": {
			"inp": call(read_call, {"action": "prompts/get", "tool": {"ref": "mcp://narrow-docs", "name": "search"}}),
			"msg": "agent \"researcher\" may not use mcp://narrow-docs for prompts/get: its allowlist entry for mcp://narrow-docs is narrowed to specific tools (only), which does not cover resources or prompts: allowlist the server without only",
		},
	}
	d := decide(tc.inp)
	"lush.capability.not_allowlisted" in rule_ids(d)
	tc.msg in messages(d)
	d.allow == false
}

test_capability_access_exceeded[note] if {
	some note, tc in {
		"write hint": {
			"inp": call(read_call, {"tool": {"ref": fs, "name": "read_file", "access": "write"}}),
			"msg": sprintf("agent \"researcher\" may use %s (read_file) only with access \"read\", but the call needs \"write\": allowlist it with access \"write\"", [fs]),
		},
		"unknown class": {
			"inp": call(read_call, {"tool": {"ref": "tools/unclassified"}}),
			"msg": "agent \"researcher\" may use tools/unclassified only with access \"read\", but the call needs \"write\": allowlist it with access \"write\"",
		},
		"malformed entry access": {
			"inp": call(read_call, {"agent": "broken", "tool": {"ref": "mcp://weird"}, "action": "resources/read"}),
			"msg": "agent \"broken\" may use mcp://weird for resources/read only with access \"admin\", but the call needs \"read\": allowlist it with access \"read\"",
		},
	}
	d := decide(tc.inp)
	"lush.capability.access_exceeded" in rule_ids(d)
	not "lush.capability.not_allowlisted" in rule_ids(d)
	tc.msg in messages(d)
}

# An entry without access allows reads only.
test_entry_without_access_is_read if {
	inp := call(read_call, {"agent": "broken", "action": "resources/read", "tool": {"ref": "mcp://noaccess"}})
	"lush.capability.allowlist" in value("allow_rules", inp)
	decide(inp).allow
	inp2 := call(inp, {"action": "tools/call", "tool": {"ref": "mcp://noaccess", "name": "x"}})
	"lush.capability.access_exceeded" in rule_ids(decide(inp2))
}

test_write_allowlist_covers_read if {
	inp := call(write_call, {"tool": tool(fs, "read_file")})
	allowed(decide(inp), "allow", call_rules)
}

test_capability_not_checked_for_unknown_agent if {
	d := decide(call(read_call, {"agent": "ghost"}))
	not "lush.capability.not_allowlisted" in rule_ids(d)
	not "lush.capability.allowlist" in d.rules
}

# A name the agent has no tool by (ref "") is denied by its own rule alone,
# with one message whoever asks and whatever the name is elsewhere.
test_unknown_tool_denied[note] if {
	some note, tc in {
		"a tool of another agent": {"inp": call(read_call, {"tool": {"ref": "", "name": "write_file"}}), "name": "write_file"},
		"a tool of no agent": {"inp": call(read_call, {"tool": {"ref": "", "name": "nope"}}), "name": "nope"},
		"by a caller with other grants": {"inp": call(read_call, {"principal": {"id": "serviceaccount:orchestrator"}, "tool": {"ref": "", "name": "nope"}}), "name": "nope"},
		"without optional fields": {"inp": {"action": "tools/call", "principal": alice, "agent": "researcher", "tool": {"ref": "", "name": "nope"}}, "name": "nope"},
	}
	d := decide(tc.inp)
	denied_by(d, {"lush.capability.unknown_tool"})
	messages(d) == {sprintf("agent \"researcher\" has no tool %q that you may call: call tools/list for the tools you can use", [tc.name])}
	d.access == "write"
	d.risk == "write"
}

# The agent's own checks still apply to a probe; a malformed one is malformed.
test_unknown_tool_with_other_denials[note] if {
	some note, tc in {
		"no execute on the agent": {
			"inp": call(read_call, {"principal": carol, "tool": {"ref": "", "name": "nope"}}),
			"rules": {"lush.acl.no_agent_execute", "lush.capability.unknown_tool"},
		},
		"unknown agent": {
			"inp": call(read_call, {"agent": "ghost", "tool": {"ref": "", "name": "nope"}}),
			"rules": {"lush.agent.unknown", "lush.capability.unknown_tool"},
		},
		"empty name": {"inp": call(read_call, {"tool": {"ref": "", "name": ""}}), "rules": {"lush.input.invalid"}},
		"no name": {"inp": call(read_call, {"tool": {"ref": ""}}), "rules": {"lush.input.invalid"}},
		"tools/list": {"inp": call(read_call, {"action": "tools/list", "tool": {"ref": "", "name": "nope"}}), "rules": {"lush.input.invalid"}},
	}
	denied_by(decide(tc.inp), tc.rules)
}

test_tools_list_checks_like_tools_call[note] if {
	some note, tc in {
		"allowed tool": {"tool": tool(fs, "read_file"), "allow": true},
		"narrowed out": {"tool": tool(fs, "write_file"), "allow": false},
		"server without name on narrowed entry: a session": {"tool": {"ref": fs}, "allow": true},
		"single-tool ref": {"tool": {"ref": "tools/clock"}, "allow": true},
	}
	d := decide(call(read_call, {"action": "tools/list", "tool": tc.tool}))
	d.allow == tc.allow
	d.stub == false
	d.approval_required == false
}

test_resources_and_prompts_allowed[act] if {
	some act in data.lush.authz.content_actions
	d := decide(call(read_call, {"action": act, "tool": {"ref": "mcp://docs", "name": "ignored", "access": "write"}}))
	allowed(d, "allow", call_rules)
	d.access == "read"
}

# --- privilege ---

test_privilege_via_match_set[note] if {
	some note, tc in {
		"group grant": {"inp": read_call},
		"user grant": {"inp": call(write_call, {"tool": tool(fs, "read_file")})},
		"group:everyone grant": {"inp": call(read_call, {"tool": {"ref": "tools/clock"}})},
		"narrowed grant naming the tool": {"inp": call(read_call, {
			"principal": {"id": "serviceaccount:orchestrator"},
			"tool": {"ref": "lush://writer"},
		})},
	}
	d := decide(tc.inp)
	"lush.privilege.tool_grant" in d.rules
	d.allow
}

test_no_grant[note] if {
	some note, tc in {
		"no grant at all": {
			"inp": call(read_call, {"tool": {"ref": "lush://writer"}}),
			"msg": "principal user:alice holds no grant on lush://writer: add a tool_grant with access \"read\" for one of user:alice, group:engineering, group:everyone",
		},
		"grant narrowed to another tool": {
			"inp": call(read_call, {
				"agent": "editor", "principal": {"id": "user:bob", "groups": ["group:writers"]},
				"tool": tool(fs, "list_directory"),
			}),
			"msg": sprintf("principal user:bob holds no grant on %s (list_directory): add a tool_grant with access \"read\" for one of user:bob, group:everyone, group:writers", [fs]),
		},
		"narrowed grant for a prompt": {
			"inp": call(read_call, {"action": "prompts/list", "agent": "researcher", "tool": {"ref": "mcp://narrow-docs"}}),
			"msg": "principal user:alice holds no grant on mcp://narrow-docs for prompts/list (grants narrowed with only do not cover resources or prompts): add a tool_grant with access \"read\" for one of user:alice, group:engineering, group:everyone",
		},
	}
	d := decide(tc.inp)
	"lush.privilege.no_grant" in rule_ids(d)
	not "lush.privilege.access_exceeded" in rule_ids(d)
	tc.msg in messages(d)
	d.allow == false
}

test_privilege_access_exceeded if {
	inp := call(write_call, {"principal": {"id": "user:dan", "groups": ["group:engineering", "group:writers"]}})
	proj := object.union(project, {"agents": {"editor": {"acl": {"execute": {"user:dan": true}}}}})
	d := decide_in(inp, proj)
	denied_by(d, {"lush.privilege.access_exceeded"})
	messages(d) == {sprintf("principal user:dan holds only read grants on %s (write_file), but the call needs \"write\": grant \"write\" to one of user:dan, group:engineering, group:everyone, group:writers", [fs])}
}

test_privilege_malformed_grant_access if {
	inp := call(read_call, {"agent": "broken", "action": "resources/read", "tool": {"ref": "mcp://weird"}})
	proj := object.union(project, {"grants": {"mcp://weird": {"group:everyone": [{"access": "root"}]}}})
	d := decide_in(inp, proj)
	"lush.privilege.access_exceeded" in rule_ids(d)
	"principal user:alice holds only root grants on mcp://weird for resources/read, but the call needs \"read\": grant \"read\" to one of user:alice, group:engineering, group:everyone" in messages(d)
}

# A grant without access counts as read; grants that are not objects are ignored.
test_grant_shapes if {
	inp := call(read_call, {"agent": "broken", "action": "resources/read", "tool": {"ref": "mcp://noaccess"}})
	"lush.privilege.tool_grant" in value("allow_rules", inp)
	writers := call(read_call, {"agent": "editor", "principal": carol, "tool": tool(fs, "read_file")})
	count(value("matching_grants", writers)) == 2
}

test_privilege_not_checked_without_valid_principal if {
	d := decide(call(read_call, {"principal": {"id": "nobody"}}))
	denied_by(d, {"lush.input.invalid"})
}

# Privilege does not depend on the agent: it is reported even for an unknown agent.
test_privilege_checked_for_unknown_agent if {
	d := decide(call(read_call, {"agent": "ghost", "tool": {"ref": "lush://writer"}}))
	denied_by(d, {"lush.agent.unknown", "lush.privilege.no_grant"})
}

# Grant lookups are indexed by the input: a grant on another ref never counts.
test_grant_on_other_ref_does_not_count if {
	proj := object.union(project, {"agents": {"researcher": {"tools": {"mcp://new": {"access": "read"}}}}})
	d := decide_in(call(read_call, {"tool": {"ref": "mcp://new", "name": "x"}}), proj)
	denied_by(d, {"lush.capability.access_exceeded", "lush.privilege.no_grant"})
}

# `only` must be an array: any other shape (object, string, null) admits nothing,
# in allowlist entries and in grants alike.
test_only_must_be_an_array[note] if {
	some note, only in {"object": {"x": "read_file"}, "string": "read_file", "null": null, "number": 1}
	proj := object.union(project, {
		"agents": {"researcher": {"tools": {"mcp://odd": {"access": "read", "only": only}}}},
		"grants": {"mcp://odd": {"group:engineering": [{"access": "read", "only": only}]}},
		"classes": {"mcp://odd": {"default": {"access": "read", "risk": "read"}}},
	})
	d := decide_in(call(read_call, {"tool": {"ref": "mcp://odd", "name": "read_file"}}), proj)
	denied_by(d, {"lush.capability.not_allowlisted", "lush.privilege.no_grant"})
}

# The same grant admits the call once its narrowing is a proper array.
test_only_array_admits if {
	proj := object.union(project, {
		"agents": {"researcher": {"tools": {"mcp://odd": {"access": "read", "only": ["read_file"]}}}},
		"grants": {"mcp://odd": {"group:engineering": [{"access": "read", "only": ["read_file"]}]}},
		"classes": {"mcp://odd": {"default": {"access": "read", "risk": "read"}}},
	})
	d := decide_in(call(read_call, {"tool": {"ref": "mcp://odd", "name": "read_file"}}), proj)
	allowed(d, "allow", call_rules)
}

# --- sessions (the mesh) ---

# A session (tools/list of a whole MCP server: how ext_authz decides an MCP
# session's own messages) reads, and an allowlist entry and a grant on the
# server admit it even when they are narrowed to named tools.
test_session_of_a_narrowed_server if {
	inp := call(read_call, {"action": "tools/list", "tool": {"ref": "mcp://narrow-docs"}})
	value("classification", inp) == {"access": "read", "risk": "read"}
	decide(inp).allow == true
}

test_session_needs_an_allowlist_entry_and_a_grant[note] if {
	some note, inp in {
		"server not allowlisted": call(read_call, {"action": "tools/list", "tool": {"ref": "mcp://github"}}),
		"no grant on the server": call(read_call, {"action": "tools/list", "tool": {"ref": "mcp://github"}, "agent": "editor"}),
	}
	decide(inp).allow == false
}

test_session_is_only_for_mcp_servers if {
	inp := call(read_call, {"action": "tools/list", "tool": {"ref": "tools/unclassified"}})
	value("classification", inp) == {"access": "write", "risk": "write"}
}

test_a_named_tools_list_is_not_a_session if {
	inp := call(read_call, {"action": "tools/list", "tool": tool("mcp://narrow-docs", "fetch")})
	decide(inp).allow == false
}
