package lush.policies.drafts_test

import data.lush.policies.drafts

call(name, args) := {
	"action": "tools/call",
	"tool": {"ref": "mcp://npx/@modelcontextprotocol/server-filesystem", "name": name},
	"arguments": args,
}

test_write_in_drafts_allowed if {
	count(drafts.deny) == 0 with input as call("write_file", {"path": "drafts/a.md", "content": "x"})
}

test_write_outside_drafts_denied if {
	some d in drafts.deny with input as call("write_file", {"path": "secrets.txt"})
	d.rule == "quickstart.drafts.outside"
}

test_dot_dot_escape_denied if {
	count(drafts.deny) == 1 with input as call("write_file", {"path": "drafts/../secrets.txt"})
}

test_move_checks_both_paths if {
	count(drafts.deny) == 1 with input as call("move_file", {"source": "drafts/a.md", "destination": "b.md"})
}

test_write_without_path_denied if {
	count(drafts.deny) == 1 with input as call("write_file", {"content": "x"})
}

test_reads_not_affected if {
	count(drafts.deny) == 0 with input as call("read_text_file", {"path": "/etc/passwd"})
}

test_other_servers_not_affected if {
	inp := object.union(call("write_file", {"path": "x"}), {"tool": {"ref": "mcp://notes.example.com/mcp", "name": "write_file"}})
	count(drafts.deny) == 0 with input as inp
}

# The decision as a whole: the base library allows alice's write, this policy denies it.
test_decision_denies_alice_outside_drafts if {
	inp := {
		"action": "tools/call",
		"principal": {"id": "user:alice", "groups": ["group:engineering"]},
		"agent": "orchestrator",
		"tool": {"ref": "mcp://npx/@modelcontextprotocol/server-filesystem", "name": "write_file"},
		"arguments": {"path": "notes.md"},
	}
	d := data.lush.authz.decision with input as inp
	not d.allow
	d.rules == ["quickstart.drafts.outside"]
}

test_decision_stubs_alice_in_drafts if {
	inp := {
		"action": "tools/call",
		"principal": {"id": "user:alice", "groups": ["group:engineering"]},
		"agent": "orchestrator",
		"tool": {"ref": "mcp://npx/@modelcontextprotocol/server-filesystem", "name": "write_file"},
		"arguments": {"path": "drafts/notes.md"},
	}
	d := data.lush.authz.decision with input as inp
	d.allow
	d.outcome == "stub"
}
