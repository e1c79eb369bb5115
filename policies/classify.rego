package lush.authz

# Effective classification of the call: the access it needs and its risk.
#
# Tool actions use the project's classes: classes[ref].tools[name], else
# classes[ref].default, else the tool is unknown and treated as a write. The
# caller's access hint can only make the access stricter. Resources, prompts,
# agent invocations and loops are reads.

# The class declared for the tool, if any.
class_entry := c if {
	c := data.lush.project.classes[tool_ref].tools[tool_name]
	is_object(c)
} else := c if {
	c := data.lush.project.classes[tool_ref].default
	is_object(c)
}

# session: a tools/list of a whole MCP server, without a tool name. The mesh
# (ext_authz) decides the messages of an MCP session that name no tool so:
# initialize, ping, notifications, the server's event stream. It reads.
session if {
	input.action == "tools/list"
	tool_name == ""
	startswith(tool_ref, "mcp://")
}

# effective_access: the access the call needs ("read" or "write"). A class
# whose access is not "read" (including a malformed one) counts as write.
effective_access := "read" if {
	session
	not input.tool.access == "write"
} else := "read" if {
	input.action in {"tools/call", "tools/list"}
	class_entry.access == "read"
	not input.tool.access == "write"
} else := "write" if {
	input.action in {"tools/call", "tools/list"}
} else := "read"

# effective_risk: the risk class of the call. Unknown tools are "write", or
# "network"/"destructive" when the caller hints so.
effective_risk := "read" if {
	session
} else := r if {
	input.action in {"tools/call", "tools/list"}
	r := class_entry.risk
	r in {"read", "write", "network", "destructive"}
} else := r if {
	input.action in {"tools/call", "tools/list"}
	not class_entry
	r := input.tool.risk
	r in {"destructive", "network"}
} else := "write" if {
	input.action in {"tools/call", "tools/list"}
} else := "read"

# classification is the public view of the above for project policies:
# {"access": ..., "risk": ...}. It never depends on project policies, so
# project rules may read it (they must not read data.lush.authz.decision).
classification := {"access": effective_access, "risk": effective_risk}

# The call's description in messages: "ref (name)", or "ref" when there is no name.
tool_label := sprintf("%s (%s)", [tool_ref, tool_name]) if {
	tool_actions[action]
	tool_name != ""
} else := tool_ref
