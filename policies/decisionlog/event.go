package decisionlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lush-agents/lush/policies/authz"
)

// DefaultPath is the OPA path of Lush's decision, used when an event's Path is empty.
const DefaultPath = "lush/authz/decision"

// Completion statuses.
const (
	StatusOK          = "ok"
	StatusError       = "error"
	StatusTimeout     = "timeout"
	StatusCancelled   = "cancelled"
	StatusStubbed     = "stubbed"
	StatusUnavailable = "unavailable" // the upstream was down or its connection failed
	StatusMaxTurns    = "max_turns"   // an agent invocation stopped at its turn limit

	// How the wait of an approval_required decision ended: a person approved the call (which
	// then ran under a decision of its own), denied it, nobody decided before the approval
	// expired, or the wait ended with the approval still pending.
	StatusApproved        = "approved"
	StatusApprovalDenied  = "approval_denied"
	StatusApprovalExpired = "approval_expired"
	StatusApprovalPending = "approval_pending"
)

// Statuses lists every valid Completion.Status.
var Statuses = []string{StatusOK, StatusError, StatusTimeout, StatusCancelled, StatusStubbed, StatusUnavailable, StatusMaxTurns,
	StatusApproved, StatusApprovalDenied, StatusApprovalExpired, StatusApprovalPending}

// Event is one policy decision, close to OPA's decision-log event
// (openpolicyagent.org/docs/management-decision-logs) plus Lush's own fields, which are also
// stored as columns for queries. Its JSON form is what the log stores and what
// `lushctl audit query -o json` prints.
type Event struct {
	// OPA decision-log fields.
	DecisionID string            `json:"decision_id"` // set by the caller, unique in the log (a UUID)
	Path       string            `json:"path"`        // DefaultPath when empty
	Input      json.RawMessage   `json:"input"`       // the policy input document, masked (ApplyMask)
	Result     json.RawMessage   `json:"result"`      // the decision object
	Timestamp  time.Time         `json:"timestamp"`   // the log's clock when zero; stored in UTC
	Labels     map[string]string `json:"labels"`      // id (instance), version, environment
	Bundles    map[string]Bundle `json:"bundles"`     // {"lush": {"revision": "<hash>"}}
	Metrics    map[string]int64  `json:"metrics"`     // e.g. "timer_lush_decision_ns"
	Erased     []string          `json:"erased,omitempty"`
	Masked     []string          `json:"masked,omitempty"`

	// Lush fields.
	Revision    string   `json:"revision"`
	Point       string   `json:"enforcement_point"` // "mcp-gateway", "ext_authz", "agentd"
	Principal   string   `json:"principal"`
	Groups      []string `json:"groups"`
	Agent       string   `json:"agent,omitempty"`
	Chain       []string `json:"chain,omitempty"`
	Action      string   `json:"action"`
	Tool        string   `json:"tool,omitempty"` // tool reference
	ToolName    string   `json:"tool_name,omitempty"`
	Access      string   `json:"access,omitempty"`
	Risk        string   `json:"risk,omitempty"`
	Outcome     string   `json:"outcome"` // one of authz.Outcomes
	Rules       []string `json:"rules"`
	LatencyNS   int64    `json:"latency_ns"` // the decision's latency
	Environment string   `json:"environment,omitempty"`
	TraceID     string   `json:"trace_id,omitempty"`
	SpanID      string   `json:"span_id,omitempty"`
	Error       string   `json:"error,omitempty"`
	// Parent is the decision this one belongs to: for a request an MCP server sent to the client
	// during a call (sampling/createMessage, elicitation/create, roots/list), the call's decision.
	// Empty for decisions that stand alone.
	Parent string `json:"parent_id,omitempty"`
	// Credential is how the upstream credential the call carries was obtained, never the
	// credential itself; nil for a call that carries none.
	Credential *CredentialUse `json:"credential,omitempty"`

	// Charges are applied to budget usage in the transaction that commits the event (budgets.go).
	// Not part of the event document: the document records the decision, and what the decision
	// charged follows from it.
	Charges []Charge `json:"-"`
}

// CredentialUse records how an upstream credential was obtained: its type, its provenance
// (exchange, stored_grant, client_credentials or static), where from, and the acting chain an
// exchanged token carries (outermost actor first). It never holds a secret.
type CredentialUse struct {
	Type     string   `json:"type"`
	Obtained string   `json:"obtained"`
	Source   string   `json:"source,omitempty"`
	Act      []string `json:"act,omitempty"`
}

// Bundle identifies the bundle that decided.
type Bundle struct {
	Revision string `json:"revision"`
}

// Completion is what happened after an allowed decision, appended later under the same
// decision_id (at most one per decision).
type Completion struct {
	DecisionID string          `json:"decision_id"`
	Timestamp  time.Time       `json:"timestamp"` // the log's clock when zero; stored in UTC with ns precision
	Status     string          `json:"status"`    // one of Statuses
	LatencyNS  int64           `json:"upstream_latency_ns"`
	Response   json.RawMessage `json:"response,omitempty"` // writes carry the upstream response
	Error      string          `json:"error,omitempty"`
	// Tokens the model used, for agent invocations (agentd's agent/invoke decisions).
	TokensInput  int64 `json:"tokens_input,omitempty"`
	TokensOutput int64 `json:"tokens_output,omitempty"`
	// Charges are applied to budget usage in the transaction that commits the completion (an
	// invocation's tokens). Not part of the stored completion.
	Charges []Charge `json:"-"`
}

// eventColumns returns the stored columns of e, whose JSON document is data, in insertEvent's
// order: all but the document itself are derived from it (Verify checks that they still are).
func eventColumns(e *Event, data string) []any {
	// Room for the three columns the writer adds (part, pos, hash).
	return append(make([]any, 0, 15+3), e.DecisionID, e.Timestamp.UnixNano(), e.Revision, e.Point,
		e.Principal, e.Agent, e.Action, e.Tool, e.ToolName, e.Access, e.Risk, e.Outcome, e.LatencyNS, e.TraceID, data)
}

// eventColumnNames names eventColumns' values.
var eventColumnNames = []string{"decision_id", "ts", "revision", "point", "principal", "agent", "action",
	"tool", "tool_name", "access", "risk", "outcome", "latency_ns", "trace_id", "event"}

// maxIDLen bounds decision ids (a UUID is 36 bytes).
const maxIDLen = 256

func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("decision_id is empty")
	case len(id) > maxIDLen:
		return fmt.Errorf("decision_id is longer than %d bytes", maxIDLen)
	}
	return nil
}

// checkTime rejects times whose Unix nanoseconds do not fit an int64 (before 1678 or after 2262).
func checkTime(field string, t time.Time) error {
	if !time.Unix(0, t.UnixNano()).Equal(t) {
		return fmt.Errorf("%s %s is out of range (1678..2262)", field, t.Format(time.RFC3339))
	}
	return nil
}

// checkJSON reports a field that is not valid JSON without quoting any of it: the input may
// hold secrets.
func checkJSON(field string, raw json.RawMessage) error {
	if len(raw) > 0 && !json.Valid(raw) {
		return fmt.Errorf("%s is not valid JSON", field)
	}
	return nil
}

func oneOf(field, v string, valid []string) error {
	for _, ok := range valid {
		if v == ok {
			return nil
		}
	}
	return fmt.Errorf("%s must be one of %v, not %q", field, valid, v)
}

func (e *Event) validate() error {
	if err := e.validateColumns(); err != nil {
		return err
	}
	return e.validateDocuments()
}

// validateColumns checks what validate checks but the raw documents.
func (e *Event) validateColumns() error {
	if err := checkID(e.DecisionID); err != nil {
		return err
	}
	if err := oneOf("outcome", e.Outcome, authz.Outcomes); err != nil {
		return err
	}
	return checkTime("timestamp", e.Timestamp)
}

// validateDocuments checks the raw documents (Input, Result): encodeEventFast succeeds only for
// valid ones, so that Record checks them only when it falls back to encodeJSON.
func (e *Event) validateDocuments() error {
	if err := checkJSON("input", e.Input); err != nil {
		return err
	}
	return checkJSON("result", e.Result)
}

func (c *Completion) validate() error {
	if err := checkID(c.DecisionID); err != nil {
		return err
	}
	if err := oneOf("status", c.Status, Statuses); err != nil {
		return err
	}
	if err := checkTime("timestamp", c.Timestamp); err != nil {
		return err
	}
	return checkJSON("response", c.Response)
}

// encodeJSON encodes v compactly without HTML escaping, so the stored text greps as written.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
