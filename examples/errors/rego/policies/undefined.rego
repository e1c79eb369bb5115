package lush.policies.undefined

deny contains "blocked" if {
	is_blocked(input.tool.name)
}
