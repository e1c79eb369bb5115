package manifest

import (
	"encoding/json"
	"strings"
)

// AgentInputSchema is the input of the MCP tool an agent is exposed as: the message the agent is
// asked.
var AgentInputSchema = json.RawMessage(`{"type":"object","properties":{"message":{"type":"string","description":"What to ask the agent: a question or a task, in plain language."}},"required":["message"],"additionalProperties":false}`)

// MCPTool describes the agent as the MCP tool that invokes it (named after the agent). agentd
// serves it at /agents/<name>/mcp, and the gateway offers it to agents that allowlist
// lush://<name>.
func (a *Agent) MCPTool() json.RawMessage {
	desc := strings.TrimSpace(a.Description)
	if desc == "" {
		desc = "Agent " + a.Name + "."
	}
	raw, _ := json.Marshal(map[string]any{
		"name":        a.Name,
		"title":       "Agent " + a.Name,
		"description": desc,
		"inputSchema": AgentInputSchema,
		"annotations": map[string]any{"title": "Agent " + a.Name, "openWorldHint": true},
	})
	return raw
}
