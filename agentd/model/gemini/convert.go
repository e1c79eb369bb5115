package gemini

import (
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/genai"

	"github.com/lush-agents/lush/agentd/model"
)

// skipSignature is the placeholder thought signature Google documents for
// function calls whose real signature was not kept. Gemini 3 models return a
// thoughtSignature with the first function call of each step and reject a
// conversation that sends such a call back without one (400 "Function call
// is missing a thought_signature"); model.ToolCall has no field to carry the
// real signature, so every replayed model turn gets the placeholder on its
// first function call. Earlier models ignore it.
const skipSignature = "skip_thought_signature_validator"

// toContents maps the conversation to genai contents.
func toContents(msgs []model.Message) ([]*genai.Content, error) {
	contents := make([]*genai.Content, 0, len(msgs))
	for i, msg := range msgs {
		var role string
		switch msg.Role {
		case model.RoleUser:
			role = genai.RoleUser
		case model.RoleModel:
			role = genai.RoleModel
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
		c := &genai.Content{Role: role}
		signed := false
		for _, p := range msg.Parts {
			switch {
			case p.Call != nil:
				part := &genai.Part{FunctionCall: &genai.FunctionCall{ID: p.Call.ID, Name: p.Call.Name, Args: p.Call.Args}}
				if role == genai.RoleModel && !signed {
					part.ThoughtSignature = []byte(skipSignature)
					signed = true
				}
				c.Parts = append(c.Parts, part)
			case p.Result != nil:
				output := p.Result.Output
				if output == nil {
					output = map[string]any{}
				}
				c.Parts = append(c.Parts, &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: p.Result.ID, Name: p.Result.Name, Response: output}})
			case p.Text != "":
				c.Parts = append(c.Parts, &genai.Part{Text: p.Text})
			}
		}
		if len(c.Parts) == 0 {
			continue // Gemini rejects contents without parts; an empty message says nothing
		}
		contents = append(contents, c)
	}
	return contents, nil
}

// toConfig maps the system instruction and the tools.
func toConfig(req model.Request) (*genai.GenerateContentConfig, error) {
	config := &genai.GenerateContentConfig{}
	if req.System != "" {
		config.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: req.System}}}
	}
	if len(req.Tools) == 0 {
		return config, nil
	}
	decls := make([]*genai.FunctionDeclaration, 0, len(req.Tools))
	for _, t := range req.Tools {
		var schema any = map[string]any{"type": "object"}
		if len(t.InputSchema) > 0 {
			if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
				return nil, fmt.Errorf("tool %q: decoding its input schema: %w", t.Name, err)
			}
		}
		decls = append(decls, &genai.FunctionDeclaration{Name: t.Name, Description: t.Description, ParametersJsonSchema: schema})
	}
	config.Tools = []*genai.Tool{{FunctionDeclarations: decls}}
	return config, nil
}

// accumulator assembles a Response from a whole GenerateContentResponse or
// from the chunks of a stream.
type accumulator struct {
	parts        []model.Part
	usage        *genai.GenerateContentResponseUsageMetadata
	finishReason string
	modelVersion string
	candidates   bool // some response had a candidate
	blockReason  string
	blockMessage string
}

// add takes in one response, passing its text to onText when set.
func (a *accumulator) add(r *genai.GenerateContentResponse, onText func(string)) {
	if r == nil {
		return
	}
	if r.UsageMetadata != nil {
		a.usage = r.UsageMetadata
	}
	if r.ModelVersion != "" {
		a.modelVersion = r.ModelVersion
	}
	if f := r.PromptFeedback; f != nil && f.BlockReason != "" {
		a.blockReason, a.blockMessage = string(f.BlockReason), f.BlockReasonMessage
	}
	if len(r.Candidates) == 0 || r.Candidates[0] == nil {
		return
	}
	a.candidates = true
	cand := r.Candidates[0]
	if cand.FinishReason != "" {
		a.finishReason = string(cand.FinishReason)
	}
	if cand.Content == nil {
		return
	}
	for _, p := range cand.Content.Parts {
		switch {
		case p == nil || p.Thought:
			// Thought summaries are not part of the answer.
		case p.FunctionCall != nil:
			args := p.FunctionCall.Args
			if args == nil {
				args = map[string]any{}
			}
			a.parts = append(a.parts, model.Part{Call: &model.ToolCall{ID: p.FunctionCall.ID, Name: p.FunctionCall.Name, Args: args}})
		case p.Text != "":
			if onText != nil {
				onText(p.Text)
			}
			a.appendText(p.Text)
		}
	}
}

// appendText adds text to the last part when that is text, so that text
// streamed in pieces becomes one part.
func (a *accumulator) appendText(text string) {
	if n := len(a.parts); n > 0 && a.parts[n-1].Call == nil && a.parts[n-1].Result == nil {
		a.parts[n-1].Text += text
		return
	}
	a.parts = append(a.parts, model.Part{Text: text})
}

// response returns the assembled Response, or an error when Gemini gave no
// candidate (it blocked the prompt).
func (a *accumulator) response() (*model.Response, error) {
	if !a.candidates {
		if a.blockReason != "" {
			msg := fmt.Sprintf("gemini generate: the prompt was blocked (%s)", a.blockReason)
			if a.blockMessage != "" {
				msg += ": " + a.blockMessage
			}
			return nil, errors.New(msg)
		}
		return nil, errors.New("gemini generate: the response has no candidates")
	}
	resp := &model.Response{Parts: a.parts, FinishReason: a.finishReason, ModelVersion: a.modelVersion}
	if u := a.usage; u != nil {
		resp.Usage = model.Usage{Input: int(u.PromptTokenCount), Output: int(u.CandidatesTokenCount + u.ThoughtsTokenCount)}
	}
	return resp, nil
}
