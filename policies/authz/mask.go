package authz

// MaskOp is one change the policy asks for before a decision's input is logged, in the form of
// OPA's system.log.mask: remove the value at Path, or replace it with Value. Path is a JSON
// pointer rooted at the log event, so it starts with "/input/", e.g. "/input/arguments/password".
type MaskOp struct {
	Op    string `json:"op"` // "remove" or "upsert"
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}
