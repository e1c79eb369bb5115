package lush.policies.typo

deny contains msg if {
	input.action == "tools/call"
	msg := sprintf("no %s", input.tool.name)
	not startswith(input.tool.name, "safe_"
}
