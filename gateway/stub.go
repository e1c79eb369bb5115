package gateway

import (
	"encoding/json"
	"fmt"

	"github.com/lush-agents/lush/enforce"
)

// stub answers a write that live writes do not cover: a success that says clearly that nothing
// ran, and what would have. For a tool with an output schema, the structured content is a value
// that conforms to it (clients validate it): its strings carry the stub message.
func stub(e *exposed, args any, v *enforce.Verdict) map[string]any {
	argsJSON, _ := json.Marshal(args)
	shown := string(argsJSON)
	if len(shown) > maxStubArgs {
		shown = shown[:maxStubArgs] + "…"
	}
	msg := fmt.Sprintf("[stub] %s was NOT executed: live writes are off for %s. It would have run %s with arguments %s. Nothing was changed (decision %s).",
		e.Name, e.Ref, e.Upstream, shown, v.ID)
	info := map[string]any{"stubbed": true, "executed": false, "tool": e.Ref, "name": e.Upstream, "arguments": args, "decision_id": v.ID,
		"message": "live writes are off for this tool; nothing was executed"}
	res := map[string]any{"content": []map[string]string{{"type": "text", "text": msg}},
		"_meta": map[string]any{"dev.lush/stub": info, "dev.lush/decision": decisionMeta(v)}}
	var schema map[string]any
	if e.HasOut {
		var tool struct {
			OutputSchema map[string]any `json:"outputSchema"`
		}
		json.Unmarshal(e.Raw, &tool)
		schema = tool.OutputSchema
	}
	if schema == nil {
		res["structuredContent"] = map[string]any{"lush_stub": info}
		return res
	}
	out := conforming(schema, msg, 0)
	if obj, ok := out.(map[string]any); ok && schema["additionalProperties"] != false {
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
