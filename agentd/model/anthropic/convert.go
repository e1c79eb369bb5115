package anthropic

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/lush-agents/lush/agentd/model"
)

// How agentd's request maps to a Messages API request:
//
//   - System is the top-level system prompt (one text block), not a message.
//   - Messages: role user stays user, role model becomes assistant. Text
//     parts are text blocks (empty ones are dropped: the API refuses them),
//     calls are tool_use blocks, results are tool_result blocks whose
//     content is the result's Output as JSON text, with is_error set for
//     failures. A message without blocks is dropped; consecutive messages of
//     one role are merged into one turn, with a user turn's tool_result
//     blocks first, as the API requires (so the results of parallel calls
//     go back in one user message).
//   - Tool call ids: Anthropic's tool_use ids are kept as they are. A call
//     from another provider may have no id or one the API refuses (it takes
//     ^[a-zA-Z0-9_-]+$): an empty id becomes lush_<turn>_<n>, another
//     becomes lush_ and a hash of it, on the call and on its result alike. A
//     result without an id answers the first unanswered call of the turn
//     before with its name. Every tool_use must be answered by a tool_result
//     in the next turn and every tool_result must answer one: otherwise
//     Generate fails naming the message, before anything is sent.
//   - Tools: the name must match ^[a-zA-Z0-9_-]{1,128}$ (else Generate
//     fails naming the tool: nothing is silently dropped); the input schema
//     goes to input_schema and must be of type object (none is an object
//     without properties).
//   - max_tokens is Config.MaxTokens (DefaultMaxTokens when 0).
//
// And the answer back (fromMessage):
//
//   - text blocks are text parts, tool_use blocks calls (id, name, input);
//     thinking blocks are not part of the answer and are left out.
//   - FinishReason is Anthropic's stop_reason as it is: end_turn, tool_use,
//     max_tokens, stop_sequence, pause_turn, refusal or
//     model_context_window_exceeded.
//   - A refusal (stop_reason refusal) keeps the text written before it, drops
//     any tool call of the turn (it is not to be run), and ends with a text
//     part saying the model refused, with the category and explanation
//     Anthropic gives; with onText set that text is streamed too.
//   - Usage: Input is input_tokens plus cache_creation_input_tokens plus
//     cache_read_input_tokens (all the prompt's tokens, however billed),
//     Output is output_tokens.

// toolUseIDPattern is what the API accepts as a tool_use id.
var toolUseIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// toParams maps req to the Messages API's parameters.
func toParams(req model.Request, maxTokens int) (anthropic.MessageNewParams, error) {
	params := anthropic.MessageNewParams{Model: req.Model, MaxTokens: int64(maxTokens)}
	if req.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	tools, err := toTools(req.Tools)
	if err != nil {
		return params, err
	}
	params.Tools = tools
	turns, err := toTurns(req.Messages)
	if err != nil {
		return params, err
	}
	if len(turns) == 0 {
		return params, fmt.Errorf("the conversation is empty: Anthropic needs at least one message with content")
	}
	for _, t := range turns {
		msg, err := t.param()
		if err != nil {
			return params, err
		}
		params.Messages = append(params.Messages, msg)
	}
	return params, nil
}

// toTools maps the tools, refusing what Anthropic would refuse.
func toTools(tools []model.Tool) ([]anthropic.ToolUnionParam, error) {
	out := make([]anthropic.ToolUnionParam, 0, len(tools))
	seen := make(map[string]bool, len(tools))
	for _, t := range tools {
		if !toolNames.Valid(t.Name) {
			return nil, fmt.Errorf("tool %q: Anthropic accepts tool names of 1 to 128 letters, digits, _ and - only (^[a-zA-Z0-9_-]{1,128}$): offer the tool under a name Model.ToolNames accepts", t.Name)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("tool %q is offered twice: Anthropic needs unique tool names", t.Name)
		}
		seen[t.Name] = true
		schema, err := toSchema(t)
		if err != nil {
			return nil, err
		}
		p := &anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			p.Description = anthropic.String(t.Description)
		}
		out = append(out, anthropic.ToolUnionParam{OfTool: p})
	}
	return out, nil
}

// toSchema maps a tool's JSON Schema to input_schema: properties and
// required in their fields, every other keyword as it is.
func toSchema(t model.Tool) (anthropic.ToolInputSchemaParam, error) {
	// Type set: a zero ToolInputSchemaParam would leave input_schema out,
	// and the API requires it.
	schema := anthropic.ToolInputSchemaParam{Type: "object"}
	if len(t.InputSchema) == 0 || string(t.InputSchema) == "null" {
		return schema, nil // {"type": "object"}
	}
	var m map[string]any
	if err := json.Unmarshal(t.InputSchema, &m); err != nil {
		return schema, fmt.Errorf("tool %q: decoding its input schema (want a JSON object): %w", t.Name, err)
	}
	if typ, ok := m["type"]; ok && typ != "object" {
		return schema, fmt.Errorf("tool %q: its input schema has type %v; Anthropic needs type \"object\" (arguments are named)", t.Name, typ)
	}
	if props, ok := m["properties"]; ok {
		schema.Properties = props
	}
	if req, ok := m["required"]; ok {
		list, ok := req.([]any)
		if !ok {
			return schema, fmt.Errorf("tool %q: its input schema's required is %T, want a list of property names", t.Name, req)
		}
		for _, r := range list {
			name, ok := r.(string)
			if !ok {
				return schema, fmt.Errorf("tool %q: its input schema's required holds %v, want property names", t.Name, r)
			}
			schema.Required = append(schema.Required, name)
		}
	}
	for k, v := range m {
		if k != "type" && k != "properties" && k != "required" {
			if schema.ExtraFields == nil {
				schema.ExtraFields = map[string]any{}
			}
			schema.ExtraFields[k] = v
		}
	}
	return schema, nil
}

// turn is one message of the Anthropic conversation: the blocks of one or
// more consecutive agentd messages of one role.
type turn struct {
	assistant bool
	first     int // the agentd message it starts at, for errors
	blocks    []block
}

// block is a content block before it becomes an SDK parameter.
type block struct {
	text   string
	call   *model.ToolCall
	result *model.ToolResult
	id     string // the tool_use id of a call or result, as sent
}

// toTurns maps the messages to turns: roles mapped, empty messages dropped,
// consecutive ones of a role merged, tool ids paired.
func toTurns(msgs []model.Message) ([]turn, error) {
	var turns []turn
	for i, msg := range msgs {
		var assistant bool
		switch msg.Role {
		case model.RoleUser:
		case model.RoleModel:
			assistant = true
		default:
			return nil, fmt.Errorf("message %d: unknown role %q (want %q or %q)", i, msg.Role, model.RoleUser, model.RoleModel)
		}
		var blocks []block
		for _, p := range msg.Parts {
			switch {
			case p.Call != nil:
				if !assistant {
					return nil, fmt.Errorf("message %d: a tool call (%s) in a user message; calls are the model's", i, p.Call.Name)
				}
				blocks = append(blocks, block{call: p.Call})
			case p.Result != nil:
				if assistant {
					return nil, fmt.Errorf("message %d: a tool result (%s) in a model message; results go back in user messages", i, p.Result.Name)
				}
				blocks = append(blocks, block{result: p.Result})
			case p.Text != "":
				blocks = append(blocks, block{text: p.Text})
			}
		}
		if len(blocks) == 0 {
			continue // the API refuses empty messages; an empty message says nothing
		}
		if n := len(turns); n > 0 && turns[n-1].assistant == assistant {
			turns[n-1].blocks = append(turns[n-1].blocks, blocks...)
			continue
		}
		turns = append(turns, turn{assistant: assistant, first: i, blocks: blocks})
	}
	for i := range turns {
		if !turns[i].assistant {
			// Results first: the API refuses a tool_result after other content.
			slices.SortStableFunc(turns[i].blocks, func(a, b block) int {
				return boolRank(a.result == nil) - boolRank(b.result == nil)
			})
		}
	}
	if err := pairIDs(turns); err != nil {
		return nil, err
	}
	return turns, nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pairIDs gives every call its tool_use id and every result the id of the
// call it answers, checking that each call of an assistant turn is answered
// in the next turn and each result answers a call of the turn before.
func pairIDs(turns []turn) error {
	var open []*block // the calls of the turn before, unanswered
	for ti := range turns {
		t := &turns[ti]
		if t.assistant {
			// Turns alternate, so the user turn before (if any) answered or failed.
			n := 0
			for bi := range t.blocks {
				b := &t.blocks[bi]
				if b.call == nil {
					continue
				}
				n++
				b.id = wireID(b.call.ID, fmt.Sprintf("lush_%d_%d", ti, n))
				open = append(open, b)
			}
			continue
		}
		for bi := range t.blocks {
			b := &t.blocks[bi]
			if b.result == nil {
				continue
			}
			k := answering(open, b.result)
			if k < 0 {
				return fmt.Errorf("message %d: the tool result of %s (id %q) answers no tool call of the model message before it; Anthropic needs every tool_result to answer a tool_use of the turn just before", t.first, b.result.Name, b.result.ID)
			}
			b.id = open[k].id
			open = slices.Delete(open, k, k+1)
		}
		if err := unanswered(open, turns, ti); err != nil {
			return err
		}
		open = open[:0]
	}
	return unanswered(open, turns, len(turns))
}

// answering returns the index in open of the call r answers, or -1: the call
// with r's id, or for a result without an id the first with r's name.
func answering(open []*block, r *model.ToolResult) int {
	for k, c := range open {
		if r.ID != "" && c.call.ID == r.ID || r.ID == "" && c.call.Name == r.Name {
			return k
		}
	}
	return -1
}

// unanswered fails when calls are left unanswered by turn next (len(turns):
// the conversation ended).
func unanswered(open []*block, turns []turn, next int) error {
	if len(open) == 0 {
		return nil
	}
	names := make([]string, 0, len(open))
	for _, c := range open {
		names = append(names, fmt.Sprintf("%s (id %q)", c.call.Name, c.call.ID))
	}
	where := "the conversation ends"
	if next < len(turns) {
		where = fmt.Sprintf("message %d does not answer them", turns[next].first)
	}
	return fmt.Errorf("tool calls without a result: %s; %s, and Anthropic needs a tool_result for every tool_use in the next user message", strings.Join(names, ", "), where)
}

// wireID is the tool_use id sent for a call's id: the id itself when the API
// accepts it, fallback when it is empty, else lush_ and a hash of it.
func wireID(id, fallback string) string {
	switch {
	case id == "":
		return fallback
	case toolUseIDPattern.MatchString(id):
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "lush_" + hex.EncodeToString(sum[:12])
}

// param is the turn as the SDK's message parameter.
func (t turn) param() (anthropic.MessageParam, error) {
	blocks := make([]anthropic.ContentBlockParamUnion, 0, len(t.blocks))
	for _, b := range t.blocks {
		switch {
		case b.call != nil:
			args := b.call.Args
			if args == nil {
				args = map[string]any{}
			}
			blocks = append(blocks, anthropic.NewToolUseBlock(b.id, args, b.call.Name))
		case b.result != nil:
			output := b.result.Output
			if output == nil {
				output = map[string]any{}
			}
			text, err := json.Marshal(output)
			if err != nil {
				return anthropic.MessageParam{}, fmt.Errorf("message %d: encoding the result of %s: %w", t.first, b.result.Name, err)
			}
			blocks = append(blocks, anthropic.NewToolResultBlock(b.id, string(text), b.result.IsError))
		default:
			blocks = append(blocks, anthropic.NewTextBlock(b.text))
		}
	}
	if t.assistant {
		return anthropic.NewAssistantMessage(blocks...), nil
	}
	return anthropic.NewUserMessage(blocks...), nil
}

// fromMessage maps Anthropic's message to a Response. onText, when set, gets
// the refusal note (the rest was streamed already).
func fromMessage(msg *anthropic.Message, onText func(string), maxTokens int) (*model.Response, error) {
	resp := &model.Response{FinishReason: string(msg.StopReason), ModelVersion: msg.Model}
	refused := msg.StopReason == anthropic.StopReasonRefusal
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			appendText(resp, b.Text)
		case "tool_use":
			if refused {
				continue // a refused turn's calls are not to be run
			}
			var args map[string]any
			if err := json.Unmarshal(b.Input, &args); err != nil || args == nil {
				if msg.StopReason == anthropic.StopReasonMaxTokens {
					return nil, &model.Error{Provider: provider, Code: "max_tokens",
						Message: fmt.Sprintf("the answer reached max_tokens (%d) while writing the input of a call of %s; raise the provider's max tokens", maxTokens, b.Name)}
				}
				return nil, &model.Error{Provider: provider, Message: fmt.Sprintf("the input of a call of %s is not a JSON object: %.200s", b.Name, b.Input)}
			}
			resp.Parts = append(resp.Parts, model.Part{Call: &model.ToolCall{ID: b.ID, Name: b.Name, Args: args}})
		}
	}
	if refused {
		note := refusalNote(msg.StopDetails)
		if onText != nil {
			onText(note)
		}
		appendText(resp, note)
	}
	u := msg.Usage
	resp.Usage = model.Usage{
		Input:  int(u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens),
		Output: int(u.OutputTokens),
	}
	return resp, nil
}

// refusalNote is the text that ends a refused answer.
func refusalNote(d anthropic.RefusalStopDetails) string {
	note := "[The model refused to continue (Anthropic stop_reason refusal"
	if d.Category != "" {
		note += ", category " + string(d.Category)
	}
	note += ")"
	if d.Explanation != "" {
		note += ": " + d.Explanation
	}
	return note + "]"
}

// appendText adds text to the last part when that is text, so that text in
// several blocks becomes one part.
func appendText(resp *model.Response, text string) {
	if text == "" {
		return
	}
	if n := len(resp.Parts); n > 0 && resp.Parts[n-1].Call == nil && resp.Parts[n-1].Result == nil {
		resp.Parts[n-1].Text += text
		return
	}
	resp.Parts = append(resp.Parts, model.Part{Text: text})
}
