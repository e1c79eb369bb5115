package lush.authz

# Project policies: packages lush.policies.<name> may define
#   deny      contains x   -- adds a denial
#   approval  contains x   -- requires a human approval
#   stub      contains x   -- forces a stub of an allowed tools/call
# where x is a message string or {"message": "...", "rule": "optional.id"}.
# A boolean rule (deny if {...}) counts as one entry when true. Entries are
# normalized to {"rule": x.rule or "lush.policies.<name>", "message": string};
# an entry of any other shape still counts, with a generic message (fail closed).
# Project policies can only add denials, approvals and stubs: nothing else they
# define is read. Packages whose names end in _test are ignored.

project_denials contains d if {
	some name
	v := data.lush.policies[name].deny
	not endswith(name, "_test")
	some d in project_entries(v, name, "deny")
}

project_approvals contains a if {
	some name
	v := data.lush.policies[name].approval
	not endswith(name, "_test")
	some a in project_entries(v, name, "approval")
}

project_stubs contains s if {
	some name
	v := data.lush.policies[name].stub
	not endswith(name, "_test")
	some s in project_entries(v, name, "stub")
}

# project_entries(v, name, kind): the normalized entries of a project rule's value.
project_entries(v, name, kind) := {project_entry(e, name, kind) | some e in v} if {
	is_set(v)
} else := {project_entry(e, name, kind) | some e in v} if {
	is_array(v)
} else := set() if {
	v == false
} else := set() if {
	v == {}
} else := {project_entry(v, name, kind)}

project_entry(e, name, kind) := {"rule": project_rule_id(e, name), "message": m} if {
	m := entry_message(e)
} else := {
	"rule": project_rule_id(e, name),
	"message": sprintf(
		"project policy lush.policies.%s %s; its %s rule gave %s where a message was expected",
		[name, project_effect[kind], kind, type_phrase[type_name(e)]],
	),
}

project_effect := {
	"deny": "denies this call",
	"approval": "requires approval for this call",
	"stub": "stubs this call",
}

type_phrase := {
	"boolean": "a boolean",
	"number": "a number",
	"string": "an empty string",
	"null": "null",
	"array": "an array",
	"set": "a set",
	"object": "an object without a string message",
}

entry_message(e) := e if {
	is_string(e)
	e != ""
} else := e.message if {
	is_string(e.message)
	e.message != ""
}

project_rule_id(e, name) := e.rule if {
	is_string(e.rule)
	e.rule != ""
} else := concat("", ["lush.policies.", name])
