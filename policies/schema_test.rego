package lush.authz_test

# Schemas (lush.schema.invalid_arguments): the enforcement point's verdict on
# the arguments, input.tool.arguments_valid and input.tool.schema_errors.

with_schema(base, fields) := call(base, {"tool": object.union(base.tool, fields)})

test_arguments_valid_or_unchecked_allow[note] if {
	some note, fields in {
		"not checked": {},
		"null": {"arguments_valid": null},
		"valid": {"arguments_valid": true},
		"valid with stray errors": {"arguments_valid": true, "schema_errors": ["/x: ignored"]},
	}
	d := decide(with_schema(read_call, fields))
	allowed(d, "allow", call_rules)
}

test_invalid_arguments_deny[note] if {
	some note, tc in {
		"no errors": {
			"fields": {"arguments_valid": false},
			"message": sprintf("arguments of %s (read_file) do not match its input schema", [fs]),
		},
		"one error": {
			"fields": {"arguments_valid": false, "schema_errors": ["/path: expected string, got number"]},
			"message": sprintf("arguments of %s (read_file) do not match its input schema: /path: expected string, got number", [fs]),
		},
		"three errors": {
			"fields": {"arguments_valid": false, "schema_errors": ["/: missing required property \"path\"", "/a: x", "/b: y"]},
			"message": sprintf("arguments of %s (read_file) do not match its input schema: /: missing required property \"path\" (2 more)", [fs]),
		},
		"errors not strings are ignored": {
			"fields": {"arguments_valid": false, "schema_errors": [7, "/path: expected string, got number"]},
			"message": sprintf("arguments of %s (read_file) do not match its input schema: /path: expected string, got number", [fs]),
		},
		"malformed verdict": {
			"fields": {"arguments_valid": "false"},
			"message": sprintf("arguments of %s (read_file) do not match its input schema: input.tool.arguments_valid must be a boolean", [fs]),
		},
		"malformed verdict number": {
			"fields": {"arguments_valid": 0},
			"message": sprintf("arguments of %s (read_file) do not match its input schema: input.tool.arguments_valid must be a boolean", [fs]),
		},
	}
	d := decide(with_schema(read_call, tc.fields))
	denied_by(d, {"lush.schema.invalid_arguments"})
	messages(d) == {tc.message}
}

# A refused write is denied, not stubbed.
test_invalid_arguments_of_write_deny_not_stub if {
	d := decide(with_schema(write_call, {"arguments_valid": false}))
	denied_by(d, {"lush.schema.invalid_arguments"})
}

# A denial for another reason keeps its own reason beside the schema's.
test_invalid_arguments_with_other_denials if {
	inp := call(with_schema(read_call, {"arguments_valid": false}), {"agent": "editor"})
	d := decide(inp)
	"lush.schema.invalid_arguments" in rule_ids(d)
	count(rule_ids(d)) > 1
}

# The verdict concerns tools/call only.
test_verdict_ignored_for_tools_list if {
	d := decide(call(with_schema(read_call, {"arguments_valid": false}), {"action": "tools/list"}))
	d.allow
}

# The message is bounded however long the enforcement point's error is.
test_schema_error_bounded if {
	long := concat("", [x | some _ in numbers.range(1, 1000); x := "e"])
	d := decide(with_schema(read_call, {"arguments_valid": false, "schema_errors": [long]}))
	some m in messages(d)
	count(m) < 450
}

# The fast path never skips the schema rule.
test_nothing_denies_false_when_invalid if {
	not value("nothing_denies", with_schema(read_call, {"arguments_valid": false}))
}

# --- the tool's own refusal (lush.tool.refused) ---

live_shell_call := call(shell_call, {"arguments": {"cmd": "git log"}, "live_writes": true})

test_not_refused_allows[note] if {
	some note, fields in {
		"not asked": {},
		"null": {"refusal": null},
		"empty": {"refusal": ""},
	}
	d := decide(with_schema(live_shell_call, fields))
	d.allow
	d.outcome == "approval_required"
}

test_refused_denies_before_approval[note] if {
	some note, tc in {
		"the allowlist": {
			"refusal": "not_allowed: \"git log\" is not allowed; allowed: git status, ls",
			"message": "tools/shell refuses these arguments: not_allowed: \"git log\" is not allowed; allowed: git status, ls",
		},
		"malformed": {"refusal": 7, "message": "tools/shell refuses these arguments: input.tool.refusal must be a string"},
		"malformed false": {"refusal": false, "message": "tools/shell refuses these arguments: input.tool.refusal must be a string"},
	}
	d := decide(with_schema(live_shell_call, {"refusal": tc.refusal}))
	denied_by(d, {"lush.tool.refused"})
	messages(d) == {tc.message}
}

# A refusal is kept beside other denials, and concerns tools/call only.
test_refused_with_other_denials if {
	d := decide(with_schema(call(live_shell_call, {"principal": alice}), {"refusal": "disabled: the shell tool is off"}))
	"lush.tool.refused" in rule_ids(d)
	count(rule_ids(d)) > 1
	decide(call(with_schema(read_call, {"refusal": "x"}), {"action": "tools/list"})).allow
}

test_refusal_bounded if {
	long := concat("", [x | some _ in numbers.range(1, 1000); x := "e"])
	d := decide(with_schema(live_shell_call, {"refusal": long}))
	some m in messages(d)
	count(m) < 400
}

# The fast path never skips the refusal.
test_nothing_denies_false_when_refused if {
	value("nothing_denies", live_shell_call)
	not value("nothing_denies", with_schema(live_shell_call, {"refusal": "x"}))
}
