package lush.policies.approve_destructive_test

import data.lush.policies.approve_destructive as policy

fs := "mcp://npx/@modelcontextprotocol/server-filesystem"

project := {
	"agents": {"editor": {
		"tools": {fs: {"access": "write"}, "tools/shell": {"access": "write"}},
		"acl": {"execute": {"user:carol": true}},
	}},
	"grants": {
		fs: {"user:carol": [{"access": "write"}]},
		"tools/shell": {"user:carol": [{"access": "write"}]},
	},
	"classes": {fs: {"tools": {
		"read_file": {"access": "read", "risk": "read"},
		"write_file": {"access": "write", "risk": "destructive"},
	}}},
	"settings": {"approval_risks": []},
}

call(env, tool) := {
	"action": "tools/call",
	"principal": {"id": "user:carol"},
	"agent": "editor",
	"tool": tool,
	"arguments": {"path": "/srv/data/x"},
	"environment": env,
}

test_approvals[note] if {
	some note, tc in {
		"destructive in prod": {"env": "prod", "tool": {"ref": fs, "name": "write_file"}, "approval": true},
		"destructive in dev": {"env": "dev", "tool": {"ref": fs, "name": "write_file"}, "approval": false},
		"read in prod": {"env": "prod", "tool": {"ref": fs, "name": "read_file"}, "approval": false},
		"unclassified, destructive hint": {"env": "prod", "tool": {"ref": "tools/shell", "risk": "destructive"}, "approval": true},
		"unclassified, no hint": {"env": "prod", "tool": {"ref": "tools/shell"}, "approval": false},
	}
	needs_approval(call(tc.env, tc.tool)) == tc.approval
}

needs_approval(inp) if {
	count(policy.approval) > 0 with input as inp with data.lush.project as project
} else := false

test_message if {
	policy.approval == {{
		"rule": "example.prod.approve_destructive",
		"message": "tools/shell is destructive: a human must approve it in prod",
	}} with input as call("prod", {"ref": "tools/shell", "risk": "destructive"}) with data.lush.project as project
}

# In the decision: the base allows the write, the project requires approval.
# (settings.approval_risks is [] above, so the base itself asks for none.)
test_decision_requires_approval if {
	d := data.lush.authz.decision with input as call("prod", {"ref": fs, "name": "write_file"})
		with data.lush.project as project
		with time.now_ns as time.parse_rfc3339_ns("2026-01-05T10:00:00Z")
	d.allow
	d.outcome == "approval_required"
	d.approvals == [{
		"rule": "example.prod.approve_destructive",
		"message": sprintf("%s (write_file) is destructive: a human must approve it in prod", [fs]),
	}]
	"example.prod.approve_destructive" in d.rules
}
