package lush.authz_test

# Shared fixtures of the library's tests: a project extending the quickstart of
# the policy contract, base inputs, and helpers that evaluate the decision
# hermetically (project policies are mocked out unless a test supplies some).

fs := "mcp://npx/@modelcontextprotocol/server-filesystem"

project := {
	"name": "quickstart",
	"settings": {"max_depth": 5, "approval_risks": ["destructive"]},
	"service_accounts": {"digest-bot": true},
	"agents": {
		"researcher": {
			"tools": {
				fs: {"access": "read", "only": ["read_file", "list_directory"]},
				"lush://writer": {"access": "read"},
				"tools/clock": {"access": "read"},
				"tools/unclassified": {"access": "read"},
				"mcp://docs": {"access": "read"},
				"mcp://narrow-docs": {"access": "read", "only": ["search"]},
			},
			"acl": {"execute": {"group:engineering": true, "serviceaccount:orchestrator": true}},
		},
		"editor": {
			"tools": {
				fs: {"access": "write"},
				"tools/shell": {"access": "write"},
				"tools/unclassified": {"access": "write"},
				"mcp://github": {"access": "write", "only": ["create_issue"]},
			},
			"acl": {"execute": {"user:carol": true, "group:writers": true, "user:mallory": "yes"}},
		},
		"broken": {
			"tools": {
				fs: {"access": "read", "only": null},
				"mcp://weird": {"access": "admin"},
				"mcp://noaccess": {},
				"tools/notobject": true,
			},
			"acl": {"execute": {"group:everyone": true}},
		},
		"public": {"acl": {"execute": {"group:everyone": true}}},
		"notobject": "researcher",
	},
	"loops": {
		"daily-digest": {
			"agent": "helper",
			"run_as": "serviceaccount:digest-bot",
			"acl": {"execute": {"group:ops": true}, "read": {"group:everyone": true}},
		},
		"ops-only": {"acl": {"execute": {"group:ops": true}}},
		"notobject": 5,
	},
	"grants": {
		fs: {
			"group:engineering": [{"access": "read"}],
			"serviceaccount:digest-bot": [{"access": "write", "only": ["write_file"]}],
			"user:carol": [{"access": "write"}],
			"group:writers": [{"access": "read", "only": ["read_file"]}, "not an object"],
		},
		"mcp://docs": {"group:everyone": [{"access": "read"}]},
		"mcp://narrow-docs": {"group:engineering": [{"access": "read", "only": ["search"]}]},
		"mcp://weird": {"group:everyone": [{"access": "read"}]},
		"mcp://noaccess": {"group:everyone": [{}]},
		"mcp://github": {"user:carol": [{"access": "write", "only": ["create_issue"]}]},
		"tools/clock": {"group:everyone": [{"access": "read"}]},
		"tools/shell": {"user:carol": [{"access": "write"}]},
		"tools/unclassified": {"group:engineering": [{"access": "read"}], "user:carol": [{"access": "write"}]},
		"lush://writer": {"serviceaccount:orchestrator": [{"access": "read"}]},
	},
	"roles": {
		"audit": {"group:auditors": true, "user:erin": true, "user:mallory": "yes"},
		"approve": {"group:security": true},
		"budget": {"group:finance": true},
	},
	"classes": {
		fs: {
			"tools": {
				"read_file": {"access": "read", "risk": "read"},
				"write_file": {"access": "write", "risk": "destructive"},
				"bad_class": {"access": "admin", "risk": "unheard-of"},
				"not_object": "read",
			},
			"default": {"access": "read", "risk": "read"},
		},
		"lush://writer": {"default": {"access": "read", "risk": "read"}},
		"tools/clock": {"default": {"access": "read", "risk": "read"}},
		"tools/shell": {"default": {"access": "write", "risk": "destructive"}},
		"mcp://github": {"tools": {"create_issue": {"access": "write", "risk": "network"}}},
	},
}

# index: data.lush.index of project, as the compiler writes it (authz.Index; the Go
# tests check that it is). The helpers below evaluate with it, so that the fast
# path's lookups are exercised; decide_in evaluates without one.
index := {
	"execute": {
		"broken": {
			"group:everyone": true,
		},
		"editor": {
			"group:writers": true,
			"user:carol": true,
		},
		"public": {
			"group:everyone": true,
		},
		"researcher": {
			"group:engineering": true,
			"serviceaccount:orchestrator": true,
		},
	},
	"read": {
		"editor": {
			fs: {
				"names": {
					"bad_class": {},
					"read_file": {
						"principals": {
							"group:engineering": true,
							"group:writers": true,
							"user:carol": true,
						},
						"risk": "read",
					},
					"write_file": {},
				},
				"other": {
					"principals": {
						"group:engineering": true,
						"user:carol": true,
					},
					"risk": "read",
				},
			},
		},
		"researcher": {
			"lush://writer": {
				"names": {},
				"other": {
					"principals": {
						"serviceaccount:orchestrator": true,
					},
					"risk": "read",
				},
			},
			fs: {
				"names": {
					"list_directory": {
						"principals": {
							"group:engineering": true,
							"user:carol": true,
						},
						"risk": "read",
					},
					"read_file": {
						"principals": {
							"group:engineering": true,
							"group:writers": true,
							"user:carol": true,
						},
						"risk": "read",
					},
				},
				"other": {},
			},
			"tools/clock": {
				"names": {},
				"other": {
					"principals": {
						"group:everyone": true,
					},
					"risk": "read",
				},
			},
		},
	},
}

# alice: an engineer who may run the researcher and read the filesystem.
alice := {"id": "user:alice", "groups": ["group:engineering"]}

# carol: may run the editor and write the filesystem.
carol := {"id": "user:carol", "groups": ["group:writers"]}

read_call := {
	"action": "tools/call",
	"principal": alice,
	"agent": "researcher",
	"chain": ["researcher"],
	"depth": 1,
	"tool": {"ref": fs, "name": "read_file", "access": "read", "risk": "read"},
	"arguments": {"path": "/data/x"},
	"live_writes": false,
	"environment": "dev",
}

write_call := {
	"action": "tools/call",
	"principal": carol,
	"agent": "editor",
	"tool": {"ref": fs, "name": "write_file"},
	"arguments": {"path": "/data/x", "content": "secret-argument-value"},
	"environment": "dev",
}

# zoe: an auditor through her group.
zoe := {"id": "user:zoe", "groups": ["group:auditors"]}

audit_read(principal) := {"action": "audit/read", "principal": principal}

# sam: an approver through his group.
sam := {"id": "user:sam", "groups": ["group:security"]}

approval_read(principal) := {"action": "approval/read", "principal": principal}

approval_decide(principal, requester) := {
	"action": "approval/decide",
	"principal": principal,
	"arguments": {"approval": "0193a", "decision": "approve", "requester": requester},
}

loop_call(action, loop, principal) := {"action": action, "loop": loop, "principal": principal}

# call(base, patch): base with its top-level fields replaced by those of patch
# (a shallow merge: object.union would merge nested objects).
call(base, patch) := object.union(object.remove(base, object.keys(patch)), patch)

# decide(inp): the decision for inp over the fixture project, no project policies.
decide(inp) := d if {
	d := data.lush.authz.decision with input as inp
		with data.lush.project as project
		with data.lush.index as index
		with data.lush.policies as {}
}

# decide_in(inp, proj): the decision over another project document.
decide_in(inp, proj) := d if {
	d := data.lush.authz.decision with input as inp
		with data.lush.project as proj
		with data.lush.policies as {}
}

# decide_with(inp, policies): the decision with mocked project policy documents.
decide_with(inp, policies) := d if {
	d := data.lush.authz.decision with input as inp
		with data.lush.project as project
		with data.lush.index as index
		with data.lush.policies as policies
}

# value(name, inp): a rule of lush.authz for inp over the fixture project.
value(name, inp) := v if {
	v := data.lush.authz[name] with input as inp
		with data.lush.project as project
		with data.lush.policies as {}
}

rule_ids(d) := {r.rule | some r in d.reasons}

# member(xs, x): whether x is in xs, as a boolean (never undefined).
member(xs, x) if {
	x in xs
} else := false

messages(d) := {r.message | some r in d.reasons}

# denied_by(d, ids): d denies with exactly the rule ids ids.
denied_by(d, ids) if {
	d.allow == false
	d.outcome == "deny"
	d.stub == false
	d.approval_required == false
	d.approvals == []
	rule_ids(d) == ids
	d.rules == sort(ids)
}

# allowed(d, outcome, rules): d allows with that outcome and exactly those rules.
allowed(d, outcome, rules) if {
	d.allow == true
	d.outcome == outcome
	d.reasons == []
	d.rules == sort(rules)
}

call_rules := {"lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant"}

# fay: a holder of the budget role through her group.
fay := {"id": "user:fay", "groups": ["group:finance"]}

budget_read(principal) := {"action": "budget/read", "principal": principal}

budget_top_up(principal) := {
	"action": "budget/top-up",
	"principal": principal,
	"arguments": {"budget": "researcher-tokens", "subject": "researcher", "amount": 1000, "reason": "quarter end"},
}
