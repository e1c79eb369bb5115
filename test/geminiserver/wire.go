package geminiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxBody bounds a request body.
const maxBody = 32 << 20

// Request is a generateContent or streamGenerateContent request as the
// server decoded it.
type Request struct {
	Version  string                // the API version from the path, e.g. v1beta
	Model    string                // the model name from the path, e.g. gemini-2.5-flash
	Stream   bool                  // streamGenerateContent rather than generateContent
	Queue    string                // the queue the router chose
	System   string                // the text parts of systemInstruction, joined
	Contents []Content             // the conversation, oldest first
	Tools    []FunctionDeclaration // the function declarations of all tools
}

// Content is one turn of the conversation in a request, or a reply's content.
type Content struct {
	Role  string `json:"role,omitempty"` // user or model
	Parts []Part `json:"parts"`
}

// Part is a piece of a Content. The server decodes these fields and ignores
// any others (inline data, files, code execution).
type Part struct {
	Text             string            `json:"text,omitempty"`
	Thought          bool              `json:"thought,omitempty"`
	ThoughtSignature string            `json:"thoughtSignature,omitempty"` // base64, as sent
	FunctionCall     *FunctionCall     `json:"functionCall,omitempty"`
	FunctionResponse *FunctionResponse `json:"functionResponse,omitempty"`
}

// FunctionCall is a functionCall part: a model turn asking for a tool.
type FunctionCall struct {
	ID   string         `json:"id,omitempty"`
	Name string         `json:"name"`
	Args map[string]any `json:"args,omitempty"`
}

// FunctionResponse is a functionResponse part: a tool's result sent back.
type FunctionResponse struct {
	ID       string         `json:"id,omitempty"`
	Name     string         `json:"name"`
	Response map[string]any `json:"response"`
}

// FunctionDeclaration is a tool the request offers the model.
type FunctionDeclaration struct {
	Name        string
	Description string
	// Schema is the declaration's parametersJsonSchema, or its OpenAPI-style
	// parameters when it has no JSON Schema; nil when it has neither.
	Schema json.RawMessage
}

// ToolNames returns the names of the request's function declarations.
func (r Request) ToolNames() []string {
	names := make([]string, 0, len(r.Tools))
	for _, t := range r.Tools {
		names = append(names, t.Name)
	}
	return names
}

// LastFunctionResponse returns the last functionResponse part of the
// request's contents, or nil when there is none.
func (r Request) LastFunctionResponse() *FunctionResponse {
	for i := len(r.Contents) - 1; i >= 0; i-- {
		parts := r.Contents[i].Parts
		for j := len(parts) - 1; j >= 0; j-- {
			if parts[j].FunctionResponse != nil {
				return parts[j].FunctionResponse
			}
		}
	}
	return nil
}

// wireRequest is the JSON body of a generate request, in the camelCase field
// names genai sends.
type wireRequest struct {
	Contents          []Content `json:"contents"`
	SystemInstruction *Content  `json:"systemInstruction"`
	Tools             []struct {
		FunctionDeclarations []struct {
			Name                 string          `json:"name"`
			Description          string          `json:"description"`
			Parameters           json.RawMessage `json:"parameters"`
			ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
}

// decodeRequest decodes a generate request's body; the caller fills in what
// the path says. Its errors are messages for the client.
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
		return Request{}, fmt.Errorf("invalid JSON payload received: %v", err)
	}
	req := Request{Contents: wire.Contents}
	if wire.SystemInstruction != nil {
		var texts []string
		for _, p := range wire.SystemInstruction.Parts {
			if p.Text != "" {
				texts = append(texts, p.Text)
			}
		}
		req.System = strings.Join(texts, "\n")
	}
	for _, t := range wire.Tools {
		for _, d := range t.FunctionDeclarations {
			schema := d.ParametersJSONSchema
			if len(schema) == 0 {
				schema = d.Parameters
			}
			req.Tools = append(req.Tools, FunctionDeclaration{Name: d.Name, Description: d.Description, Schema: schema})
		}
	}
	return req, nil
}

// response is a GenerateContentResponse, whole or one chunk of a stream.
type response struct {
	Candidates     []candidate     `json:"candidates,omitempty"`
	PromptFeedback *promptFeedback `json:"promptFeedback,omitempty"`
	UsageMetadata  *usageMetadata  `json:"usageMetadata,omitempty"`
	ModelVersion   string          `json:"modelVersion,omitempty"`
	ResponseID     string          `json:"responseId,omitempty"`
}

type candidate struct {
	Content      *Content `json:"content,omitempty"`
	FinishReason string   `json:"finishReason,omitempty"`
	Index        int      `json:"index"`
}

type promptFeedback struct {
	BlockReason string `json:"blockReason"`
}

type usageMetadata struct {
	PromptTokenCount     int `json:"promptTokenCount"`
	CandidatesTokenCount int `json:"candidatesTokenCount"`
	ThoughtsTokenCount   int `json:"thoughtsTokenCount,omitempty"`
	TotalTokenCount      int `json:"totalTokenCount"`
}

// replyPlan is a model reply turned into what goes on the wire.
type replyPlan struct {
	turn       Turn
	calls      []Part
	usage      *usageMetadata
	version    string
	responseID string
}

// reply plans the reply turn gives to req.
func reply(req Request, turn Turn, responseID string) replyPlan {
	p := replyPlan{turn: turn, version: req.Model, responseID: responseID}
	if p.turn.FinishReason == "" {
		p.turn.FinishReason = "STOP"
	}
	for _, c := range turn.Calls {
		args := c.Args
		if args == nil {
			args = map[string]any{}
		}
		p.calls = append(p.calls, Part{FunctionCall: &FunctionCall{ID: c.ID, Name: c.Name, Args: args}})
	}
	u := turn.Usage
	if u.Prompt == 0 {
		u.Prompt = estimateTokens(requestText(req))
	}
	if u.Candidates == 0 && turn.BlockReason == "" {
		u.Candidates = estimateTokens(turn.Text + partsText(p.calls))
	}
	p.usage = &usageMetadata{
		PromptTokenCount:     u.Prompt,
		CandidatesTokenCount: u.Candidates,
		ThoughtsTokenCount:   u.Thoughts,
		TotalTokenCount:      u.Prompt + u.Candidates + u.Thoughts,
	}
	return p
}

// whole is the reply as one generateContent response.
func (p replyPlan) whole() response {
	if p.turn.BlockReason != "" {
		return p.blocked()
	}
	var parts []Part
	if p.turn.Text != "" {
		parts = append(parts, Part{Text: p.turn.Text})
	}
	parts = append(parts, p.calls...)
	r := p.chunk(parts)
	r.Candidates[0].FinishReason = p.turn.FinishReason
	r.UsageMetadata = p.usage
	return r
}

// chunks is the reply as streamGenerateContent events: the text in pieces,
// then the calls; the last carries the finish reason and the usage.
func (p replyPlan) chunks() []response {
	if p.turn.BlockReason != "" {
		return []response{p.blocked()}
	}
	var out []response
	for _, piece := range splitText(p.turn.Text) {
		out = append(out, p.chunk([]Part{{Text: piece}}))
	}
	if len(p.calls) > 0 {
		out = append(out, p.chunk(p.calls))
	}
	if len(out) == 0 {
		out = append(out, p.chunk(nil))
	}
	last := &out[len(out)-1]
	last.Candidates[0].FinishReason = p.turn.FinishReason
	last.UsageMetadata = p.usage
	return out
}

// chunk is a response with one candidate holding parts (no content when
// parts is empty).
func (p replyPlan) chunk(parts []Part) response {
	c := candidate{}
	if len(parts) > 0 {
		c.Content = &Content{Role: "model", Parts: parts}
	}
	return response{Candidates: []candidate{c}, ModelVersion: p.version, ResponseID: p.responseID}
}

// blocked is the response to a blocked prompt: no candidates.
func (p replyPlan) blocked() response {
	return response{
		PromptFeedback: &promptFeedback{BlockReason: p.turn.BlockReason},
		UsageMetadata:  p.usage,
		ModelVersion:   p.version,
		ResponseID:     p.responseID,
	}
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

// requestText is the text a request sends the model: the system instruction
// and every part, for estimating its tokens.
func requestText(r Request) string {
	var b strings.Builder
	b.WriteString(r.System)
	for _, c := range r.Contents {
		b.WriteString(partsText(c.Parts))
	}
	for _, t := range r.Tools {
		b.WriteString(t.Name)
		b.WriteString(t.Description)
		b.Write(t.Schema)
	}
	return b.String()
}

// partsText is the text of parts, with calls and responses as JSON.
func partsText(parts []Part) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
		if p.FunctionCall != nil {
			writeJSONText(&b, p.FunctionCall)
		}
		if p.FunctionResponse != nil {
			writeJSONText(&b, p.FunctionResponse)
		}
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
