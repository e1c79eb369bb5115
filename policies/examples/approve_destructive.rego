# METADATA
# title: Destructive tools need approval in prod
# description: |
#   Requires a human approval for every tools/call classed risk "destructive"
#   when the deployment's environment is "prod". It reads the classification
#   the decision uses (data.lush.authz.classification), which follows the
#   project's classes and treats unclassified tools as writes.
package lush.policies.approve_destructive

approval contains {"rule": "example.prod.approve_destructive", "message": msg} if {
	input.action == "tools/call"
	input.environment == "prod"
	data.lush.authz.classification.risk == "destructive"
	msg := sprintf("%s is destructive: a human must approve it in prod", [tool])
}

tool := sprintf("%s (%s)", [input.tool.ref, input.tool.name]) if {
	input.tool.name != ""
} else := input.tool.ref
