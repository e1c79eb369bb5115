package lush.authz

# The decision: data.lush.authz.decision. It is defined for every input, even
# {} or values of the wrong type; anything it cannot make sense of denies.
#
# Deny wins: any base or project denial denies. Otherwise the call is allowed
# only with positive evidence: the input is well formed and the allow-side
# rules its action requires matched; missing evidence denies through
# lush.default.deny (fail closed). An allowed call may still need approval
# (outcome "approval_required") or be stubbed (outcome "stub").

decision := {
	"allow": true,
	"outcome": allowed_outcome,
	"stub": stubbed,
	"approval_required": approval_required,
	"access": effective_access,
	"risk": effective_risk,
	"reasons": [],
	"approvals": approvals,
	"rules": allowed_rules,
} if {
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

default allow := false

allow if {
	count(denials) == 0
	allow_evidence
}

denials := deny | project_denials

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
}

# allow_evidence: the input is well formed and every allow-side rule the
# action requires matched.
allow_evidence if {
	input_ok
	count(required_rules[action] - allow_rules) == 0
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
# base's own stub rule is tools/call only already); approvals any action.
approval_entries := approval | project_approvals

stub_entries := stub | project_stubs if {
	input.action == "tools/call"
} else := set()

default approval_required := false

approval_required if {
	allow
	count(approval_entries) > 0
}

default stubbed := false

stubbed if {
	allow
	count(stub_entries) > 0
}

allowed_outcome := "approval_required" if {
	approval_required
} else := "stub" if {
	stubbed
} else := "allow"

approvals := sorted_entries(approval_entries) if {
	approval_required
} else := []

# The rules of an allowed decision: the allow-side rules that matched, plus
# the rules that stub it or ask for approval.
allowed_rules := sort(allow_rules | restricting_rules)

restricting_rules := {e.rule | some e in approval_entries} | {e.rule | some e in stub_entries} if {
	stubbed
} else := {e.rule | some e in approval_entries}

# sorted_entries(s): the {"rule", "message"} objects of s sorted by rule, then message.
sorted_entries(s) := [{"rule": t[0], "message": t[1]} | some t in sort({[e.rule, e.message] | some e in s})]
