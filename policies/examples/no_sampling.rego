# METADATA
# title: No sampling for one server
# description: |
#   Denies every sampling/createMessage request the web search server sends
#   to the client during a call: that server may not use the user's model.
#   Its elicitation and roots requests, and every other server's sampling,
#   are decided by the base (allowed during an allowed call).
package lush.policies.no_sampling

search := "mcp://npx/web-search-mcp"

deny contains {"rule": "example.no_sampling", "message": msg} if {
	input.action == "sampling/createMessage"
	input.tool.ref == search
	msg := sprintf("%s may not ask the client's model for completions (sampling)", [search])
}
