package lush.policies.business_hours_test

import data.lush.policies.business_hours as policy

project := {
	"agents": {"editor": {"tools": {"tools/shell": {"access": "write"}, "tools/clock": {"access": "read"}}, "acl": {"execute": {"user:carol": true}}}},
	"grants": {"tools/shell": {"user:carol": [{"access": "write"}]}, "tools/clock": {"user:carol": [{"access": "read"}]}},
	"classes": {"tools/clock": {"default": {"access": "read", "risk": "read"}}},
}

call(ref) := {"action": "tools/call", "principal": {"id": "user:carol"}, "agent": "editor", "tool": {"ref": ref}}

at(timestamp) := time.parse_rfc3339_ns(timestamp)

# 2026-01-05 is a Monday, 2026-01-09 a Friday, 2026-01-10 a Saturday.
test_writes_by_time[timestamp] if {
	some timestamp, denied in {
		"2026-01-05T08:00:00Z": false,
		"2026-01-05T12:30:00Z": false,
		"2026-01-09T17:59:59Z": false,
		"2026-01-05T07:59:59Z": true,
		"2026-01-05T18:00:00Z": true,
		"2026-01-10T12:00:00Z": true,
		"2026-01-11T09:00:00Z": true,
	}
	denies_write_at(timestamp) == denied
}

denies_write_at(timestamp) if {
	count(policy.deny) > 0 with input as call("tools/shell")
		with data.lush.project as project
		with time.now_ns as at(timestamp)
} else := false

test_reads_any_time if {
	count(policy.deny) == 0 with input as call("tools/clock")
		with data.lush.project as project
		with time.now_ns as at("2026-01-10T03:00:00Z")
}

test_decision_on_saturday if {
	d := data.lush.authz.decision with input as call("tools/shell")
		with data.lush.project as project
		with time.now_ns as at("2026-01-10T12:00:00Z")
	d.allow == false
	d.reasons == [{
		"rule": "lush.policies.business_hours",
		"message": "write calls are allowed only on weekdays between 08:00 and 18:00 UTC",
	}]
}

test_decision_on_monday if {
	d := data.lush.authz.decision with input as call("tools/shell")
		with data.lush.project as project
		with time.now_ns as at("2026-01-05T10:00:00Z")
	d.allow
	d.outcome == "stub"
}
