package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/lush-agents/lush/agentd/model"
)

// FinishRefusal is the FinishReason of a response in which the model refused; its text is the
// refusal. OpenAI's own reasons (stop, length, tool_calls, content_filter) are passed as they
// are.
const FinishRefusal = "refusal"

// toParams maps a request: the system instruction as the first message (a system message),
// then the conversation, and the tools.
func toParams(req model.Request) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: req.Model}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	msgs, err := toMessages(req.Messages)
	if err != nil {
		return p, err
	}
	p.Messages = append(p.Messages, msgs...)
	for _, t := range req.Tools {
		if !toolNames.Valid(t.Name) {
			return p, fmt.Errorf("tool %q: OpenAI accepts tool names of 1 to 64 letters, digits, '_' and '-' only (^[a-zA-Z0-9_-]{1,64}$): offer the tool under a name Model.ToolNames accepts", t.Name)
		}
		params := shared.FunctionParameters{"type": "object", "properties": map[string]any{}}
		if len(t.InputSchema) > 0 && string(t.InputSchema) != "null" {
			params = shared.FunctionParameters{}
			if err := json.Unmarshal(t.InputSchema, &params); err != nil {
				return p, fmt.Errorf("tool %q: its input schema is not a JSON object: %w", t.Name, err)
			}
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	return p, nil
}

// pending is a tool call of the last assistant message, for results that carry no id.
type pending struct{ id, name string }

// toMessages maps the conversation. A model turn is an assistant message (its text, and its tool
// calls with their ids); a user turn's tool results are tool messages answering those ids, then
// its text a user message. Calls without an id (a conversation begun on another provider) get
// one, and results without one answer the earliest unanswered call of their tool.
func toMessages(msgs []model.Message) ([]openai.ChatCompletionMessageParamUnion, error) {
	var out []openai.ChatCompletionMessageParamUnion
	var open []pending
	for i, msg := range msgs {
		var text strings.Builder
		switch msg.Role {
		case model.RoleModel:
			a := openai.ChatCompletionAssistantMessageParam{}
			open = open[:0]
			for j, part := range msg.Parts {
				switch {
				case part.Call != nil:
					id := part.Call.ID
					if id == "" {
						id = fmt.Sprintf("call_lush_%d_%d", i, j)
					}
					args := part.Call.Args
					if args == nil {
						args = map[string]any{}
					}
					b, err := json.Marshal(args)
					if err != nil {
						return nil, fmt.Errorf("message %d: the arguments of tool call %q: %w", i, part.Call.Name, err)
					}
					a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: id, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: part.Call.Name, Arguments: string(b)}}})
					open = append(open, pending{id, part.Call.Name})
				case part.Text != "":
					text.WriteString(part.Text)
				}
			}
			if text.Len() == 0 && len(a.ToolCalls) == 0 {
				continue // an empty turn says nothing
			}
			if text.Len() > 0 {
				a.Content.OfString = openai.String(text.String())
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case model.RoleUser:
			for _, part := range msg.Parts {
				switch {
				case part.Result != nil:
					id := part.Result.ID
					if id == "" {
						k := slices.IndexFunc(open, func(p pending) bool { return p.name == part.Result.Name })
						if k < 0 {
							return nil, fmt.Errorf("message %d: the result of tool %q answers no call of the model turn before it", i, part.Result.Name)
						}
						id = open[k].id
						open = slices.Delete(open, k, k+1)
					}
					content, err := resultContent(part.Result)
					if err != nil {
						return nil, fmt.Errorf("message %d: %w", i, err)
					}
					out = append(out, openai.ToolMessage(content, id))
				case part.Text != "":
					text.WriteString(part.Text)
				}
			}
			if text.Len() > 0 {
				out = append(out, openai.UserMessage(text.String()))
			}
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
	}
	return out, nil
}

// resultContent is a tool result as the tool message's text: its output as JSON. A failed call's
// output is {"error": …} (agentd's results already are; others are wrapped), so the model reads
// that the call failed and why.
func resultContent(r *model.ToolResult) (string, error) {
	out := any(r.Output)
	if r.Output == nil {
		out = map[string]any{}
	}
	if _, ok := r.Output["error"]; r.IsError && !ok {
		out = map[string]any{"error": out}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("the result of tool %q: %w", r.Name, err)
	}
	return string(b), nil
}

// fromCompletion maps a whole reply.
func fromCompletion(c *openai.ChatCompletion) (*model.Response, error) {
	if len(c.Choices) == 0 {
		return nil, errors.New("openai generate: the reply has no choices")
	}
	ch := c.Choices[0]
	var acc accumulator
	acc.text.WriteString(ch.Message.Content)
	acc.refusal.WriteString(ch.Message.Refusal)
	for _, tc := range ch.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			return nil, fmt.Errorf("openai generate: the model called a %s tool; agentd offers function tools only", tc.Type)
		}
		acc.calls = append(acc.calls, &streamCall{id: tc.ID, name: tc.Function.Name, args: []byte(tc.Function.Arguments)})
	}
	acc.finish, acc.version, acc.replied = ch.FinishReason, c.Model, true
	if c.JSON.Usage.Valid() {
		acc.usage = model.Usage{Input: int(c.Usage.PromptTokens), Output: int(c.Usage.CompletionTokens)}
	}
	return acc.response()
}

// Bounds of a streamed reply, so that a misbehaving server cannot make agentd keep without end.
const (
	maxReplyBytes = 16 << 20
	maxCalls      = 128
)

// accumulator assembles a Response from a whole reply or the chunks of a stream.
type accumulator struct {
	text, refusal strings.Builder
	calls         []*streamCall // in order of their index
	byIndex       map[int64]*streamCall
	finish        string
	version       string
	usage         model.Usage
	replied       bool // some chunk had a choice
	bytes         int
}

// streamCall is a tool call being assembled.
type streamCall struct {
	id, name string
	args     []byte
}

// add takes in one chunk, passing its text to onText when set.
func (a *accumulator) add(c openai.ChatCompletionChunk, onText func(string)) error {
	if c.Model != "" {
		a.version = c.Model
	}
	if c.JSON.Usage.Valid() {
		a.usage = model.Usage{Input: int(c.Usage.PromptTokens), Output: int(c.Usage.CompletionTokens)}
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // agentd asks for one choice
		}
		a.replied = true
		d := ch.Delta
		a.bytes += len(d.Content) + len(d.Refusal)
		if d.Content != "" {
			if onText != nil {
				onText(d.Content)
			}
			a.text.WriteString(d.Content)
		}
		a.refusal.WriteString(d.Refusal)
		for _, tc := range d.ToolCalls {
			call := a.byIndex[tc.Index]
			if call == nil {
				if len(a.calls) >= maxCalls {
					return fmt.Errorf("openai generate: the reply has more than %d tool calls", maxCalls)
				}
				call = &streamCall{}
				if a.byIndex == nil {
					a.byIndex = map[int64]*streamCall{}
				}
				a.byIndex[tc.Index] = call
				a.calls = append(a.calls, call)
			}
			if tc.ID != "" {
				call.id = tc.ID
			}
			call.name += tc.Function.Name
			call.args = append(call.args, tc.Function.Arguments...)
			a.bytes += len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
		}
		if ch.FinishReason != "" {
			a.finish = ch.FinishReason
		}
	}
	if a.bytes > maxReplyBytes {
		return fmt.Errorf("openai generate: the reply is larger than %d bytes", maxReplyBytes)
	}
	return nil
}

// response returns the assembled Response. A refusal is the response's text, with FinishReason
// FinishRefusal. Tool call arguments that are not a JSON object are an error: the call cannot
// be made as the model meant it.
func (a *accumulator) response() (*model.Response, error) {
	if !a.replied {
		return nil, errors.New("openai generate: the reply has no choices")
	}
	resp := &model.Response{FinishReason: a.finish, ModelVersion: a.version, Usage: a.usage}
	if a.refusal.Len() > 0 {
		resp.Parts = []model.Part{{Text: a.refusal.String()}}
		resp.FinishReason = FinishRefusal
		return resp, nil
	}
	if a.text.Len() > 0 {
		resp.Parts = append(resp.Parts, model.Part{Text: a.text.String()})
	}
	for _, c := range a.calls {
		if c.name == "" {
			return nil, errors.New("openai generate: the model sent a tool call without a name")
		}
		args := map[string]any{}
		if len(c.args) > 0 {
			if err := json.Unmarshal(c.args, &args); err != nil {
				return nil, fmt.Errorf("openai generate: the model called tool %q with arguments that are not a JSON object (%.200q): %w", c.name, c.args, err)
			}
		}
		resp.Parts = append(resp.Parts, model.Part{Call: &model.ToolCall{ID: c.id, Name: c.name, Args: args}})
	}
	return resp, nil
}
