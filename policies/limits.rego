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

# Budgets (lush.yaml budgets). The enforcer keeps the usage: before deciding a
# tools/call or an agent/invoke it reserves the call's cost of every budget
# that applies and sends input.budget:
#
#   {"exhausted": false, "budgets": [{"name": "researcher-tokens",
#     "subject": "researcher", "unit": "tokens", "per": "day", "limit": 200000,
#     "used": 1200, "granted": 0, "remaining": 198800, "cost": 0,
#     "period_end": "2026-11-26T00:00:00Z"}], "exhausted_by": []}
#
# Absent or null: no budget applies. exhausted false: every budget has room.
# Anything else (exhausted true, an error reading usage, or a malformed
# budget) denies: fail closed. A budget is exhausted for a call when its
# remaining units are fewer than the call's cost, and at least one;
# exhausted_by lists those budgets (as in budgets).
#
# The base library reads only the type of input.budget, exhausted,
# exhausted_by and error, which are the same for every call that has room:
# such calls keep hitting the decision cache although the usage in budgets
# changes with each (policy.md, Decision caching). A project policy that
# reads input.budget.budgets (to refuse expensive tools when little is left,
# say) is decided afresh for each call, as it must be.

budget_exhausted if {
	budget_given
	not budget_clear
}

# budget_given: input.budget is present and not null (read by type only).
budget_given if type_name(input.budget) != "null"

budget_clear if input.budget.exhausted == false

budget_cost(b) := c if {
	c := b.cost
	is_number(c)
} else := 0

budget_units := {"tokens": "tokens", "tool_calls": "tool calls", "credits": "credits"}

budget_unit(b) := u if {
	u := budget_units[b.unit]
} else := "units"

budget_total(b) := b.limit + g if {
	g := b.granted
	is_number(g)
} else := b.limit

budget_message(b) := sprintf("budget %v exhausted: %v of %v %s used this %v%s; it resets at %v or after a top-up (lushctl budget top-up)", [
	object.get(b, "name", "(unnamed)"),
	b.used,
	budget_total(b),
	budget_unit(b),
	object.get(b, "per", "period"),
	budget_cost_note(b),
	object.get(b, "period_end", "the end of the period"),
])

budget_cost_note(b) := sprintf(", and the call costs %v", [budget_cost(b)]) if {
	budget_cost(b) > 1
} else := ""

budget_entry_messages := {m |
	some b in input.budget.exhausted_by
	is_object(b)
	is_number(b.used)
	is_number(b.limit)
	m := budget_message(b)
}

budget_reasons := budget_entry_messages if {
	count(budget_entry_messages) > 0
} else := {sprintf("budget usage cannot be read, so the call is denied (budgets fail closed): %s", [e])} if {
	e := input.budget.error
	is_string(e)
	e != ""
} else := {"a budget of the call is exhausted: retry after its period resets or a top-up (lushctl budget top-up)"}

# METADATA
# title: Budget exhausted
# description: |
#   A budget of the project (lush.yaml budgets) that applies to the call has no
#   room for it: the enforcer said so in input.budget. The message names the
#   budget, its unit, the units used of the limit and when the period resets.
#   Budgets fail closed: a call whose usage cannot be read is denied too.
# custom:
#   id: lush.budget.exhausted
deny contains d if {
	budget_exhausted
	some msg in budget_reasons
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": msg,
	}
}
