# METADATA
# title: Log masking
# description: |
#   Arguments that carry credentials never reach the decision log: the gateway removes them from
#   the logged input before the event is written. The decision itself still sees them.
package lush.policies.logmask

secret_arguments := {"password", "token", "api_key", "apikey", "secret", "authorization"}

mask contains sprintf("/input/arguments/%s", [name]) if {
	some name, _ in input.arguments
	lower(name) in secret_arguments
}
