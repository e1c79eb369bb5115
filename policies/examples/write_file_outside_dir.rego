# METADATA
# title: Filesystem writes stay under /srv/data/
# description: |
#   Denies write_file calls of the filesystem MCP server whose path argument is
#   not under /srv/data/. Paths with "." or ".." segments are denied instead of
#   normalized, so "/srv/data/../etc/passwd" cannot escape the directory.
package lush.policies.write_file_outside_dir

filesystem := "mcp://npx/@modelcontextprotocol/server-filesystem"

root := "/srv/data/"

deny contains {"rule": "example.fs.write_outside_dir", "message": msg} if {
	input.action == "tools/call"
	input.tool.ref == filesystem
	input.tool.name == "write_file"
	not inside_root
	msg := sprintf("write_file may only write files under %s (no . or .. segments)", [root])
}

# A rule, not a function: `not f(input.arguments.path)` would be undefined, not
# true, when the argument is missing, and the call would slip through.
inside_root if {
	path := input.arguments.path
	is_string(path)
	startswith(path, root)
	not dot_segment(path)
}

dot_segment(path) if {
	some segment in split(path, "/")
	segment in {".", ".."}
}
