package openaiserver

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The reply's JSON, as the chat completions API sends it.

type completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
}

type choice struct {
	Index        int       `json:"index"`
	Message      *message  `json:"message,omitempty"`
	Delta        *message  `json:"delta,omitempty"`
	FinishReason *string   `json:"finish_reason"`
	Logprobs     *struct{} `json:"logprobs"`
}

type message struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content"`
	Refusal   *string        `json:"refusal"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
}

type wireToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// created is the reply's timestamp; fixed, so replies are reproducible.
var created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()

// finish is the turn's finish reason.
func (t Turn) finish() string {
	switch {
	case t.FinishReason != "":
		return t.FinishReason
	case len(t.Calls) > 0:
		return "tool_calls"
	}
	return "stop"
}

// calls are the turn's tool calls on the wire.
func (t Turn) calls() []wireToolCall {
	var out []wireToolCall
	for i, c := range t.Calls {
		w := wireToolCall{ID: c.ID, Type: "function"}
		if w.ID == "" {
			w.ID = fmt.Sprintf("call_%d", i+1)
		}
		w.Function.Name = c.Name
		w.Function.Arguments = c.RawArgs
		if c.RawArgs == "" {
			args := c.Args
			if args == nil {
				args = map[string]any{}
			}
			b, _ := json.Marshal(args) // maps of JSON values always marshal
			w.Function.Arguments = string(b)
		}
		out = append(out, w)
	}
	return out
}

// usageOf is the turn's usage, estimated where it gives none.
func usageOf(req Request, t Turn) *usage {
	u := usage{PromptTokens: t.Usage.Prompt, CompletionTokens: t.Usage.Completion}
	if u.PromptTokens == 0 {
		u.PromptTokens = estimate(len(req.Body))
	}
	if u.CompletionTokens == 0 {
		n := len(t.Text) + len(t.Refusal)
		for _, c := range t.calls() {
			n += len(c.Function.Name) + len(c.Function.Arguments)
		}
		u.CompletionTokens = estimate(n)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return &u
}

// estimate counts four characters a token, at least one.
func estimate(chars int) int { return max(1, (chars+3)/4) }

func ptr[T any](v T) *T { return &v }

// whole is the JSON reply.
func whole(req Request, t Turn, id string) completion {
	m := &message{Role: "assistant", ToolCalls: t.calls()}
	if t.Text != "" || len(t.Calls) == 0 && t.Refusal == "" {
		m.Content = ptr(t.Text)
	}
	if t.Refusal != "" {
		m.Refusal = ptr(t.Refusal)
	}
	return completion{ID: id, Object: "chat.completion", Created: created, Model: req.Model,
		Choices: []choice{{Message: m, FinishReason: ptr(t.finish())}}, Usage: usageOf(req, t)}
}

// chunks are the events of a streamed reply.
func chunks(req Request, t Turn, id string) []any {
	chunk := func(d *message, finish *string) completion {
		return completion{ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model,
			Choices: []choice{{Delta: d, FinishReason: finish}}}
	}
	out := []any{chunk(&message{Role: "assistant", Content: ptr("")}, nil)}
	for _, piece := range splitAfterSpaces(t.Text) {
		out = append(out, chunk(&message{Content: ptr(piece)}, nil))
	}
	if t.Refusal != "" {
		out = append(out, chunk(&message{Refusal: ptr(t.Refusal)}, nil))
	}
	for i, c := range t.calls() {
		first := wireToolCall{Index: ptr(i), ID: c.ID, Type: "function"}
		first.Function.Name = c.Function.Name
		out = append(out, chunk(&message{ToolCalls: []wireToolCall{first}}, nil))
		args := c.Function.Arguments
		for _, half := range []string{args[:len(args)/2], args[len(args)/2:]} {
			more := wireToolCall{Index: ptr(i)}
			more.Function.Arguments = half
			out = append(out, chunk(&message{ToolCalls: []wireToolCall{more}}, nil))
		}
	}
	out = append(out, chunk(&message{}, ptr(t.finish())))
	if req.IncludeUsage {
		out = append(out, completion{ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model,
			Choices: []choice{}, Usage: usageOf(req, t)})
	}
	return out
}

// splitAfterSpaces cuts text after each space ("a b c" → "a ", "b ", "c").
func splitAfterSpaces(text string) []string {
	var out []string
	for text != "" {
		i := strings.IndexByte(text, ' ')
		if i < 0 {
			out = append(out, text)
			break
		}
		out = append(out, text[:i+1])
		text = text[i+1:]
	}
	return out
}
