package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/lush-agents/lush/gateway/builtin/files"
	"github.com/lush-agents/lush/gateway/builtin/shell"
	"github.com/lush-agents/lush/internal/manifest"
)

// BuiltinsConfig configures the tools built into Lush (builtin/<name> references). An agent can
// call one only if its allowlist names it, and each call is decided like any other: the shell is
// a destructive write, so it is stubbed unless live writes are on for builtin/shell and needs an
// approval unless the project's authorization says otherwise.
type BuiltinsConfig struct {
	Shell ShellConfig `yaml:"shell"`
}

// ShellConfig is the builtin/shell tool's configuration (docs/gateway.md). The SHELL_TOOL_*
// environment variables override it when the gateway starts.
type ShellConfig struct {
	Mode           string        `yaml:"mode"`             // off (default), allowlist or full
	Allowed        []string      `yaml:"allowed_prefixes"` // allowlist: command prefixes, token by token
	Roots          []string      `yaml:"roots"`            // working directories must resolve inside these; default the project
	Timeout        time.Duration `yaml:"timeout"`          // default 30s
	MaxTimeout     time.Duration `yaml:"max_timeout"`      // the most a call may ask for; default 5m
	MaxOutput      int           `yaml:"max_output"`       // bytes; default 16 KiB
	MaxOutputLimit int           `yaml:"max_output_limit"` // the most a call may ask for; default 1 MiB
	Path           string        `yaml:"path"`             // PATH of the commands; default /usr/local/bin:/usr/bin:/bin
}

// runner returns the shell runner for the project at dir, with getenv's SHELL_TOOL_* applied.
func (c ShellConfig) runner(dir string, getenv func(string) string) (*shell.Config, error) {
	sc := shell.Config{Mode: shell.Mode(c.Mode), Allowed: c.Allowed, Roots: c.Roots, Dir: dir,
		Timeout: c.Timeout, MaxTimeout: c.MaxTimeout, MaxOutput: c.MaxOutput, MaxOutputLimit: c.MaxOutputLimit}
	if sc.Mode == "" {
		sc.Mode = shell.ModeOff
	}
	if len(sc.Roots) == 0 && dir != "" {
		sc.Roots = []string{dir}
	}
	if sc.MaxTimeout == 0 {
		sc.MaxTimeout = 5 * time.Minute
	}
	if sc.MaxOutputLimit == 0 {
		sc.MaxOutputLimit = 1 << 20
	}
	if c.Path != "" {
		sc.Env = []string{"PATH=" + c.Path, "LANG=C.UTF-8"}
	}
	out, err := shell.FromEnv(getenv, sc)
	if err != nil {
		return nil, fmt.Errorf("gateway config: builtins.shell: %w", err)
	}
	return &out, nil
}

// shellInputSchema and shellOutputSchema describe builtin/shell to clients (seed 001's input).
var (
	shellInputSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"cmd":{"type":"string","minLength":1,"description":"One command and its arguments. It runs without a shell: no pipes, redirects, ; or &&; quote arguments with spaces."},` +
		`"cwd":{"type":"string","description":"Working directory, relative to the workspace (default: the workspace)."},` +
		`"timeoutMs":{"type":"integer","minimum":1,"description":"Kill the command after this long (bounded by the server)."},` +
		`"maxOutputChars":{"type":"integer","minimum":1,"description":"Keep at most this much output (bounded by the server)."}` +
		`},"required":["cmd"],"additionalProperties":false}`)
	shellOutputSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"ok":{"type":"boolean"},"exitCode":{"type":"integer"},"output":{"type":"string"},"truncated":{"type":"boolean"},` +
		`"outputBytes":{"type":"integer"},"durationMs":{"type":"integer"},"timedOut":{"type":"boolean"},` +
		`"error":{"type":"object","properties":{"code":{"type":"string"},"message":{"type":"string"}},"required":["code","message"]}` +
		`},"required":["ok","exitCode","output","truncated","durationMs"]}`)
)

// The file tools' schemas (seed 003).
var (
	fileInputSchemas = map[string]json.RawMessage{
		"file_read": json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","minLength":1,` +
			`"description":"The file, relative to the project."}},"required":["path"],"additionalProperties":false}`),
		"file_write": json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","minLength":1,` +
			`"description":"The file, relative to the project; missing directories are made."},"content":{"type":"string"},` +
			`"append":{"type":"boolean","description":"Add to the end instead of replacing."}},"required":["path","content"],"additionalProperties":false}`),
		"file_list": json.RawMessage(`{"type":"object","properties":{"path":{"type":"string",` +
			`"description":"The directory, relative to the project."}},"required":["path"],"additionalProperties":false}`),
	}
	fileOutputSchema = json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"},"path":{"type":"string"},` +
		`"content":{"type":"string"},"size":{"type":"integer"},"truncated":{"type":"boolean"},"entries":{"type":"array"},` +
		`"error":{"type":"object","properties":{"code":{"type":"string"},"message":{"type":"string"}},"required":["code","message"]}},` +
		`"required":["ok"]}`)
	fileDescriptions = map[string]string{
		"file_read":  "Reads a text file of the project (the first MiB).",
		"file_write": "Writes (or appends to) a text file of the project.",
		"file_list":  "Lists a directory of the project: names, types and sizes.",
	}
)

// builtinTool describes a builtin/<name> tool of an agent's allowlist entry as an MCP tool, or
// nil for one this gateway does not serve (it is then not offered, and never reachable).
func builtinTool(t *manifest.Tool, at manifest.AllowedTool) *exposed {
	name := strings.TrimPrefix(t.Ref, "builtin/")
	obj := map[string]any{"name": name}
	switch {
	case name == "shell":
		obj["inputSchema"], obj["outputSchema"] = shellInputSchema, shellOutputSchema
		obj["description"] = "Runs one command in the workspace, without a shell, and returns its exit code and output (truncated when long). " +
			"Which commands may run and where is the server's configuration; a refusal says why."
	case fileInputSchemas[name] != nil:
		obj["inputSchema"], obj["outputSchema"] = fileInputSchemas[name], fileOutputSchema
		obj["description"] = fileDescriptions[name] + " Only under: " + strings.Join(at.Paths, ", ") + "."
	default:
		return nil
	}
	raw, _ := json.Marshal(obj)
	return &exposed{Name: name, Ref: t.Ref, Raw: raw, Builtin: name, Paths: at.Paths, HasOut: true}
}

// builtinRefusal is why a built-in tool refuses a call's arguments, asked before the call is
// decided: builtin/shell's mode and allowlist (shell.Config.Refusal), so that a command that
// could never run is denied at once instead of waiting for a person's approval first. "" when
// the tool would take the arguments (it checks everything again when it runs) or is not a
// built-in tool; arguments of the wrong shape are the schema check's to refuse.
func (g *Gateway) builtinRefusal(e *exposed, args any) string {
	if e.Builtin != "shell" || g.shell == nil {
		return ""
	}
	obj, _ := args.(map[string]any)
	cmd, ok := obj["cmd"].(string)
	if !ok {
		return ""
	}
	if r := g.shell.Refusal(cmd); r != nil {
		return r.Code + ": " + r.Message
	}
	return ""
}

// runBuiltin runs an allowed call of a built-in tool and returns its MCP result: the outcome as
// structuredContent, a short text for models that read only content, isError when it did not
// succeed.
func (g *Gateway) runBuiltin(ctx context.Context, e *exposed, arguments json.RawMessage) (json.RawMessage, error) {
	if e.Builtin != "shell" {
		return g.runFileTool(e, arguments)
	}
	if g.shell == nil {
		return nil, fmt.Errorf("built-in tool %q is not served by this gateway", e.Builtin)
	}
	var req shell.Request
	if len(arguments) > 0 && string(arguments) != "null" {
		if err := json.Unmarshal(arguments, &req); err != nil {
			return nil, fmt.Errorf("builtin/shell arguments: %v", err)
		}
	}
	res := g.shell.Run(ctx, req)
	var text string
	switch {
	case res.Error != nil:
		text = fmt.Sprintf("%s: %s", res.Error.Code, res.Error.Message)
		if res.Output != "" {
			text += "\n" + res.Output
		}
	default:
		text = fmt.Sprintf("exit code %d (%d ms)\n%s", res.ExitCode, res.DurationMs, res.Output)
	}
	return json.Marshal(map[string]any{"content": []map[string]any{{"type": "text", "text": text}},
		"structuredContent": res, "isError": !res.OK})
}

// runFileTool runs file_read, file_write or file_list in the project, confined to the paths the
// agent's allowlist entry gives the tool.
func (g *Gateway) runFileTool(e *exposed, arguments json.RawMessage) (json.RawMessage, error) {
	var req struct {
		Path    string `json:"path"`
		Content string `json:"content"`
		Append  bool   `json:"append"`
	}
	if len(arguments) > 0 && string(arguments) != "null" {
		if err := json.Unmarshal(arguments, &req); err != nil {
			return nil, fmt.Errorf("builtin/%s arguments: %v", e.Builtin, err)
		}
	}
	if g.workspace == "" || len(e.Paths) == 0 {
		return nil, fmt.Errorf("builtin/%s has no project directory or no paths to work in", e.Builtin)
	}
	sb := &files.Sandbox{Root: g.workspace, Allowed: e.Paths}
	var res files.Result
	switch e.Builtin {
	case "file_read":
		res = sb.Read(req.Path)
	case "file_write":
		res = sb.Write(req.Path, req.Content, req.Append)
	case "file_list":
		res = sb.List(req.Path)
	default:
		return nil, fmt.Errorf("built-in tool %q is not served by this gateway", e.Builtin)
	}
	var text string
	switch {
	case res.Error != nil:
		text = res.Error.Code + ": " + res.Error.Message
	case res.Content != nil:
		text = *res.Content
	case res.Entries != nil:
		var b strings.Builder
		for _, en := range res.Entries {
			fmt.Fprintf(&b, "%s\t%s\t%d\n", en.Type, en.Name, en.Size)
		}
		text = b.String()
	default:
		text = fmt.Sprintf("wrote %s (%d bytes)", res.Path, res.Size)
	}
	return json.Marshal(map[string]any{"content": []map[string]any{{"type": "text", "text": text}},
		"structuredContent": res, "isError": !res.OK})
}
