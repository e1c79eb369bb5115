// Package manifest defines the build manifest: the resolved, content-addressed description of a
// project that `lushctl build` writes to .lush/build/<hash>.json and that the gateway, agentd and
// the scheduler read. The hash is the SHA-256 of the encoded manifest, so the same inputs give the
// same bytes and the same hash on every machine, and a manifest can be checked against its name.
//
// Everything in a manifest is sorted and free of absolute paths and times.
package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/lush-agents/lush/internal/schedule"
)

// Schema identifies this version of the manifest format.
const Schema = "lush.dev/manifest/v1"

// Manifest is a built project.
type Manifest struct {
	Schema          string           `json:"schema"`
	Project         string           `json:"project"`
	InputHash       string           `json:"input_hash"`     // digest over Inputs
	PolicyLibrary   string           `json:"policy_library"` // digest of the base Rego library in the bundle
	Inputs          []Input          `json:"inputs"`
	Authorization   Authorization    `json:"authorization"`
	ServiceAccounts []ServiceAccount `json:"service_accounts"`
	Agents          []Agent          `json:"agents"`
	Loops           []Loop           `json:"loops"`
	Tools           []Tool           `json:"tools"`
	Grants          []Grant          `json:"grants"`
	Credentials     []Credential     `json:"credentials"`
	Skills          []Skill          `json:"skills"`
	Policies        []string         `json:"policies"` // the project's Rego files in the bundle
	// Roles are lush.yaml roles: project role (audit, approve) -> the principals that hold it,
	// sorted. Omitted when lush.yaml has no roles:, so such manifests keep their hash.
	Roles map[string][]string `json:"roles,omitempty"`
	// RateLimits are lush.yaml rate_limits, sorted. Omitted when there are none, so such
	// manifests keep their hash.
	RateLimits []RateLimit `json:"rate_limits,omitempty"`
	// Budgets are lush.yaml budgets, sorted by name. Omitted when there are none, so such
	// manifests keep their hash.
	Budgets []Budget `json:"budgets,omitempty"`
	// ArgumentReads are the tools whose tools/call arguments the policy can read, as the
	// compiler found them in the bundle's Rego. Nil in a manifest built before the compiler
	// recorded them: then every tool's arguments count as read.
	ArgumentReads *ArgumentReads `json:"argument_reads,omitempty"`
}

// ArgumentReads are the tools whose tools/call arguments some rule the decision reaches can
// read. A tool they do not name is decided the same whatever its arguments.
type ArgumentReads struct {
	All   bool            `json:"all,omitempty"`   // some rule reads the arguments of every tool
	Tools []ToolArguments `json:"tools,omitempty"` // sorted by Ref
}

// ToolArguments names the tools of Ref ("*": of every reference) whose arguments a rule reads:
// Names, or every tool of Ref when Names is empty.
type ToolArguments struct {
	Ref   string   `json:"ref"`
	Names []string `json:"names,omitempty"` // sorted and unique
}

// AnyRef is the ToolArguments.Ref of a rule that reads the arguments of tools of any reference.
const AnyRef = "*"

// Read reports whether the policy can read the arguments of a tools/call of ref's tool name.
// A nil ArgumentReads (a manifest from before they were recorded) reads every tool's.
func (a *ArgumentReads) Read(ref, name string) bool {
	if a == nil || a.All {
		return true
	}
	for _, t := range a.Tools {
		if (t.Ref == ref || t.Ref == AnyRef) && (len(t.Names) == 0 || slices.Contains(t.Names, name)) {
			return true
		}
	}
	return false
}

// Budget is a limit of Limit units (Unit: tokens, tool_calls or credits) per calendar period
// (Per: hour, day, week or month, UTC) for an agent (one usage, whoever calls it) or for the
// callers a principal pattern matches (a principal id, a group, or "*"; each caller has its own
// usage). Exactly one of Agent and Principal is set.
type Budget struct {
	Name      string       `json:"name"`
	Agent     string       `json:"agent,omitempty"`
	Principal string       `json:"principal,omitempty"`
	Unit      string       `json:"unit"`
	Limit     int64        `json:"limit"`
	Per       string       `json:"per"`
	Costs     []BudgetCost `json:"costs,omitempty"` // credits budgets: the cost of a tools/call (default 1)
}

// String names the budget as listings show it: "researcher-tokens: agent researcher, 200000
// tokens per day", with its costs after it.
func (b Budget) String() string {
	who := "agent " + b.Agent
	if b.Agent == "" {
		who = "each of " + b.Principal
	}
	unit := b.Unit
	if unit == "tool_calls" {
		unit = "tool calls"
	}
	s := fmt.Sprintf("%s: %s, %d %s per %s", b.Name, who, b.Limit, unit, b.Per)
	if len(b.Costs) > 0 {
		costs := make([]string, 0, len(b.Costs))
		for _, c := range b.Costs {
			tool := c.Tool
			if c.Name != "" {
				tool += " (" + c.Name + ")"
			}
			costs = append(costs, fmt.Sprintf("%s %d", tool, c.Credits))
		}
		s += " (costs: " + strings.Join(costs, ", ") + ")"
	}
	return s
}

// BudgetCost is the credits a tools/call of Tool costs: of its tool Name when set, of every
// tool of Tool otherwise.
type BudgetCost struct {
	Tool    string `json:"tool"`
	Name    string `json:"name,omitempty"`
	Credits int64  `json:"credits"`
}

// RateLimit is a token bucket of Burst requests refilled at Rate: for a principal, one bucket
// per caller it matches; for a tool, one bucket shared by every caller. Exactly one of
// Principal and Tool is set.
type RateLimit struct {
	Principal string `json:"principal,omitempty"`
	Tool      string `json:"tool,omitempty"`
	Rate      string `json:"rate"` // N/s, N/m or N/h
	Burst     int    `json:"burst"`
}

// String names the limit as messages show it: "group:contractors 5/s burst 10".
func (r RateLimit) String() string {
	who := r.Principal
	if who == "" {
		who = r.Tool
	}
	return fmt.Sprintf("%s %s burst %d", who, r.Rate, r.Burst)
}

// Input is a file the build read, with the digest of its content.
type Input struct {
	Path   string `json:"path"`
	Digest string `json:"digest"`
}

// Authorization holds the project's authorization settings, defaults applied.
type Authorization struct {
	MaxCallDepth        int      `json:"max_call_depth"`
	ApprovalRequiredFor []string `json:"approval_required_for"`
}

// ServiceAccount is a declared non-human identity.
type ServiceAccount struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// Agent is a resolved agent spec.
type Agent struct {
	Name        string        `json:"name"`
	Model       string        `json:"model"`        // as the spec names it
	ModelTarget ModelTarget   `json:"model_target"` // where the model runs, resolved by the build
	Description string        `json:"description"`
	Prompt      string        `json:"prompt"` // the system instruction: description, then skill fragments
	Skills      []string      `json:"skills"`
	Tools       []AllowedTool `json:"tools"`
	ACL         []ACLEntry    `json:"acl"`
}

// ModelTarget is where an agent's model runs: the provider, the provider's model id, and (from a
// lush.yaml models: entry) the endpoint and the broker address of the key. It never holds a
// secret.
type ModelTarget struct {
	Provider string `json:"provider"`           // gemini, openai or anthropic
	Model    string `json:"model"`              // the provider's model id
	BaseURL  string `json:"base_url,omitempty"` // "" for the provider's own API
	// Credential is the broker address of the API key (model://<name>); "" when the endpoint
	// needs none (a local OpenAI-compatible server).
	Credential   string `json:"credential,omitempty"`
	Organization string `json:"organization,omitempty"` // openai: the OpenAI-Organization header
	Project      string `json:"project,omitempty"`      // openai: the OpenAI-Project header
	MaxTokens    int    `json:"max_tokens,omitempty"`   // anthropic: the max_tokens of each request
}

// AllowedTool is one entry of an agent's exhaustive allowlist.
type AllowedTool struct {
	Ref    string   `json:"ref"`
	Access string   `json:"access"`
	Only   []string `json:"only,omitempty"` // named tools of an MCP server; empty means all
	// Paths confine a file tool (builtin/file_read, builtin/file_write, builtin/file_list) to
	// these project-relative directories or files: clean slash paths, sorted and unique, never
	// absolute, never containing "..", never inside .git or .lush; "." is the whole project.
	// Set for the file tools, empty for every other tool.
	Paths []string `json:"paths,omitempty"`
}

// ACLEntry gives a principal a role.
type ACLEntry struct {
	Principal string `json:"principal"`
	Role      string `json:"role"`
}

// Loop is a resolved loop spec. The optional fields are omitted when the spec leaves them out,
// and their zero values mean the defaults.
type Loop struct {
	Name        string     `json:"name"`
	Schedule    string     `json:"schedule"`
	Agent       string     `json:"agent"`
	RunAs       string     `json:"run_as"`
	Instruction string     `json:"instruction"`
	ACL         []ACLEntry `json:"acl"`
	Concurrency int        `json:"concurrency,omitempty"` // firings that may run at once; 0 means 1
	Overlap     string     `json:"overlap,omitempty"`     // skip or queue a firing due at the concurrency limit; "" means skip
	TimeoutMS   int64      `json:"timeout_ms,omitempty"`  // wall-clock limit of one firing; 0 means none set
	CatchUpMS   *int64     `json:"catch_up_ms,omitempty"` // how old a missed firing may be and still run; nil means the scheduler's default, 0 never
	PhaseMS     int64      `json:"phase_ms,omitempty"`    // offset of an @every schedule's firings from the epoch grid
}

// Parsed parses the loop's schedule and applies its phase.
func (l Loop) Parsed() (*schedule.Schedule, error) {
	s, err := schedule.Parse(l.Schedule)
	if err != nil {
		return nil, fmt.Errorf("loop %q: schedule %q: %w", l.Name, l.Schedule, err)
	}
	if l.PhaseMS != 0 {
		p := time.Duration(l.PhaseMS) * time.Millisecond
		if p/time.Millisecond != time.Duration(l.PhaseMS) {
			return nil, fmt.Errorf("loop %q: phase_ms %d is out of range", l.Name, l.PhaseMS)
		}
		if s, err = s.WithPhase(p); err != nil {
			return nil, fmt.Errorf("loop %q: %w", l.Name, err)
		}
	}
	return s, nil
}

// Tool is every tool reference some agent allowlists, with how to reach it and its classes.
type Tool struct {
	Ref       string           `json:"ref"`
	Kind      string           `json:"kind"` // mcp, agent, a2a, local, builtin
	Stdio     *Stdio           `json:"stdio,omitempty"`
	Remote    *Remote          `json:"remote,omitempty"`
	A2A       *A2A             `json:"a2a,omitempty"`
	Local     *LocalTool       `json:"local,omitempty"`
	TimeoutMS int64            `json:"timeout_ms,omitempty"`
	Classes   map[string]Class `json:"classes"` // tool name ("" for single tools, "*" for a server's default) -> class
}

// Stdio is a local MCP server that Lush starts. The process runs in the project directory.
type Stdio struct {
	Launcher string   `json:"launcher"` // npx, uvx or stdio
	Package  string   `json:"package"`  // npm/Python package, or the command
	Args     []string `json:"args,omitempty"`
	Env      []EnvVar `json:"env,omitempty"`
}

// EnvVar is a non-secret environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Remote is a remote MCP server.
type Remote struct {
	URL       string `json:"url"`
	Transport string `json:"transport"` // streamable-http or sse
}

// A2A is a remote A2A agent: its base URL, below which its Agent Card is published.
type A2A struct {
	URL string `json:"url"`
}

// LocalTool is an executable speaking Lush's local tool protocol.
type LocalTool struct {
	Dir          string          `json:"dir"` // project-relative
	Command      []string        `json:"command"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	Digest       string          `json:"digest"` // of the tool's directory (spec.DigestDir)
	Skill        string          `json:"skill,omitempty"`
}

// Class is a tool's access level and risk class.
type Class struct {
	Access string `json:"access"`
	Risk   string `json:"risk"`
}

// Grant gives a principal access to a tool.
type Grant struct {
	Tool      string   `json:"tool"`
	Principal string   `json:"principal"`
	Access    string   `json:"access"`
	Only      []string `json:"only,omitempty"`
}

// Credential declares which credential a principal uses with a tool. It never holds the secret.
type Credential struct {
	Tool      string   `json:"tool"`
	Principal string   `json:"principal"`
	Type      string   `json:"type"`
	Header    string   `json:"header,omitempty"`
	Env       []string `json:"env,omitempty"`
	Vault     string   `json:"vault,omitempty"`
	// OAuth flows (docs/credentials.md): how an oauth token is obtained per principal
	// (token_exchange, authorization_code, client_credentials; "" for a stored token), and what
	// it is asked for. Audience and Resource default to the server's URL at run time.
	Flow     string   `json:"flow,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
	Audience string   `json:"audience,omitempty"`
	Resource string   `json:"resource,omitempty"`
}

// Skill is a resolved skill.
type Skill struct {
	Ref         string   `json:"ref"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Digest      string   `json:"digest"`
	Tools       []string `json:"tools,omitempty"`
}

// Agent returns the named agent.
func (m *Manifest) Agent(name string) (*Agent, bool) {
	for i := range m.Agents {
		if m.Agents[i].Name == name {
			return &m.Agents[i], true
		}
	}
	return nil, false
}

// Tool returns the tool with the given reference.
func (m *Manifest) Tool(ref string) (*Tool, bool) {
	for i := range m.Tools {
		if m.Tools[i].Ref == ref {
			return &m.Tools[i], true
		}
	}
	return nil, false
}

// Encode returns the manifest's canonical bytes and their hash (64 hex digits).
func Encode(m *Manifest) (data []byte, hash string, err error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, "", fmt.Errorf("encode manifest: %w", err)
	}
	return buf.Bytes(), Hash(buf.Bytes()), nil
}

// Hash returns the hex SHA-256 of encoded manifest bytes.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

var hashRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidHash reports whether s is a full manifest hash.
func ValidHash(s string) bool { return hashRe.MatchString(s) }

// Short abbreviates a hash for display.
func Short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// Decode parses manifest bytes and checks that they hash to want (if want is not empty).
func Decode(data []byte, want string) (*Manifest, error) {
	if want != "" {
		if got := Hash(data); got != want {
			return nil, fmt.Errorf("manifest %s is corrupt or altered: its content hashes to %s", Short(want), Short(got))
		}
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	if m.Schema != Schema {
		return nil, fmt.Errorf("manifest has schema %q; this lushctl reads %q (rebuild the project)", m.Schema, Schema)
	}
	return &m, nil
}
