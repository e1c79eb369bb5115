package anthropicserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
)

// maxBody bounds a request body.
const maxBody = 32 << 20

// Request is a Messages API request as the server decoded it.
type Request struct {
	APIKey    string      // the key, from x-api-key or Authorization: Bearer
	Version   string      // the anthropic-version header
	Header    http.Header // all the request's headers
	Queue     string      // the queue the router chose
	Model     string
	MaxTokens int
	Stream    bool
	System    string // system as sent: the string, or its text blocks joined with "\n"
	Messages  []Message
	Tools     []Tool
}

// Message is one turn of the conversation in a request. Content sent as a
// string is decoded as one text block.
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
}

// Block is a content block of a request's message: text, tool_use or
// tool_result. The server decodes these fields and ignores any others.
type Block struct {
	Type      string         `json:"type"`
	Text      string         `json:"text,omitempty"`
	ID        string         `json:"id,omitempty"`   // tool_use
	Name      string         `json:"name,omitempty"` // tool_use
	Input     map[string]any `json:"input,omitempty"`
	ToolUseID string         `json:"tool_use_id,omitempty"` // tool_result
	IsError   bool           `json:"is_error,omitempty"`    // tool_result
	// Content is a tool_result's content as sent: a string or a list of
	// blocks. ResultText reads its text.
	Content json.RawMessage `json:"content,omitempty"`
}

// ResultText returns a tool_result block's content text: the string, or its
// text blocks joined.
func (b Block) ResultText() string {
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return s
	}
	var blocks []Block
	if json.Unmarshal(b.Content, &blocks) != nil {
		return ""
	}
	var texts []string
	for _, c := range blocks {
		texts = append(texts, c.Text)
	}
	return strings.Join(texts, "")
}

// Tool is a tool the request offers the model.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// ToolNames returns the names of the request's tools.
func (r Request) ToolNames() []string {
	names := make([]string, 0, len(r.Tools))
	for _, t := range r.Tools {
		names = append(names, t.Name)
	}
	return names
}

// LastToolResults returns the tool_result blocks of the request's last
// message, or nil when it has none.
func (r Request) LastToolResults() []Block {
	if len(r.Messages) == 0 {
		return nil
	}
	var out []Block
	for _, b := range r.Messages[len(r.Messages)-1].Content {
		if b.Type == "tool_result" {
			out = append(out, b)
		}
	}
	return out
}

// wireRequest is the JSON body of a request.
type wireRequest struct {
	Model     *string         `json:"model"`
	MaxTokens *int            `json:"max_tokens"`
	Stream    bool            `json:"stream"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []Tool `json:"tools"`
}

// decodeRequest decodes a request's body. Its errors are messages for the
// client, naming the field.
func decodeRequest(w http.ResponseWriter, r *http.Request) (Request, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return Request{}, fmt.Errorf("request body larger than %d bytes", maxBody)
		}
		return Request{}, fmt.Errorf("reading the request body: %w", err)
	}
	var wire wireRequest
	if err := json.Unmarshal(body, &wire); err != nil {
		return Request{}, fmt.Errorf("the request body is not valid JSON: %v", err)
	}
	switch {
	case wire.Model == nil || *wire.Model == "":
		return Request{}, errors.New("model: Field required")
	case wire.MaxTokens == nil:
		return Request{}, errors.New("max_tokens: Field required")
	case *wire.MaxTokens < 1:
		return Request{}, errors.New("max_tokens: Input should be greater than or equal to 1")
	case len(wire.Messages) == 0:
		return Request{}, errors.New("messages: Field required")
	}
	req := Request{Model: *wire.Model, MaxTokens: *wire.MaxTokens, Stream: wire.Stream, Tools: wire.Tools}
	if req.System, err = decodeSystem(wire.System); err != nil {
		return Request{}, err
	}
	for i, m := range wire.Messages {
		msg := Message{Role: m.Role}
		var text string
		if json.Unmarshal(m.Content, &text) == nil {
			msg.Content = []Block{{Type: "text", Text: text}}
		} else if err := json.Unmarshal(m.Content, &msg.Content); err != nil {
			return Request{}, fmt.Errorf("messages.%d.content: Input should be a valid string or list of content blocks", i)
		}
		req.Messages = append(req.Messages, msg)
	}
	return req, nil
}

// decodeSystem decodes system: a string or a list of text blocks.
func decodeSystem(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []Block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", errors.New("system: Input should be a valid string or list of text blocks")
	}
	texts := make([]string, 0, len(blocks))
	for i, b := range blocks {
		if b.Type != "text" {
			return "", fmt.Errorf("system.%d.type: Input should be 'text'", i)
		}
		texts = append(texts, b.Text)
	}
	return strings.Join(texts, "\n"), nil
}

var (
	toolName  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
	toolUseID = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
)

// validate checks the request as the API does.
func (r Request) validate() error {
	names := make(map[string]bool, len(r.Tools))
	for i, t := range r.Tools {
		if !toolName.MatchString(t.Name) {
			return fmt.Errorf("tools.%d.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'", i)
		}
		if names[t.Name] {
			return fmt.Errorf("tools: Tool names must be unique: %s", t.Name)
		}
		names[t.Name] = true
		var schema struct {
			Type string `json:"type"`
		}
		if len(t.InputSchema) == 0 {
			return fmt.Errorf("tools.%d.input_schema: Field required", i)
		}
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil || schema.Type != "object" {
			return fmt.Errorf("tools.%d.input_schema.type: Input should be 'object'", i)
		}
	}
	var pending []string // tool_use ids of the previous assistant turn
	for i, m := range r.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fmt.Errorf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if i > 0 && r.Messages[i-1].Role == m.Role {
			return fmt.Errorf("messages: roles must alternate between \"user\" and \"assistant\", but found multiple %q roles in a row (at messages.%d)", m.Role, i)
		}
		if len(m.Content) == 0 {
			return fmt.Errorf("messages.%d.content: all messages must have non-empty content", i)
		}
		var err error
		if pending, err = checkContent(i, m, pending); err != nil {
			return err
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message", len(r.Messages)-1, strings.Join(pending, ", "))
	}
	return nil
}

// checkContent checks message i's blocks. pending holds the tool_use ids of
// the turn before; it returns this turn's.
func checkContent(i int, m Message, pending []string) ([]string, error) {
	answered := make(map[string]bool)
	var uses []string
	others := false // a block other than tool_result was seen
	for j, b := range m.Content {
		at := fmt.Sprintf("messages.%d.content.%d", i, j)
		switch b.Type {
		case "text":
			if b.Text == "" {
				return nil, fmt.Errorf("%s.text: text content blocks must be non-empty", at)
			}
			others = true
		case "tool_use":
			if m.Role != "assistant" {
				return nil, fmt.Errorf("%s: tool_use blocks may only appear in assistant messages", at)
			}
			if !toolUseID.MatchString(b.ID) {
				return nil, fmt.Errorf("%s.id: String should match pattern '^[a-zA-Z0-9_-]+$'", at)
			}
			if b.Name == "" {
				return nil, fmt.Errorf("%s.name: Field required", at)
			}
			if b.Input == nil {
				return nil, fmt.Errorf("%s.input: Input should be a valid dictionary", at)
			}
			uses = append(uses, b.ID)
			others = true
		case "tool_result":
			if m.Role != "user" {
				return nil, fmt.Errorf("%s: tool_result blocks may only appear in user messages", at)
			}
			if others {
				return nil, fmt.Errorf("%s: tool_result blocks must come before any other content in the message", at)
			}
			found := false
			for _, id := range pending {
				found = found || id == b.ToolUseID
			}
			if !found {
				return nil, fmt.Errorf("%s: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message", at, b.ToolUseID)
			}
			answered[b.ToolUseID] = true
		default:
			return nil, fmt.Errorf("%s.type: this Anthropic stand-in accepts text, tool_use and tool_result blocks, not %q", at, b.Type)
		}
	}
	var missing []string
	for _, id := range pending {
		if !answered[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message", i-1, strings.Join(missing, ", "))
	}
	return uses, nil
}

// replyPlan is a model reply turned into what goes on the wire.
type replyPlan struct {
	turn   Turn
	id     string
	model  string
	blocks []map[string]any // text and tool_use blocks, whole
	usage  Usage
}

// plan plans the reply turn gives to req; n numbers it.
func plan(req Request, turn Turn, n int) replyPlan {
	p := replyPlan{turn: turn, id: fmt.Sprintf("msg_anthropicserver_%d", n), model: req.Model}
	if p.turn.StopReason == "" {
		p.turn.StopReason = "end_turn"
		if len(turn.Calls) > 0 {
			p.turn.StopReason = "tool_use"
		}
	}
	if turn.Text != "" {
		p.blocks = append(p.blocks, map[string]any{"type": "text", "text": turn.Text})
	}
	var out strings.Builder
	out.WriteString(turn.Text)
	for k, c := range turn.Calls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("toolu_%02d_%02d", n, k+1)
		}
		input := c.Input
		if input == nil {
			input = map[string]any{}
		}
		p.blocks = append(p.blocks, map[string]any{"type": "tool_use", "id": id, "name": c.Name, "input": input})
		out.WriteString(c.Name)
		writeJSONText(&out, input)
	}
	p.usage = turn.Usage
	if p.usage.Input == 0 {
		p.usage.Input = estimateTokens(requestText(req))
	}
	if p.usage.Output == 0 {
		p.usage.Output = estimateTokens(out.String())
	}
	return p
}

// message is the reply as a Message object: whole when final, else as
// message_start carries it (no content, no stop reason, one output token).
func (p replyPlan) message(final bool) map[string]any {
	usage := map[string]any{
		"input_tokens":                p.usage.Input,
		"output_tokens":               p.usage.Output,
		"cache_creation_input_tokens": p.usage.CacheCreation,
		"cache_read_input_tokens":     p.usage.CacheRead,
	}
	m := map[string]any{
		"id": p.id, "type": "message", "role": "assistant", "model": p.model,
		"content": []map[string]any{}, "stop_reason": nil, "stop_sequence": nil, "stop_details": nil,
		"usage": usage,
	}
	if final {
		m["content"] = p.blocks
		for k, v := range p.stop() {
			m[k] = v
		}
	} else {
		usage["output_tokens"] = 1
	}
	return m
}

// stop is the stop_reason, stop_sequence and stop_details of the reply.
func (p replyPlan) stop() map[string]any {
	s := map[string]any{"stop_reason": p.turn.StopReason, "stop_sequence": nil, "stop_details": nil}
	if r := p.turn.Refusal; r != nil && p.turn.StopReason == "refusal" {
		s["stop_details"] = map[string]any{"type": "refusal", "category": nullable(r.Category), "explanation": nullable(r.Explanation)}
	}
	return s
}

// nullable is s, or nil (JSON null) when s is empty.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// event is one server-sent event.
type event struct {
	name string
	data []byte
}

// events is the reply as a stream of server-sent events.
func (p replyPlan) events() []event {
	var out []event
	add := func(name string, v map[string]any) {
		v["type"] = name
		b, _ := json.Marshal(v) // maps of JSON values always marshal
		out = append(out, event{name: name, data: b})
	}
	add("message_start", map[string]any{"message": p.message(false)})
	add("ping", map[string]any{})
	if p.turn.Malformed {
		return append(out, event{name: "content_block_start", data: []byte(`{"type": "content_block_start", "index": 0, "content_bl`)})
	}
	for i, b := range p.blocks {
		switch b["type"] {
		case "text":
			add("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, piece := range splitText(b["text"].(string)) {
				add("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			if p.turn.StreamError != "" || p.turn.Cut {
				break
			}
			add("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			input, _ := json.Marshal(b["input"])
			for _, piece := range append([]string{""}, splitBytes(string(input), 7)...) {
				add("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
			}
		}
		if p.turn.StreamError != "" {
			add("error", map[string]any{"error": map[string]any{"type": p.turn.StreamError, "message": defaultMessage(p.turn.StreamError)}})
			return out
		}
		if p.turn.Cut {
			return out
		}
		add("content_block_stop", map[string]any{"index": i})
	}
	if p.turn.StreamError != "" {
		add("error", map[string]any{"error": map[string]any{"type": p.turn.StreamError, "message": defaultMessage(p.turn.StreamError)}})
		return out
	}
	if p.turn.Cut {
		return out
	}
	add("message_delta", map[string]any{"delta": p.stop(), "usage": map[string]any{"output_tokens": p.usage.Output}})
	add("message_stop", map[string]any{})
	return out
}

// writeJSON writes v as a JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a failed write means the client went away
}

// writeError writes Anthropic's error body. An empty type is the one
// Anthropic pairs with status; an empty message is one for the type.
func writeError(w http.ResponseWriter, status int, typ, message, retryAfter string) {
	if typ == "" {
		typ = errorType(status)
	}
	if message == "" {
		message = defaultMessage(typ)
	}
	if retryAfter != "" {
		w.Header().Set("retry-after", retryAfter)
	}
	w.Header().Set("request-id", "req_anthropicserver")
	writeJSON(w, status, map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": typ, "message": message},
		"request_id": "req_anthropicserver",
	})
}

// errorType is the error.type Anthropic answers with status.
func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

// defaultMessage is a message for an error type.
func defaultMessage(typ string) string {
	switch typ {
	case "rate_limit_error":
		return "Number of request tokens has exceeded your per-minute rate limit"
	case "overloaded_error":
		return "Overloaded"
	case "api_error":
		return "Internal server error"
	case "timeout_error":
		return "Request timed out"
	}
	return strings.ReplaceAll(typ, "_", " ")
}

// splitText splits s after each space, so that the pieces joined are s.
func splitText(s string) []string {
	var out []string
	for _, piece := range strings.SplitAfter(s, " ") {
		if piece != "" {
			out = append(out, piece)
		}
	}
	return out
}

// splitBytes splits s into pieces of n bytes (the last may be shorter), as
// the API splits a tool's input JSON, not at token boundaries.
func splitBytes(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// requestText is the text a request sends the model, for estimating its
// tokens.
func requestText(r Request) string {
	var b strings.Builder
	b.WriteString(r.System)
	for _, m := range r.Messages {
		for _, c := range m.Content {
			b.WriteString(c.Text)
			b.WriteString(c.Name)
			if c.Input != nil {
				writeJSONText(&b, c.Input)
			}
			b.Write(bytes.TrimSpace(c.Content))
		}
	}
	for _, t := range r.Tools {
		b.WriteString(t.Name)
		b.WriteString(t.Description)
		b.Write(t.InputSchema)
	}
	return b.String()
}

// writeJSONText appends v's JSON to b.
func writeJSONText(b *strings.Builder, v any) {
	if j, err := json.Marshal(v); err == nil {
		b.Write(j)
	}
}

// estimateTokens estimates the tokens of s at four characters a token, at
// least one.
func estimateTokens(s string) int {
	return max(1, (len(s)+3)/4)
}
