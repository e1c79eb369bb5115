package lush.authz

# Schemas of tools/call. An enforcement point that validates a call's
# arguments against the tool's input schema (the MCP gateway does, before the
# decision) sends input.tool.arguments_valid: false when they do not match,
# with input.tool.schema_errors: bounded "/path: message" strings that never
# carry argument values. Absent, null or true: they match or were not checked.

# arguments_invalid: the enforcement point found the arguments do not match,
# or sent something other than a boolean (fail closed).
arguments_invalid if {
	input.action == "tools/call"
	v := input.tool.arguments_valid
	v != null
	v != true
}

# The schema errors the enforcement point sent (strings only).
schema_errors := [e | some e in input.tool.schema_errors; is_string(e)] if {
	is_array(input.tool.schema_errors)
} else := []

schema_problem := ": input.tool.arguments_valid must be a boolean" if {
	not is_boolean(input.tool.arguments_valid)
} else := concat("", [": ", substring(schema_errors[0], 0, 300), schema_more]) if {
	count(schema_errors) > 0
} else := ""

schema_more := sprintf(" (%d more)", [count(schema_errors) - 1]) if {
	count(schema_errors) > 1
} else := ""

# METADATA
# title: Arguments do not match the input schema
# description: |
#   The enforcement point validated the tools/call arguments against the tool's
#   input schema (input.tool.arguments_valid) and they do not match, or the
#   schema itself could not be compiled. The message gives the first schema
#   error (input.tool.schema_errors) and how many more there are.
# custom:
#   id: lush.schema.invalid_arguments
deny contains d if {
	arguments_invalid
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf("arguments of %s do not match its input schema%s", [tool_label, schema_problem]),
	}
}

# A tool can refuse arguments its schema admits: a built-in tool's own
# configuration (builtin/shell's mode and allowlist). An enforcement point that
# knows (the MCP gateway asks its built-in tools before the decision) sends
# input.tool.refusal, the tool's reason, so that such a call is denied at once,
# before anyone is asked to approve it. Absent, null or "": not refused.

# tool_refused: the tool refuses the arguments, or the enforcement point sent
# something other than a string (fail closed).
tool_refused if {
	input.action == "tools/call"
	r := input.tool.refusal
	not r in {null, ""}
}

refusal_reason := substring(r, 0, 300) if {
	r := input.tool.refusal
	is_string(r)
} else := "input.tool.refusal must be a string"

# METADATA
# title: The tool refuses the arguments
# description: |
#   The enforcement point found that the tool itself refuses the call's
#   arguments (input.tool.refusal): a built-in tool whose configuration does not
#   admit them, such as a builtin/shell command that the shell's mode or
#   allowlist refuses. The message gives the tool's reason.
# custom:
#   id: lush.tool.refused
deny contains d if {
	tool_refused
	d := {
		"rule": rego.metadata.rule().custom.id,
		"message": sprintf("%s refuses these arguments: %s", [tool_label, refusal_reason]),
	}
}
