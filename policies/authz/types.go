package authz

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The actions a decision can be about.
const (
	ActionToolsCall     = "tools/call"
	ActionToolsList     = "tools/list"
	ActionResourcesList = "resources/list"
	ActionResourcesRead = "resources/read"
	ActionPromptsList   = "prompts/list"
	ActionPromptsGet    = "prompts/get"
	ActionAgentInvoke   = "agent/invoke"
	ActionLoopTrigger   = "loop/trigger"
	ActionLoopRead      = "loop/read"
	ActionAuditRead     = "audit/read" // reading the decision log (the audit API)
	// Approvals of calls that wait for a person (the approvals API).
	ActionApprovalRead   = "approval/read"   // listing and reading approvals
	ActionApprovalDecide = "approval/decide" // approving or denying one
	// Budgets (the budgets API).
	ActionBudgetRead  = "budget/read"   // reading budget usage
	ActionBudgetTopUp = "budget/top-up" // adding units to a budget's current period
	// Requests an MCP server sends to the client during a call, decided before they reach it
	// (input.call names the call).
	ActionSamplingCreate    = "sampling/createMessage"
	ActionElicitationCreate = "elicitation/create"
	ActionRootsList         = "roots/list"
)

// ServerRequestActions are the actions of requests a server sends to the client during a call.
var ServerRequestActions = []string{ActionSamplingCreate, ActionElicitationCreate, ActionRootsList}

// Actions lists every action, in the order the docs present them.
var Actions = []string{ActionToolsCall, ActionToolsList, ActionResourcesList, ActionResourcesRead,
	ActionPromptsList, ActionPromptsGet, ActionAgentInvoke, ActionLoopTrigger, ActionLoopRead, ActionAuditRead, ActionApprovalRead, ActionApprovalDecide,
	ActionBudgetRead, ActionBudgetTopUp, ActionSamplingCreate, ActionElicitationCreate, ActionRootsList}

// Input is the policy's input document. Its JSON form is public API for security teams
// (docs/policy.md): fields are added, never renamed or removed.
type Input struct {
	Action      string    `json:"action"`
	Principal   Principal `json:"principal"`
	Agent       string    `json:"agent,omitempty"`
	Chain       []string  `json:"chain,omitempty"` // agents from the outermost caller to Agent, inclusive
	Depth       int       `json:"depth,omitempty"`
	Tool        *Tool     `json:"tool,omitempty"`
	Arguments   any       `json:"arguments,omitempty"` // decoded JSON
	LiveWrites  bool      `json:"live_writes"`
	Environment string    `json:"environment,omitempty"`
	Loop        string    `json:"loop,omitempty"`
	// RateLimit is set by the enforcer when the call exceeds one of the project's rate_limits:
	// the policy denies it with lush.rate.limited. Absent when no limit is exceeded.
	RateLimit *RateLimit `json:"rate_limit,omitempty"`
	// Approval is set by the MCP gateway when a person approved this exact call (its tool and
	// arguments digest) after an earlier decision asked for approval: the policy then drops the
	// approvals it would ask for (lush.approval.granted). Absent otherwise.
	Approval *Approval `json:"approval,omitempty"`
	// Budget is set by the enforcer for tools/call and agent/invoke when budgets of the project
	// apply to the call (budget.go): the policy denies it with lush.budget.exhausted when one
	// is exhausted. Absent when no budget applies.
	Budget *Budget `json:"budget,omitempty"`
	// Call is set by the MCP gateway for a request an upstream server sends to the client during
	// a call (sampling/createMessage, elicitation/create, roots/list): the call it belongs to,
	// which the gateway allowed. Absent for every other action.
	Call *CallRef `json:"call,omitempty"`
}

// CallRef names the call a server request belongs to.
type CallRef struct {
	DecisionID string `json:"decision_id"` // the call's decision
	Action     string `json:"action"`      // tools/call, prompts/get, resources/read
	Outcome    string `json:"outcome"`     // the call's outcome: "allow" for a call that runs
}

// value converts the call to an OPA value.
func (c *CallRef) value() ast.Value {
	return ast.NewObject(
		ast.Item(ast.InternedTerm("decision_id"), ast.StringTerm(c.DecisionID)),
		ast.Item(ast.InternedTerm("action"), ast.StringTerm(c.Action)),
		ast.Item(ast.InternedTerm("outcome"), ast.StringTerm(c.Outcome)),
	)
}

// Approval tells the policy that a person approved the call.
type Approval struct {
	ID         string `json:"id"`          // the approval: the id of the decision that asked for it
	Status     string `json:"status"`      // "approved"
	ApprovedBy string `json:"approved_by"` // the principal who approved it
}

// value converts the approval to an OPA value.
func (a *Approval) value() ast.Value {
	return ast.NewObject(
		ast.Item(ast.InternedTerm("id"), ast.StringTerm(a.ID)),
		ast.Item(ast.InternedTerm("status"), ast.StringTerm(a.Status)),
		ast.Item(ast.InternedTerm("approved_by"), ast.StringTerm(a.ApprovedBy)),
	)
}

// RateLimit tells the policy that a call exceeds a rate limit of the project.
type RateLimit struct {
	Exceeded     bool   `json:"exceeded"`
	Limit        string `json:"limit"`          // the limit, as "group:contractors 5/s burst 10"
	RetryAfterMS int64  `json:"retry_after_ms"` // when a retry can succeed, in milliseconds
}

// value converts the rate limit to an OPA value.
func (r *RateLimit) value() ast.Value {
	return ast.NewObject(
		ast.Item(ast.InternedTerm("exceeded"), ast.InternedTerm(r.Exceeded)),
		ast.Item(ast.InternedTerm("limit"), ast.StringTerm(r.Limit)),
		ast.Item(ast.InternedTerm("retry_after_ms"), ast.IntNumberTerm(int(r.RetryAfterMS))),
	)
}

// Principal is the caller: a user, group or service account and the groups it is in.
type Principal struct {
	ID     string   `json:"id"`
	Groups []string `json:"groups"`
	// Authentication is how the enforcement point authenticated the caller: oauth, jwt,
	// apikey, delegation, proxy, dev, schedule, envoy_jwt or spiffe; absent when not told.
	Authentication string `json:"authentication,omitempty"`
}

// Tool is the tool a call is about.
type Tool struct {
	Ref    string `json:"ref"`
	Name   string `json:"name,omitempty"`
	Access string `json:"access,omitempty"` // what the caller believes the call needs (optional)
	Risk   string `json:"risk,omitempty"`   // a hint (optional)

	// ArgumentsValid is set to false by an enforcement point that found the call's arguments do
	// not match the tool's input schema (the MCP gateway, on tools/call); nil when they match or
	// were not checked, so that a valid call's input is the same at every enforcement point.
	ArgumentsValid *bool `json:"arguments_valid,omitempty"`
	// SchemaErrors lists what did not match ("/path: message"), bounded and without argument
	// values; set only when ArgumentsValid is false.
	SchemaErrors []string `json:"schema_errors,omitempty"`
	// Refusal is set by an enforcement point that knows the tool itself refuses the call's
	// arguments (the MCP gateway, for a built-in tool whose configuration refuses them: a
	// builtin/shell command its mode or allowlist does not admit): the tool's reason. "" when the
	// tool would take them or was not asked.
	Refusal string `json:"refusal,omitempty"`
}

// value converts the input to an OPA value without a JSON round trip on the hot path.
func (in Input) value() (ast.Value, error) { return in.valueWith(nil) }

// valueWith is value, with the arguments already converted to args (by argumentsValue) unless
// args is nil.
func (in Input) valueWith(args ast.Value) (ast.Value, error) {
	obj := ast.NewObject(
		ast.Item(ast.InternedTerm("action"), ast.StringTerm(in.Action)),
		ast.Item(ast.InternedTerm("live_writes"), ast.InternedTerm(in.LiveWrites)),
	)
	groups := make([]*ast.Term, 0, len(in.Principal.Groups))
	for _, g := range in.Principal.Groups {
		groups = append(groups, ast.StringTerm(g))
	}
	principal := ast.NewObject(
		ast.Item(ast.InternedTerm("id"), ast.StringTerm(in.Principal.ID)),
		ast.Item(ast.InternedTerm("groups"), ast.ArrayTerm(groups...)),
	)
	if in.Principal.Authentication != "" {
		principal.Insert(ast.InternedTerm("authentication"), ast.StringTerm(in.Principal.Authentication))
	}
	obj.Insert(ast.InternedTerm("principal"), ast.NewTerm(principal))
	if in.Agent != "" {
		obj.Insert(ast.InternedTerm("agent"), ast.StringTerm(in.Agent))
	}
	chain := make([]*ast.Term, 0, len(in.Chain))
	for _, a := range in.Chain {
		chain = append(chain, ast.StringTerm(a))
	}
	obj.Insert(ast.InternedTerm("chain"), ast.ArrayTerm(chain...))
	obj.Insert(ast.InternedTerm("depth"), ast.InternedTerm(in.Depth))
	if t := in.Tool; t != nil {
		obj.Insert(ast.InternedTerm("tool"), ast.NewTerm(t.value()))
	}
	if in.Arguments != nil {
		if args == nil {
			var err error
			if args, err = argumentsValue(in.Arguments); err != nil {
				return nil, fmt.Errorf("arguments: %w", err)
			}
		}
		obj.Insert(ast.InternedTerm("arguments"), ast.NewTerm(args))
	}
	if in.Environment != "" {
		obj.Insert(ast.InternedTerm("environment"), ast.StringTerm(in.Environment))
	}
	if in.Loop != "" {
		obj.Insert(ast.InternedTerm("loop"), ast.StringTerm(in.Loop))
	}
	if in.RateLimit != nil {
		obj.Insert(ast.InternedTerm("rate_limit"), ast.NewTerm(in.RateLimit.value()))
	}
	if in.Approval != nil {
		obj.Insert(ast.InternedTerm("approval"), ast.NewTerm(in.Approval.value()))
	}
	if in.Budget != nil {
		obj.Insert(ast.InternedTerm("budget"), ast.NewTerm(in.Budget.value()))
	}
	if in.Call != nil {
		obj.Insert(ast.InternedTerm("call"), ast.NewTerm(in.Call.value()))
	}
	return obj, nil
}

// value converts the tool object to an OPA value.
func (t *Tool) value() ast.Object {
	tool := ast.NewObject(ast.Item(ast.InternedTerm("ref"), ast.StringTerm(t.Ref)), ast.Item(ast.InternedTerm("name"), ast.StringTerm(t.Name)))
	if t.Access != "" {
		tool.Insert(ast.InternedTerm("access"), ast.StringTerm(t.Access))
	}
	if t.Risk != "" {
		tool.Insert(ast.InternedTerm("risk"), ast.StringTerm(t.Risk))
	}
	if t.ArgumentsValid != nil {
		tool.Insert(ast.InternedTerm("arguments_valid"), ast.InternedTerm(*t.ArgumentsValid))
	}
	if len(t.SchemaErrors) > 0 {
		errs := make([]*ast.Term, 0, len(t.SchemaErrors))
		for _, e := range t.SchemaErrors {
			errs = append(errs, ast.StringTerm(e))
		}
		tool.Insert(ast.InternedTerm("schema_errors"), ast.ArrayTerm(errs...))
	}
	if t.Refusal != "" {
		tool.Insert(ast.InternedTerm("refusal"), ast.StringTerm(t.Refusal))
	}
	return tool
}

func argumentsValue(args any) (ast.Value, error) {
	if raw, ok := args.(json.RawMessage); ok {
		return ast.ValueFromReader(bytes.NewReader(raw))
	}
	return ast.InterfaceToValue(args)
}

// Outcomes of a decision.
const (
	OutcomeAllow    = "allow"
	OutcomeStub     = "stub"
	OutcomeApproval = "approval_required"
	OutcomeDeny     = "deny"
	OutcomeError    = "error" // evaluation failed; the call is denied
)

// Outcomes lists every outcome a recorded decision can have: the policy's four, and
// OutcomeError.
var Outcomes = []string{OutcomeAllow, OutcomeDeny, OutcomeStub, OutcomeApproval, OutcomeError}

// Decision is the policy's answer, data.lush.authz.decision, plus what the engine adds.
type Decision struct {
	Allow            bool     `json:"allow"`
	Outcome          string   `json:"outcome"`
	Stub             bool     `json:"stub"`
	ApprovalRequired bool     `json:"approval_required"`
	Access           string   `json:"access"`
	Risk             string   `json:"risk"`
	Reasons          []Reason `json:"reasons"`
	Approvals        []Reason `json:"approvals"`
	Rules            []string `json:"rules"`

	Revision string `json:"revision"`        // the bundle revision (manifest hash) that decided
	Error    string `json:"error,omitempty"` // why evaluation failed, when Outcome is "error"
}

// Reason is one denial or approval requirement and the rule that raised it.
type Reason struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// Executes reports whether the call may go to its upstream: allowed, not stubbed, and not
// waiting for an approval.
func (d Decision) Executes() bool {
	return d.Allow && !d.Stub && !d.ApprovalRequired && d.Outcome == OutcomeAllow
}

func errorDecision(revision string, err error) Decision {
	return Decision{
		Outcome:   OutcomeError,
		Access:    "write",
		Risk:      "write",
		Reasons:   []Reason{{Rule: "lush.error", Message: "the policy could not be evaluated; the call is denied"}},
		Approvals: []Reason{},
		Rules:     []string{"lush.error"},
		Revision:  revision,
		Error:     err.Error(),
	}
}

// decode reads the decision object from an evaluation result, refusing anything malformed.
func decode(v any) (Decision, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Decision{}, fmt.Errorf("%s is not an object", Query)
	}
	var d Decision
	var err error
	field := func(name string) any {
		x, ok := m[name]
		if !ok && err == nil {
			err = fmt.Errorf("%s has no %q", Query, name)
		}
		return x
	}
	d.Allow, _ = field("allow").(bool)
	d.Outcome, _ = field("outcome").(string)
	d.Stub, _ = field("stub").(bool)
	d.ApprovalRequired, _ = field("approval_required").(bool)
	d.Access, _ = field("access").(string)
	d.Risk, _ = field("risk").(string)
	d.Reasons = reasons(field("reasons"))
	d.Approvals = reasons(field("approvals"))
	for _, r := range asSlice(field("rules")) {
		if s, ok := r.(string); ok {
			d.Rules = append(d.Rules, s)
		}
	}
	if err != nil {
		return Decision{}, err
	}
	// The decision must be internally consistent; anything else is a policy bug, and denies.
	switch {
	case d.Allow && d.Outcome == OutcomeDeny, !d.Allow && d.Outcome != OutcomeDeny:
		return Decision{}, fmt.Errorf("%s is inconsistent: allow=%v outcome=%q", Query, d.Allow, d.Outcome)
	case !slices.Contains([]string{OutcomeAllow, OutcomeStub, OutcomeApproval, OutcomeDeny}, d.Outcome):
		return Decision{}, fmt.Errorf("%s has unknown outcome %q", Query, d.Outcome)
	}
	if d.Rules == nil {
		d.Rules = []string{}
	}
	return d, nil
}

func reasons(v any) []Reason {
	out := []Reason{}
	for _, x := range asSlice(v) {
		m, _ := x.(map[string]any)
		r := Reason{}
		r.Rule, _ = m["rule"].(string)
		r.Message, _ = m["message"].(string)
		out = append(out, r)
	}
	return out
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
