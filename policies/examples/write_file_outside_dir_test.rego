package lush.policies.write_file_outside_dir_test

import data.lush.policies.write_file_outside_dir as policy

fs := "mcp://npx/@modelcontextprotocol/server-filesystem"

write(path) := {
	"action": "tools/call",
	"principal": {"id": "user:carol"},
	"agent": "editor",
	"tool": {"ref": fs, "name": "write_file"},
	"arguments": {"path": path, "content": "hello"},
}

test_paths[path] if {
	some path, denied in {
		"/srv/data/report.txt": false,
		"/srv/data/a/b/c.txt": false,
		"/srv/data//double-slash.txt": false,
		"/srv/data/..hidden": false,
		"/srv/data/../etc/passwd": true,
		"/srv/data/a/../../etc/passwd": true,
		"/srv/data/./x": true,
		"/srv/data/..": true,
		"/srv/database/x": true,
		"/srv/data": true,
		"/etc/passwd": true,
		"srv/data/x": true,
		"": true,
	}
	denies(write(path)) == denied
}

denies(inp) if {
	count(policy.deny) > 0 with input as inp
} else := false

test_missing_or_non_string_path_denied if {
	count(policy.deny) == 1 with input as object.remove(write("x"), ["arguments"])
	count(policy.deny) == 1 with input as write(["/srv/data/x"])
}

test_message_names_the_rule_not_the_path if {
	policy.deny == {{
		"rule": "example.fs.write_outside_dir",
		"message": "write_file may only write files under /srv/data/ (no . or .. segments)",
	}} with input as write("/etc/shadow")
}

test_other_calls_unaffected[note] if {
	some note, inp in {
		"read_file": object.union(write("/etc/passwd"), {"tool": {"name": "read_file"}}),
		"other server": object.union(write("/etc/passwd"), {"tool": {"ref": "mcp://other"}}),
		"tools/list": object.union(write("/etc/passwd"), {"action": "tools/list"}),
	}
	count(policy.deny) == 0 with input as inp
}

# In the decision, the project denial denies a call the base allows.
test_decision_denies if {
	project := {
		"agents": {"editor": {"tools": {fs: {"access": "write"}}, "acl": {"execute": {"user:carol": true}}}},
		"grants": {fs: {"user:carol": [{"access": "write"}]}},
	}
	ok := data.lush.authz.decision with input as write("/srv/data/x")
		with data.lush.project as project
		with time.now_ns as time.parse_rfc3339_ns("2026-01-05T10:00:00Z")
	ok.allow
	bad := data.lush.authz.decision with input as write("/srv/data/../../etc/passwd")
		with data.lush.project as project
		with time.now_ns as time.parse_rfc3339_ns("2026-01-05T10:00:00Z")
	bad.allow == false
	bad.reasons == [{
		"rule": "example.fs.write_outside_dir",
		"message": "write_file may only write files under /srv/data/ (no . or .. segments)",
	}]
}
