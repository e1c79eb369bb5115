// Package model is agentd's view of a language model: one request (a system instruction, the
// conversation so far, and the tools the model may call) gets one response (text and tool calls,
// with token counts), optionally streamed. Providers implement Model: Gemini through
// google.golang.org/genai (package gemini), OpenAI and OpenAI-compatible servers through
// github.com/openai/openai-go (package openai), Anthropic through anthropic-sdk-go (package
// anthropic), and an offline scripted provider for demos and tests (package scripted). A Router runs each request on the provider its Target names, so one
// process runs agents on several providers; another engine is added by implementing Model and
// registering a Factory for it with the Router. Nothing else in agentd knows which provider runs.
//
// Two things every provider shares live here too: the rule a provider has for tool names
// (NameRule; a Model that restricts them implements ToolNamer, which the Router forwards per
// target, and agentd offers tools under names the rule accepts), and the bound on what a
// provider reads of one response (BoundResponses, DefaultMaxResponseBytes).
package model

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/lush-agents/lush/internal/manifest"
)

// Model generates the next model turn of a conversation.
type Model interface {
	// Generate returns the model's next turn. When onText is not nil, text is passed to it as it
	// arrives (streaming); the returned Response still holds the whole turn. An error is the
	// provider's failure (bad key, quota, unreachable), not the model's refusal.
	Generate(ctx context.Context, req Request, onText func(string)) (*Response, error)
}

// Roles of messages.
const (
	RoleUser  = "user"  // the caller's message, or tool results sent back to the model
	RoleModel = "model" // what the model said and which tools it called
)

// Request is one call to the model.
type Request struct {
	Model   string // the model name from the agent spec, e.g. gemini-2.5-flash, openai/gpt-4.1 or fast
	Agent   string // the agent this runs for (providers may use it: scripted picks its script)
	Project string // the Lush project of the agent (where its keys are looked up)
	// Target is where the model runs, as the build resolved Model: the provider, its model id,
	// endpoint and key address. The Router hands a provider the request with Model set to
	// Target.Model; a zero Target (a build from before targets were recorded) is Model on Gemini.
	Target   Target
	System   string    // the system instruction
	Messages []Message // the conversation, oldest first
	Tools    []Tool    // the tools the model may call
}

// Target is where a model runs (the manifest's record of it).
type Target = manifest.ModelTarget

// Message is one turn of a conversation.
type Message struct {
	Role  string `json:"role"`
	Parts []Part `json:"parts"`
}

// Part is a piece of a message: text, a tool call (model turns), or a tool result (user turns).
// Exactly one field is set.
type Part struct {
	Text   string      `json:"text,omitempty"`
	Call   *ToolCall   `json:"call,omitempty"`
	Result *ToolResult `json:"result,omitempty"`
}

// Tool is a tool the model may call: an MCP tool as the gateway lists it.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"` // JSON Schema of the arguments
}

// ToolCall is the model asking for a tool to run.
type ToolCall struct {
	ID   string         `json:"id,omitempty"` // provider's id for the call, if it has one
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
}

// ToolResult is what a tool call produced, sent back to the model. Failures (a denial, an
// unknown tool, an upstream error) are results too, with IsError set and Output an object the
// model can read: {"error": {"code": ..., "message": ...}}.
type ToolResult struct {
	ID      string         `json:"id,omitempty"`
	Name    string         `json:"name"`
	Output  map[string]any `json:"output"`
	IsError bool           `json:"is_error,omitempty"`
}

// Response is the model's turn.
type Response struct {
	Parts        []Part
	Usage        Usage
	FinishReason string // provider's reason, e.g. STOP, MAX_TOKENS, SAFETY
	ModelVersion string // the model that answered, when the provider says
}

// Calls returns the tool calls of the response, in order.
func (r *Response) Calls() []*ToolCall {
	var out []*ToolCall
	for _, p := range r.Parts {
		if p.Call != nil {
			out = append(out, p.Call)
		}
	}
	return out
}

// Text returns the response's text parts joined.
func (r *Response) Text() string {
	s := ""
	for _, p := range r.Parts {
		s += p.Text
	}
	return s
}

// Usage counts tokens.
type Usage struct {
	Input  int `json:"input"`
	Output int `json:"output"`
}

// Add returns the sum of two usages.
func (u Usage) Add(v Usage) Usage {
	return Usage{Input: u.Input + v.Input, Output: u.Output + v.Output}
}

// Error is a provider failure with the provider's own status, for messages and retry decisions.
type Error struct {
	Provider string
	Status   int    // HTTP status, when there is one
	Code     string // provider's status code, e.g. RESOURCE_EXHAUSTED
	Message  string
}

func (e *Error) Error() string {
	switch {
	case e.Status != 0 && e.Code != "":
		return fmt.Sprintf("%s: %d %s: %s", e.Provider, e.Status, e.Code, e.Message)
	case e.Status != 0:
		return fmt.Sprintf("%s: %d: %s", e.Provider, e.Status, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Provider, e.Message)
}
