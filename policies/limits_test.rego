package lush.authz_test

# Rate limits (lush.rate.limited): the enforcer's verdict on the token
# buckets, input.rate_limit.

limited := {"exceeded": true, "limit": "group:engineering 5/s burst 10", "retry_after_ms": 200}

test_rate_limit_absent_null_or_clear_allows[note] if {
	some note, inp in {
		"absent": read_call,
		"null": call(read_call, {"rate_limit": null}),
		"not exceeded": call(read_call, {"rate_limit": {"exceeded": false}}),
	}
	allowed(decide(inp), "allow", call_rules)
}

test_rate_limit_exceeded_denies if {
	d := decide(call(read_call, {"rate_limit": limited}))
	denied_by(d, {"lush.rate.limited"})
	messages(d) == {"rate limit group:engineering 5/s burst 10 exceeded: retry after 200 ms"}
}

test_rate_limit_exceeded_denies_agent_invoke if {
	inp := {"action": "agent/invoke", "principal": alice, "agent": "researcher", "rate_limit": limited}
	denied_by(decide(inp), {"lush.rate.limited"})
}

# A malformed verdict denies (fail closed), with what can be said of it.
test_rate_limit_malformed_denies[note] if {
	some note, tc in {
		"string": {"rl": "exceeded", "message": "rate limit (unnamed) exceeded: retry later"},
		"no exceeded": {"rl": {"limit": "user:alice 1/s burst 1"}, "message": "rate limit user:alice 1/s burst 1 exceeded: retry later"},
		"exceeded not boolean": {"rl": {"exceeded": "false", "retry_after_ms": 1500}, "message": "rate limit (unnamed) exceeded: retry after 1500 ms"},
		"negative retry": {"rl": {"exceeded": true, "limit": "", "retry_after_ms": -1}, "message": "rate limit (unnamed) exceeded: retry later"},
	}
	d := decide(call(read_call, {"rate_limit": tc.rl}))
	denied_by(d, {"lush.rate.limited"})
	messages(d) == {tc.message}
}

# A call denied for another reason lists both denials.
test_rate_limit_with_other_denial if {
	d := decide(call(read_call, {"rate_limit": limited, "tool": {"ref": "tools/shell"}}))
	"lush.rate.limited" in rule_ids(d)
	count(rule_ids(d)) > 1
	d.allow == false
}

# Writes that would be stubbed are denied all the same.
test_rate_limit_denies_stubbed_write if {
	denied_by(decide(call(write_call, {"rate_limit": limited})), {"lush.rate.limited"})
}
