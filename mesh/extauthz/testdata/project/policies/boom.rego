# A policy that fails to evaluate when a call's arguments carry "boom" that is not a number:
# the tests use it to check that an evaluation error denies, distinguishably from a policy denial.
package lush.policies.boom

deny contains "boom is too large" if {
	to_number(input.arguments.boom) > 10
}
