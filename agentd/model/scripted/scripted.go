// Package scripted is an offline model provider for demos and tests: it replays a file of model
// turns (text and tool calls) instead of running a model. Nothing is generated and no network is
// used; the agent loop, the gateway, the policy and the decision log around it are all real.
//
// A script is <dir>/<agent>.yaml:
//
//	# What the orchestrator "says", turn by turn.
//	turns:
//	  - calls:                       # turn 1: call a tool
//	      - name: researcher
//	        args: {message: "What were Q3's numbers?"}
//	  - text: "Q3 in short: {{result}}"  # turn 2: answer, quoting the last tool result
//	    sleep: 2s                        # (optional) take this long, like a slow model
//
// Each invocation replays the script from its first turn: the turn played is the number of model
// turns since the caller's last message, so scripts are stateless and safe to run concurrently.
// The script is read again on every turn, so an edit takes effect at the next turn (lushctl run
// needs no restart); it is a demo provider, and the read costs far less than the tool calls.
// In text and in string arguments, {{message}} is the caller's message and {{result}} the text of
// the last tool result. Token counts are the turn's usage when it gives one, and otherwise an
// estimate (a token per four characters): do not bill by them.
package scripted

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lush-agents/lush/agentd/model"
)

// Script is the turns of one agent.
type Script struct {
	Turns []Turn `yaml:"turns"`
}

// Turn is one model turn: text, tool calls, or both.
type Turn struct {
	Text  string       `yaml:"text"`
	Calls []Call       `yaml:"calls"`
	Usage *model.Usage `yaml:"usage"`
	Error string       `yaml:"error"` // the provider fails with this message (to test failures)
	// Sleep delays the turn, like a slow model (a Go duration such as 2s); it ends early when the
	// invocation is cancelled or times out.
	Sleep time.Duration `yaml:"sleep"`
}

// Call is a scripted tool call.
type Call struct {
	Name string         `yaml:"name"`
	Args map[string]any `yaml:"args"`
}

// Model replays scripts from a directory.
type Model struct {
	dir string
}

// New returns a provider reading <dir>/<agent>.yaml. The directory must exist.
func New(dir string) (*Model, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("scripted model: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("scripted model: %s is not a directory of <agent>.yaml scripts", dir)
	}
	return &Model{dir: dir}, nil
}

// Load reads and checks a script file; errors name the file and line.
func Load(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Script
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	for i, t := range s.Turns {
		if t.Text == "" && len(t.Calls) == 0 && t.Error == "" {
			return nil, fmt.Errorf("%s: turns[%d]: a turn needs text, calls or error", path, i)
		}
		for j, c := range t.Calls {
			if c.Name == "" {
				return nil, fmt.Errorf("%s: turns[%d].calls[%d].name: required", path, i, j)
			}
		}
	}
	if len(s.Turns) == 0 {
		return nil, fmt.Errorf("%s: no turns", path)
	}
	return &s, nil
}

// Generate plays the turn the conversation is at.
func (m *Model) Generate(ctx context.Context, req model.Request, onText func(string)) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path := filepath.Join(m.dir, req.Agent+".yaml")
	script, err := Load(path)
	if err != nil {
		return nil, &model.Error{Provider: "scripted", Message: err.Error()}
	}
	n, message, result := position(req.Messages)
	if n >= len(script.Turns) {
		return nil, &model.Error{Provider: "scripted", Message: fmt.Sprintf("%s has %d turns; the conversation needs turn %d", path, len(script.Turns), n+1)}
	}
	t := script.Turns[n]
	if t.Sleep > 0 {
		timer := time.NewTimer(t.Sleep)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
	if t.Error != "" {
		return nil, &model.Error{Provider: "scripted", Message: t.Error}
	}
	fill := strings.NewReplacer("{{message}}", message, "{{result}}", result)
	resp := &model.Response{FinishReason: "STOP", ModelVersion: "scripted"}
	if t.Text != "" {
		text := fill.Replace(t.Text)
		if onText != nil {
			for _, piece := range chunks(text) {
				onText(piece)
			}
		}
		resp.Parts = append(resp.Parts, model.Part{Text: text})
	}
	for i, c := range t.Calls {
		args := fillArgs(c.Args, fill)
		resp.Parts = append(resp.Parts, model.Part{Call: &model.ToolCall{ID: fmt.Sprintf("call-%d-%d", n+1, i+1), Name: c.Name, Args: args}})
	}
	if t.Usage != nil {
		resp.Usage = *t.Usage
	} else {
		resp.Usage = estimate(req, resp)
	}
	return resp, nil
}

// position finds the turn to play: the model turns since the last message with text from the
// caller, that message, and the text of the last tool result.
func position(msgs []model.Message) (turn int, message, result string) {
	last := -1
	for i, m := range msgs {
		if m.Role == model.RoleUser {
			for _, p := range m.Parts {
				if p.Text != "" {
					last, message = i, p.Text
				}
			}
		}
	}
	for _, m := range msgs[last+1:] {
		if m.Role == model.RoleModel {
			turn++
		}
		for _, p := range m.Parts {
			if p.Result != nil {
				result = resultText(p.Result)
			}
		}
	}
	return turn, message, result
}

// resultText is a tool result as text: the result's text, or its JSON.
func resultText(r *model.ToolResult) string {
	if s, ok := r.Output["result"].(string); ok {
		return s
	}
	if e, ok := r.Output["error"].(map[string]any); ok {
		if msg, ok := e["message"].(string); ok {
			return msg
		}
	}
	b, _ := json.Marshal(r.Output)
	return string(b)
}

func fillArgs(args map[string]any, fill *strings.Replacer) map[string]any {
	out := make(map[string]any, len(args))
	for k, v := range args {
		if s, ok := v.(string); ok {
			v = fill.Replace(s)
		}
		out[k] = v
	}
	return out
}

// chunks splits text into word-sized pieces, as a streaming model delivers it.
func chunks(text string) []string {
	var out []string
	start := 0
	for i := 0; i < len(text); i++ {
		if text[i] == ' ' || text[i] == '\n' {
			out = append(out, text[start:i+1])
			start = i + 1
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// estimate counts a token per four characters of what was sent and what came back.
func estimate(req model.Request, resp *model.Response) model.Usage {
	in := len(req.System)
	for _, m := range req.Messages {
		b, _ := json.Marshal(m.Parts)
		in += len(b)
	}
	for _, t := range req.Tools {
		in += len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	b, _ := json.Marshal(resp.Parts)
	return model.Usage{Input: (in + 3) / 4, Output: (len(b) + 3) / 4}
}
