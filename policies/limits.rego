package lush.authz

# Rate limits (lush.yaml rate_limits). The enforcer keeps the token buckets:
# before the decision it takes a token from every bucket that applies to the
# call, and when one is empty it sends input.rate_limit:
#
#   {"exceeded": true, "limit": "group:contractors 5/s burst 10", "retry_after_ms": 200}
#
# Absent or null, or exceeded false: no limit is exceeded. Anything else
# (exceeded true, or a malformed rate_limit) denies: fail closed.

rate_limited if {
	input.rate_limit != null
	not rate_limit_clear
}

rate_limit_clear if input.rate_limit.exceeded == false

# The limit as the enforcer names it.
rate_limit_label := l if {
	l := input.rate_limit.limit
	is_string(l)
	l != ""
} else := "(unnamed)"

rate_limit_retry := sprintf("retry after %v ms", [ms]) if {
	ms := input.rate_limit.retry_after_ms
	is_number(ms)
	ms >= 0
} else := "retry later"

# METADATA
# title: Rate limit exceeded
# description: |
#   The call exceeds one of the project's rate_limits (lush.yaml): the
#   enforcer found the token bucket of the limit empty and said so in
#   input.rate_limit. The message names the limit and when a retry can
#   succeed (input.rate_limit.retry_after_ms); HTTP APIs answer 429 with a
#   Retry-After header.
# custom:
#   id: lush.rate.limited
deny contains d if {
	rate_limited
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf("rate limit %s exceeded: %s", [rate_limit_label, rate_limit_retry]),
	}
}
