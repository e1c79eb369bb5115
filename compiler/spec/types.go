// Package spec defines and parses the files of a Lush project: lush.yaml (the project
// configuration), agents/<name>/spec.yaml, loops/<name>.yaml and tools/<name>/tool.yaml.
//
// Parsing uses gopkg.in/yaml.v3's node API so that every value keeps the file, line and column
// it was written at, and every problem (bad YAML, wrong type, unknown field, invalid value) is
// reported into a diag.List with that position. Parsers never stop at the first problem: they
// return what they could read, so a build reports every error in one run.
//
// This package checks each file on its own. Checks across files (does the loop's agent exist, is
// the service account declared) belong to the compiler.
package spec

import (
	"math"
	"time"

	"github.com/lush-agents/lush/internal/diag"
)

// Scalar is a value read from a spec file together with where it was written. A zero Pos means
// the value was absent.
type Scalar[T any] struct {
	Value T
	Pos   diag.Pos
}

// Set reports whether the value was present in the file.
func (s Scalar[T]) Set() bool { return s.Pos.Line != 0 }

// Access levels and risk classes of tools.
var (
	AccessLevels = []string{"read", "write"}
	RiskClasses  = []string{"read", "write", "network", "destructive"}
)

// Roles that an ACL entry can hold on agents and on loops.
var (
	AgentRoles = []string{"execute"}
	LoopRoles  = []string{"execute", "read"}
)

// ProjectRoles are the roles lush.yaml roles: can give principals across the whole project:
// audit reads the decision log (GET /audit/decisions, the web UI at /ui); approve decides
// approvals; budget reads budget usage and tops budgets up (GET /budgets, POST
// /budgets/{name}/top-up; audit may read usage too); tasks reads and cancels the tasks other
// principals created (docs/gateway.md#tasks).
var ProjectRoles = []string{"audit", "approve", "budget", "tasks"}

// OverlapModes are what happens to a loop firing that is due while the loop's concurrency limit
// of firings is already running: skip it, or queue it until one finishes.
var OverlapModes = []string{"skip", "queue"}

// Limits of the loop fields.
const (
	MaxLoopConcurrency = 100
	MaxLoopTimeout     = 24 * time.Hour
)

// CredentialTypes are the kinds of credential an MCP server can need.
var CredentialTypes = []string{"oauth", "bearer", "api_key", "basic", "env"}

// OAuthFlows are the ways the gateway gets an oauth credential per principal (absent: a stored
// static token).
var OAuthFlows = []string{"token_exchange", "authorization_code", "client_credentials"}

// Transports are the ways to reach a remote MCP server.
var Transports = []string{"streamable-http", "sse"}

// Class is a tool's classification: its access level and risk class.
type Class struct {
	Access Scalar[string]
	Risk   Scalar[string]
	Pos    diag.Pos
}

// ACLEntry gives a principal a role on an agent or loop.
type ACLEntry struct {
	Principal Scalar[string]
	Role      Scalar[string]
	Pos       diag.Pos
}

// Agent is agents/<name>/spec.yaml.
type Agent struct {
	File        string // project-relative path
	Dir         string // the <name> directory
	Name        Scalar[string]
	Model       Scalar[string]
	Description Scalar[string]
	Skills      []Scalar[string]
	Tools       []ToolEntry
	ACL         []ACLEntry
}

// ToolEntry is one entry of an agent's exhaustive tools allowlist.
type ToolEntry struct {
	Ref    Scalar[string] // the tool reference, from "server:" or "name:"
	Access Scalar[string] // the highest access the agent gets to the tool
	Only   []NamedTool    // "tools:": narrows an MCP server to these tools
	// Paths are the "paths:" of a file tool (see FileTools): project-relative directories or
	// files, normalized by CleanPath, in the order written; duplicates are kept.
	Paths    []Scalar[string]
	PathsPos diag.Pos // where "paths:" is; zero without it
	Pos      diag.Pos
}

// NamedTool is one tool of an MCP server named in an allowlist entry, optionally classified.
type NamedTool struct {
	Name  Scalar[string]
	Class *Class // nil when the entry only names the tool
	Pos   diag.Pos
}

// Loop is loops/<name>.yaml: a scheduled agent invocation.
type Loop struct {
	File        string
	Name        Scalar[string]
	Schedule    Scalar[string]
	Agent       Scalar[string]
	RunAs       Scalar[string]
	Instruction Scalar[string]
	ACL         []ACLEntry

	// The fields below are optional; unset (Set() false) means the default.
	Concurrency Scalar[int]           // firings that may run at once, 1 to MaxLoopConcurrency (default 1)
	Overlap     Scalar[string]        // one of OverlapModes (default skip)
	Timeout     Scalar[time.Duration] // wall-clock limit of one firing, up to MaxLoopTimeout
	CatchUp     Scalar[time.Duration] // how old a missed firing may be and still run; set to 0 means never; unset means the scheduler's default
	Phase       Scalar[time.Duration] // offset of an @every schedule's firings, in [0, interval)
}

// ProjectConfig is lush.yaml.
type ProjectConfig struct {
	File            string
	Pos             diag.Pos
	Name            Scalar[string]   // project:
	Models          []Scalar[string] // models: the known model names (replace the default lists)
	ModelEntries    []ModelEntry     // models: table entries (models.go)
	SkillsDir       Scalar[string]   // skills_dir: where skills are resolved (default "skills")
	ServiceAccounts []ServiceAccount
	Servers         []Server
	ToolClasses     []ToolClass
	ToolGrants      []ToolGrant
	Credentials     []Credential
	Authorization   Authorization
	Roles           []Role // roles: project roles and the principals that hold them, in file order
	RateLimits      []RateLimit
	Budgets         []Budget // budgets: usage limits per agent or principal and period (budgets.go)
}

// RateLimit is one entry of lush.yaml rate_limits: a token bucket of Burst requests refilled at
// Count requests per Per. A principal entry gives every caller it matches (the principal
// itself, or a member of the group) a bucket of its own; a tool entry has one bucket per tool
// reference, shared by all callers. Exactly one of Principal and Tool is set.
type RateLimit struct {
	Principal Scalar[string]
	Tool      Scalar[string]
	Rate      Scalar[string] // as written: N/s, N/m or N/h
	Count     int            // N of Rate
	Per       time.Duration  // the unit of Rate: a second, a minute or an hour
	Burst     Scalar[int]    // unset: the default, DefaultBurst
	Pos       diag.Pos
}

// PerSecond is the rate in requests per second.
func (r RateLimit) PerSecond() float64 { return float64(r.Count) / r.Per.Seconds() }

// DefaultBurst is the burst of a rate limit that gives none: the requests of one second,
// rounded up, and at least 1.
func (r RateLimit) DefaultBurst() int { return max(1, int(math.Ceil(r.PerSecond()))) }

// EffectiveBurst is the burst written, or DefaultBurst.
func (r RateLimit) EffectiveBurst() int {
	if r.Burst.Set() {
		return r.Burst.Value
	}
	return r.DefaultBurst()
}

// Role is one entry of lush.yaml roles: a project role (one of ProjectRoles) and the principals
// that hold it. The principals are checked by the compiler, as ACL principals are.
type Role struct {
	Name       Scalar[string]
	Principals []Scalar[string]
}

// ServiceAccount declares a non-human identity.
type ServiceAccount struct {
	Name        Scalar[string]
	Description Scalar[string]
	Pos         diag.Pos
}

// Server says how to reach or start an MCP server.
type Server struct {
	Ref       Scalar[string]
	URL       Scalar[string] // remote: the endpoint (default https://<host>/<path>)
	Transport Scalar[string] // remote: streamable-http (default) or sse
	Args      []Scalar[string]
	Env       []EnvVar
	Timeout   Scalar[time.Duration] // per call
	Pos       diag.Pos
}

// EnvVar is one non-secret environment variable of a stdio server.
type EnvVar struct {
	Name  Scalar[string]
	Value Scalar[string]
}

// ToolClass classifies one tool: a named tool of an MCP server ("*" for every tool of it not
// otherwise classified), or a single-tool reference (Tool is empty).
type ToolClass struct {
	Ref   Scalar[string]
	Tool  Scalar[string]
	Class Class
}

// ToolGrant lists the principals that may use a tool.
type ToolGrant struct {
	Tool   Scalar[string]
	Grants []Grant
	Pos    diag.Pos
}

// Grant gives a principal an access level on a tool, optionally only on named tools of an MCP
// server.
type Grant struct {
	Principal Scalar[string]
	Access    Scalar[string]
	Only      []Scalar[string]
	Pos       diag.Pos
}

// Credential declares the credential a principal uses with a tool.
type Credential struct {
	Tool      Scalar[string]
	Principal Scalar[string]
	Type      Scalar[string]
	Header    Scalar[string]   // api_key: the header carrying the key
	Env       []Scalar[string] // env: the variables the secret provides
	Vault     Scalar[string]   // optional Vault path template
	Flow      Scalar[string]   // oauth: how the token is obtained (OAuthFlows); unset: stored
	Scopes    []Scalar[string] // oauth with a flow: the scopes asked for
	Audience  Scalar[string]   // oauth with a flow: the audience asked for (default: the server's URL)
	Resource  Scalar[string]   // oauth with a flow: the RFC 8707 resource (default: the server's URL)
	Pos       diag.Pos
}

// Authorization holds the project's authorization settings.
type Authorization struct {
	MaxCallDepth        Scalar[int]
	ApprovalRequiredFor []Scalar[string] // risk classes that need a person's approval
	ApprovalSet         bool             // approval_required_for was written (an empty list turns approvals off)
}

// LocalTool is tools/<name>/tool.yaml: an executable speaking Lush's local tool protocol.
type LocalTool struct {
	File         string // project-relative path of tool.yaml
	Dir          string // project-relative directory
	Name         Scalar[string]
	Description  Scalar[string]
	Command      []Scalar[string] // argv; the first element is relative to Dir or on PATH
	InputSchema  any              // JSON Schema (decoded JSON value), nil when absent
	OutputSchema any
	SchemaPos    diag.Pos // position of input_schema
	OutSchemaPos diag.Pos
	Class        *Class
	Timeout      Scalar[time.Duration]
}
