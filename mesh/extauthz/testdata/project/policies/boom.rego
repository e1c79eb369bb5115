# A policy that fails to evaluate when the arguments of a search carry "boom" that is not a number:
# the tests use it to check that an evaluation error denies, distinguishably from a policy denial.
package lush.policies.boom

deny contains "boom is too large" if {
	input.tool.name == "search"
	to_number(input.arguments.boom) > 10
}
