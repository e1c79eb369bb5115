// Package stub answers the write calls that live writes do not cover: a tools/call result that
// says nothing ran and what would have, shaped so that clients which validate a tool's output
// schema accept it. The MCP gateway and the ext_authz server answer stubbed writes with it.
package stub

import (
	"encoding/json"
	"fmt"
)

// Call is a write that live writes do not cover.
type Call struct {
	Name         string         // the tool's name as the client calls it
	Ref          string         // the tool reference
	Tool         string         // the tool's name at its server
	Arguments    any            // decoded JSON
	OutputSchema map[string]any // the tool's declared output schema, if any
	DecisionID   string
	Decision     map[string]any // the decision, as the client sees it in _meta["dev.lush/decision"]
}

// maxArgs bounds the arguments echoed in a stub's message.
const maxArgs = 2048

// Result is the tools/call result of a stubbed write: a success that says clearly that nothing
// ran, and what would have. For a tool with an output schema, the structured content is a value
// that conforms to it (clients validate it): its strings carry the stub message.
func Result(c Call) map[string]any {
	argsJSON, _ := json.Marshal(c.Arguments)
	shown := string(argsJSON)
	if len(shown) > maxArgs {
		shown = shown[:maxArgs] + "…"
	}
	tool := c.Tool
	if tool == "" {
		tool = c.Name // a remote A2A agent: one tool, no name at a server
	}
	msg := fmt.Sprintf("[stub] %s was NOT executed: live writes are off for %s. It would have run %s with arguments %s. Nothing was changed (decision %s).",
		c.Name, c.Ref, tool, shown, c.DecisionID)
	info := map[string]any{"stubbed": true, "executed": false, "tool": c.Ref, "name": tool, "arguments": c.Arguments, "decision_id": c.DecisionID,
		"message": "live writes are off for this tool; nothing was executed"}
	res := map[string]any{"content": []map[string]string{{"type": "text", "text": msg}},
		"_meta": map[string]any{"dev.lush/stub": info, "dev.lush/decision": c.Decision}}
	if c.OutputSchema == nil {
		res["structuredContent"] = map[string]any{"lush_stub": info}
		return res
	}
	out := conforming(c.OutputSchema, msg, 0)
	if obj, ok := out.(map[string]any); ok && c.OutputSchema["additionalProperties"] != false {
		obj["lush_stub"] = info
	}
	res["structuredContent"] = out
	return res
}

// conforming builds the smallest value a JSON Schema accepts, using msg for strings.
func conforming(schema map[string]any, msg string, depth int) any {
	if depth > 16 {
		return nil
	}
	if c, ok := schema["const"]; ok {
		return c
	}
	if e, ok := schema["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	if d, ok := schema["default"]; ok {
		return d
	}
	for _, key := range []string{"anyOf", "oneOf", "allOf"} {
		if alts, ok := schema[key].([]any); ok && len(alts) > 0 {
			if sub, ok := alts[0].(map[string]any); ok {
				return conforming(sub, msg, depth+1)
			}
		}
	}
	typ, _ := schema["type"].(string)
	if list, ok := schema["type"].([]any); ok {
		for _, t := range list {
			if s, _ := t.(string); s != "null" {
				typ = s
				break
			}
		}
	}
	if typ == "" && schema["properties"] != nil {
		typ = "object"
	}
	switch typ {
	case "object":
		out := map[string]any{}
		props, _ := schema["properties"].(map[string]any)
		required, _ := schema["required"].([]any)
		for _, r := range required {
			name, _ := r.(string)
			sub, _ := props[name].(map[string]any)
			if sub == nil {
				sub = map[string]any{}
			}
			out[name] = conforming(sub, msg, depth+1)
		}
		return out
	case "array":
		items, _ := schema["items"].(map[string]any)
		n, _ := schema["minItems"].(float64)
		out := make([]any, 0, int(n))
		for range int(min(n, 16)) {
			out = append(out, conforming(items, msg, depth+1))
		}
		return out
	case "integer", "number":
		if m, ok := schema["minimum"].(float64); ok {
			return m
		}
		return 0
	case "boolean":
		return false
	case "null":
		return nil
	}
	s := msg // strings, and schemas with no type
	if n, ok := schema["maxLength"].(float64); ok && len(s) > int(n) {
		s = s[:int(n)]
	}
	return s
}
