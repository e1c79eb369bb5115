# METADATA
# title: Writes only during business hours
# description: |
#   Denies calls that need write access outside 08:00-18:00 UTC, Monday to
#   Friday. Reads are always allowed. Tests fix the clock with
#   `with time.now_ns as ...`.
package lush.policies.business_hours

deny contains msg if {
	input.action == "tools/call"
	data.lush.authz.classification.access == "write"
	not business_hours(time.now_ns())
	msg := "write calls are allowed only on weekdays between 08:00 and 18:00 UTC"
}

business_hours(ns) if {
	not time.weekday(ns) in {"Saturday", "Sunday"}
	[hour, _, _] := time.clock(ns)
	hour >= 8
	hour < 18
}
