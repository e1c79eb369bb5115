# METADATA
# title: Drafts only
# description: |
#   The filesystem server (rooted at the project's data/ directory) may write only under drafts/.
#   Paths are relative to that root, as the server resolves them; absolute paths are refused.
package lush.policies.drafts

write_tools := {"write_file", "edit_file", "create_directory", "move_file"}

filesystem := "mcp://npx/@modelcontextprotocol/server-filesystem"

# METADATA
# title: Writes stay in drafts/
# custom:
#   id: quickstart.drafts.outside
deny contains {"rule": rego.metadata.rule().custom.id, "message": msg} if {
	input.action == "tools/call"
	input.tool.ref == filesystem
	input.tool.name in write_tools
	some path in paths
	not in_drafts(path)
	msg := sprintf("%s may only write under drafts/, a path relative to the data directory", [input.tool.name])
}

# The paths a call touches (move_file has two). A write that names no path at all is denied
# too: the policy cannot tell where it would write.
paths contains input.arguments.path

paths contains input.arguments.source

paths contains input.arguments.destination

paths contains "<none>" if {
	not input.arguments.path
	not input.arguments.source
	not input.arguments.destination
}

in_drafts(path) if {
	is_string(path)
	not contains(path, "..")
	some prefix in ["drafts/", "./drafts/"]
	startswith(path, prefix)
}
