package lush.authz

# The decision: data.lush.authz.decision. It is defined for every input, even
# {} or values of the wrong type; anything it cannot make sense of denies.
#
# Deny wins: any base or project denial denies. Otherwise the call is allowed
# only with positive evidence: the input is well formed and the allow-side
# rules its action requires matched; missing evidence denies through
# lush.default.deny (fail closed). An allowed call may still need approval
# (outcome "approval_required") or be stubbed (outcome "stub").
#
# Evaluation takes the cheapest branch that applies: a read tools/call of the
# shape every enforcement point sends, allowed outright (the most common call),
# is decided by one rule, fast_read; a tools/call of that shape that the
# agent, capability or privilege rules deny, by those rules and the project's
# (fast_deny); another allowed call with the complete evidence and no denial,
# approval or stub builds its decision from a few rules; an allowed call with
# approvals or stubs adds those; only the remaining calls that may be denied
# evaluate every deny rule. All five branches give exactly the decision the
# last two alone would give (the tests compare them on random inputs).

decision := {
	"allow": true,
	"outcome": "allow",
	"stub": false,
	"approval_required": false,
	"access": "read",
	"risk": r, # effective_risk when fast_read holds
	"reasons": [],
	"approvals": [],
	"rules": ["lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant"],
} if {
	r := fast_read
	is_string(r) # false when a test turns the fast path off (with fast_read as false)
} else := {
	"allow": false,
	"outcome": "deny",
	"stub": false,
	"approval_required": false,
	"access": effective_access,
	"risk": effective_risk,
	"reasons": sorted_entries(call_denials),
	"approvals": [],
	"rules": sort({d.rule | some d in call_denials}),
} if {
	fast_deny
} else := {
	"allow": true,
	"outcome": "allow",
	"stub": false,
	"approval_required": false,
	"access": effective_access,
	"risk": effective_risk,
	"reasons": [],
	"approvals": [],
	"rules": sort(allow_rules),
} if {
	nothing_denies
	plain
} else := allowed_decision if {
	nothing_denies
} else := allowed_decision if {
	allow
} else := {
	"allow": false,
	"outcome": "deny",
	"stub": false,
	"approval_required": false,
	"access": effective_access,
	"risk": effective_risk,
	"reasons": sorted_entries(all_denials),
	"approvals": [],
	"rules": sort({d.rule | some d in all_denials}),
}

# The decision of an allowed call.
allowed_decision := {
	"allow": true,
	"outcome": allowed_outcome,
	"stub": has_stubs,
	"approval_required": has_approvals,
	"access": effective_access,
	"risk": effective_risk,
	"reasons": [],
	"approvals": sorted_entries(approval_entries),
	"rules": sort(allow_rules | restricting_rules),
}

# nothing_denies: the allow-side evidence the action requires is complete and
# no deny rule fires. With that evidence no base deny rule can fire except
# lush.depth.exceeded, lush.schema.invalid_arguments, lush.tool.refused,
# lush.rate.limited, lush.budget.exhausted and lush.approval.self: every other
# one needs a piece of the evidence to be missing, a well-formedness problem or
# another action.
# So nothing_denies implies allow without evaluating the base deny rules (the
# tests check it).
nothing_denies if {
	allow_evidence
	not depth_exceeded
	not arguments_invalid
	not tool_refused
	not rate_limited
	not budget_exhausted
	not self_approval
	count(project_denials) == 0
}

# fast_read: a tools/call that reads, allowed with no approval and no stub,
# checked in one body rather than through allow_rules (whose every body the
# branch below evaluates). It implies nothing_denies and plain, and then
# allow_rules is exactly the three ids of the decision above: a well-formed
# input (with a tool name, and an access hint that cannot make the call a
# write); a class that reads, at a risk that needs no approval; the
# allowlist entry and a grant at read or write admitting the tool (capability_ok
# and privilege_ok for a read); execute on the agent; a depth within max_depth
# (depth_within);
# no schema verdict, refusal, rate limit, exhausted budget or approved approval
# (which might add lush.approval.granted); no project denial, approval or stub.
# Its value is the call's risk (class_entry.risk), which the decision reads
# (one rule reference rather than two). It may hold for fewer inputs than
# these conditions describe (absent or null groups, live_writes: the branches
# below decide those), never for more. The
# agent, capability, privilege and class checks are lookups into
# data.lush.index, which the compiler derives from data.lush.project
# (authz.Index): read[agent][ref] holds, per tool name ("other" for the names
# no rule singles out), the risk and the principals whose grant admits the
# name, when the allowlist admits it and its class reads at a risk needing no
# approval; execute[agent] the principals holding execute. Without an index
# (or when it says no) the branches below decide. The index must be the one
# its project data gives (an index claiming more would allow what the rules
# deny): Lush's engine refuses a bundle whose index is not, and so does the
# build. A test that mocks part of data.lush.project over a compiled bundle
# must turn the index off too (with data.lush.index as {}), or the fast path
# reads the compiled project's index (lushctl policy test leaves the index out).
fast_read := r if {
	input.action == "tools/call"
	name := input.tool.name
	is_string(name)
	ix := data.lush.index.read[input.agent][input.tool.ref]
	e := object.get(ix.names, name, ix.other)
	r := e.risk # only an entry that admits the name has one

	# input.tool is an object here (object.get errors on other values)
	object.get(input.tool, "access", null) in {null, "", "read"}

	# input_ok's first body, inline and narrower: agent_name and tool_ref hold
	# as the index has no "" key; groups, chain, depth and live_writes must be
	# present (absent or null ones take the branches below).
	id := input.principal.id
	is_string(id)
	regex.match(`^(user|group|serviceaccount):[\s\S]`, id)
	gs := input.principal.groups
	is_array(gs)
	every g in gs {
		is_string(g)
		startswith(g, "group:") # regex ^group:[\s\S]
		g != "group:"
	}
	object.get(input.tool, "risk", null) in {null, "", "read", "write", "network", "destructive"}
	is_array(input.chain)
	every x in input.chain {
		is_string(x)
	}
	is_number(input.depth)
	is_boolean(input.live_writes)

	principal_in(e.principals)
	principal_in(data.lush.index.execute[input.agent])
	object.get(input.tool, "arguments_valid", null) in {null, true}
	object.get(input.tool, "refusal", null) in {null, ""}
	count(input.chain) <= max_depth # depth_within, inline
	input.depth <= max_depth
	not call_extras
	not project_entry_given
}

# call_extras: a rate limit, a budget or an approval that fast_read leaves to
# the branches below: rate_limited and budget_exhausted (limits.rego) inline,
# and any approved approval (approval_granted needs one, and more).
call_extras if {
	input.rate_limit != null
	not rate_limit_clear
}

call_extras if {
	type_name(input.budget) != "null"
	not budget_clear
}

call_extras if input.approval.status == "approved"

# fast_deny: a well-formed tools/call that one of the agent, capability and
# privilege rules (call_deny) denies, with none of the inputs that only other
# deny rules read: a depth within max_depth (depth_within), no schema verdict, refusal, rate
# limit or exhausted budget. Then deny (the other base deny rules) is empty:
# each needs a malformed input, another action or one of those inputs; and
# lush.default.deny cannot fire, as something denies. So its decision
# lists call_deny and the project denials, as the full evaluation would (the
# tests compare them), without evaluating the deny rules, the allow-side
# rules or the well-formedness problems.
fast_deny if {
	input.action == "tools/call"

	# With the checks below, call_deny is empty exactly when the call has the
	# evidence: checked first, so that an allowed call leaves at once (its
	# branch reads the same rules).
	not call_evidence
	input_ok
	depth_within
	not arguments_invalid
	not tool_refused
	not rate_limited
	not budget_exhausted
	count(call_deny) > 0
}

call_evidence if {
	has_agent_execute
	capability_ok
	privilege_ok
}

call_denials := call_deny | project_denials

# depth_within: a chain and a depth, both within max_depth, as every
# enforcement point sends them. It implies not depth_exceeded (depth is the
# larger of the two) without building the depth; with either absent it does not
# hold, and the call takes a branch that evaluates depth_exceeded.
depth_within if {
	is_array(input.chain)
	is_number(input.depth)
	count(input.chain) <= max_depth
	input.depth <= max_depth
}

# project_entry_given: some project policy gives a denial, an approval or a
# stub, without normalizing the entries: project_entries (project.rego) is
# empty exactly for the values set(), [], false and {}.
project_entry_given if {
	some kind in ["deny", "approval", "stub"] # one body: fewer evaluations than three
	some name
	v := data.lush.policies[name][kind]
	not endswith(name, "_test")
	not v in {set(), [], false, {}}
}

# principal_in(s): some principal of the match set (principals) is a key of s,
# for a well-formed input (input_ok), without building the set: the caller's
# id, group:everyone, or one of its groups.
principal_in(s) if s[input.principal.id]

principal_in(s) if s["group:everyone"]

principal_in(s) if {
	some g in input.principal.groups
	s[g]
}

# plain: an allowed call would need no approval and would not be stubbed.
# (Project stubs count only for tools/call; a call of another action with
# project stubs takes the second branch, which ignores them.)
plain if {
	no_approval_needed
	count(stub) == 0
	count(project_stubs) == 0
}

no_approval_needed if {
	count(approval) == 0
	count(project_approvals) == 0
}

no_approval_needed if approval_granted

default allow := false

allow if {
	count(denials) == 0
	allow_evidence
}

# The base denials are deny and call_deny (the agent, capability and privilege
# rules, which fast_deny evaluates alone).
denials := (deny | call_deny) | project_denials

all_denials := denials | fallback_deny

# The allow-side rule ids each action requires.
required_rules := {
	"tools/call": {"lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant"},
	"tools/list": {"lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant"},
	"resources/list": {"lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant"},
	"resources/read": {"lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant"},
	"prompts/list": {"lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant"},
	"prompts/get": {"lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant"},
	"agent/invoke": {"lush.acl.agent_execute"},
	"loop/trigger": {"lush.acl.loop_execute"},
	"loop/read": {"lush.acl.loop_read"},
	"audit/read": {"lush.role.audit"},
	"approval/read": {"lush.role.approval_read"},
	"approval/decide": {"lush.role.approve"},
	"budget/read": {"lush.role.budget_read"},
	"budget/top-up": {"lush.role.budget"},
	"sampling/createMessage": {"lush.server_request.call_allowed"},
	"elicitation/create": {"lush.server_request.call_allowed"},
	"roots/list": {"lush.server_request.call_allowed"},
}

# allow_evidence: the input is well formed and every allow-side rule the
# action requires matched.
allow_evidence if {
	input_ok
	count(required_rules[input.action] - allow_rules) == 0
}

# METADATA
# title: No rule allows the call
# description: |
#   Fail-closed backstop: no base or project rule denied the call, but the
#   input is not well formed or the allow-side rules its action requires did
#   not all match.
# custom:
#   id: lush.default.deny
fallback_deny contains d if {
	count(denials) == 0
	not allow_evidence
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": fallback_message,
	}
}

fallback_message := sprintf("no rule allows %s: it needs %s", [action, concat(", ", sort(missing))]) if {
	input_ok
	missing := required_rules[action] - allow_rules
} else := "no rule allows the call: the input is not well formed"

# Approvals and stubs of an allowed call. Stubs only concern tools/call (the
# base's own stub rule is tools/call only already); approvals any action, and
# none once a person approved the call (approvals.rego).
approval_entries := set() if {
	approval_granted
} else := approval | project_approvals

stub_entries := stub | project_stubs if {
	input.action == "tools/call"
} else := set()

has_approvals := count(approval_entries) > 0

has_stubs := count(stub_entries) > 0

default approval_required := false

approval_required if {
	allow
	has_approvals
}

default stubbed := false

stubbed if {
	allow
	has_stubs
}

allowed_outcome := "approval_required" if {
	has_approvals
} else := "stub" if {
	has_stubs
} else := "allow"

# The rules that stub an allowed call or ask for approval; with the allow-side
# rules that matched, they are the rules of an allowed decision.
restricting_rules := {e.rule | some e in approval_entries} | {e.rule | some e in stub_entries}

# sorted_entries(s): the {"rule", "message"} objects of s sorted by rule, then message.
sorted_entries(s) := [{"rule": t[0], "message": t[1]} | some t in sort({[e.rule, e.message] | some e in s})]
