package lush.policies.no_sampling_test

search := "mcp://npx/web-search-mcp"

fs := "mcp://npx/@modelcontextprotocol/server-filesystem"

project := {
	"agents": {"researcher": {
		"tools": {search: {}, fs: {}},
		"acl": {"execute": {"user:alice": true}},
	}},
	"grants": {search: {"user:alice": [{}]}, fs: {"user:alice": [{}]}},
}

# request(action, ref): a server request of ref during an allowed call.
request(action, ref) := {
	"action": action,
	"principal": {"id": "user:alice", "groups": []},
	"agent": "researcher",
	"chain": ["researcher"],
	"depth": 1,
	"tool": {"ref": ref, "name": "search"},
	"live_writes": false,
	"call": {"decision_id": "d-1", "action": "tools/call", "outcome": "allow"},
}

test_no_sampling[note] if {
	some note, tc in {
		"sampling by the search server": {"inp": request("sampling/createMessage", search), "allow": false},
		"elicitation by the search server": {"inp": request("elicitation/create", search), "allow": true},
		"roots by the search server": {"inp": request("roots/list", search), "allow": true},
		"sampling by another server": {"inp": request("sampling/createMessage", fs), "allow": true},
	}
	d := data.lush.authz.decision with input as tc.inp
		with data.lush.project as project
		with data.lush.index as {}
	d.allow == tc.allow
}

test_denial_reason if {
	d := data.lush.authz.decision with input as request("sampling/createMessage", search)
		with data.lush.project as project
		with data.lush.index as {}
	d.reasons == [{"rule": "example.no_sampling", "message": sprintf("%s may not ask the client's model for completions (sampling)", [search])}]
}
