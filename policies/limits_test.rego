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

# Budgets (lush.budget.exhausted): the enforcer's verdict on the project's
# budgets, input.budget.

tokens_left := {
	"name": "researcher-tokens", "subject": "researcher", "unit": "tokens", "per": "day", "limit": 200000,
	"used": 1200, "granted": 0, "remaining": 198800, "cost": 0, "period_end": "2026-11-26T00:00:00Z",
}

tokens_spent := object.union(tokens_left, {"used": 200000, "remaining": 0})

credits_short := {
	"name": "coder-credits", "subject": "coder", "unit": "credits", "per": "month", "limit": 100,
	"used": 98, "granted": 0, "remaining": 2, "cost": 5, "period_end": "2026-12-01T00:00:00Z",
}

calls_topped_up := {
	"name": "contractor-calls", "subject": "user:carl", "unit": "tool_calls", "per": "day", "limit": 2,
	"used": 3, "granted": 1, "remaining": 0, "cost": 1, "period_end": "2026-11-26T00:00:00Z",
}

test_budget_absent_null_or_clear_allows[note] if {
	some note, inp in {
		"absent": read_call,
		"null": call(read_call, {"budget": null}),
		"clear": call(read_call, {"budget": {"exhausted": false, "budgets": [tokens_left]}}),
		"clear, no budgets listed": call(read_call, {"budget": {"exhausted": false}}),
	}
	allowed(decide(inp), "allow", call_rules)
}

test_budget_exhausted_denies[note] if {
	some note, tc in {
		"tokens": {
			"budgets": [tokens_left, tokens_spent],
			"messages": {"budget researcher-tokens exhausted: 200000 of 200000 tokens used this day; it resets at 2026-11-26T00:00:00Z or after a top-up (lushctl budget top-up)"},
		},
		"credits, the call costs more than remains": {
			"budgets": [credits_short],
			"messages": {"budget coder-credits exhausted: 98 of 100 credits used this month, and the call costs 5; it resets at 2026-12-01T00:00:00Z or after a top-up (lushctl budget top-up)"},
		},
		"tool calls with a top-up": {
			"budgets": [calls_topped_up],
			"messages": {"budget contractor-calls exhausted: 3 of 3 tool calls used this day; it resets at 2026-11-26T00:00:00Z or after a top-up (lushctl budget top-up)"},
		},
		"two at once": {
			"budgets": [tokens_spent, credits_short],
			"messages": {
				"budget researcher-tokens exhausted: 200000 of 200000 tokens used this day; it resets at 2026-11-26T00:00:00Z or after a top-up (lushctl budget top-up)",
				"budget coder-credits exhausted: 98 of 100 credits used this month, and the call costs 5; it resets at 2026-12-01T00:00:00Z or after a top-up (lushctl budget top-up)",
			},
		},
	}
	d := decide(call(read_call, {"budget": {"exhausted": true, "budgets": tc.budgets, "exhausted_by": [b |
		some b in tc.budgets
		b.remaining < max({b.cost, 1})
	]}}))
	denied_by(d, {"lush.budget.exhausted"})
	messages(d) == tc.messages
}

# agent/invoke of an agent whose budget is exhausted is denied: the agent is not started.
test_budget_exhausted_denies_agent_invoke if {
	inp := {"action": "agent/invoke", "principal": alice, "agent": "researcher", "budget": {"exhausted": true, "budgets": [tokens_spent]}}
	denied_by(decide(inp), {"lush.budget.exhausted"})
}

# Fail closed: usage that could not be read, or a malformed verdict, denies.
test_budget_malformed_or_unknown_denies[note] if {
	some note, tc in {
		"usage unreadable": {
			"budget": {"exhausted": true, "error": "budget usage could not be read from the decision log"},
			"message": "budget usage cannot be read, so the call is denied (budgets fail closed): budget usage could not be read from the decision log",
		},
		"string": {"budget": "exhausted", "message": "a budget of the call is exhausted: retry after its period resets or a top-up (lushctl budget top-up)"},
		"no exhausted": {"budget": {"budgets": [tokens_left]}, "message": "a budget of the call is exhausted: retry after its period resets or a top-up (lushctl budget top-up)"},
		"exhausted not boolean": {"budget": {"exhausted": "false"}, "message": "a budget of the call is exhausted: retry after its period resets or a top-up (lushctl budget top-up)"},
		"malformed entries": {
			"budget": {"exhausted": true, "budgets": [7], "exhausted_by": [7, {"name": "x", "used": "0"}]},
			"message": "a budget of the call is exhausted: retry after its period resets or a top-up (lushctl budget top-up)",
		},
	}
	d := decide(call(read_call, {"budget": tc.budget}))
	denied_by(d, {"lush.budget.exhausted"})
	messages(d) == {tc.message}
}

# An entry without name, per, period_end or unit still gives a message.
test_budget_message_defaults if {
	d := decide(call(read_call, {"budget": {"exhausted": true, "exhausted_by": [{"used": 5, "limit": 5, "remaining": 0, "unit": "pints"}]}}))
	messages(d) == {"budget (unnamed) exhausted: 5 of 5 units used this period; it resets at the end of the period or after a top-up (lushctl budget top-up)"}
}

# Writes that would be stubbed are denied all the same, and other denials keep their reasons.
test_budget_denies_stubbed_write if {
	denied_by(decide(call(write_call, {"budget": {"exhausted": true, "budgets": [tokens_spent]}})), {"lush.budget.exhausted"})
}

test_budget_with_other_denial if {
	d := decide(call(read_call, {"budget": {"exhausted": true, "budgets": [tokens_spent]}, "tool": {"ref": "tools/shell"}}))
	"lush.budget.exhausted" in rule_ids(d)
	count(rule_ids(d)) > 1
}

# The fast path never skips the budget rule.
test_nothing_denies_false_when_budget_exhausted if {
	not value("nothing_denies", call(read_call, {"budget": {"exhausted": true, "budgets": [tokens_spent]}}))
}
