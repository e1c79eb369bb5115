// Package approval binds a person's approval to the one call it was given for, at every
// enforcement point: a call's digest (tool, arguments, principal, agent), asking for an approval
// (or joining the one the same call already waits on), and using up an approved one so that the
// call is decided again as approved (input.approval). The approvals themselves are kept in the
// decision log's store (decisionlog.Approvals) and decided through the approvals API.
package approval

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// Config says how long calls wait for approvals and approvals stay open (gateway config
// approvals:, docs/approvals.md).
type Config struct {
	// Wait is how long a call at the MCP gateway waits for a decision before the model is told
	// it is still pending (default 5m). The ext_authz sidecar does not wait: Envoy's check
	// timeout is far shorter.
	Wait time.Duration `yaml:"wait"`
	// ExpireAfter is how long an approval can be decided, and an approved one used by a repeat
	// of the same call, from when it was asked for (default 1h, and never less than Wait).
	ExpireAfter time.Duration `yaml:"expire_after"`
	// Poll is how often a waiting call reads its approval (default 500ms): approvals are decided
	// through the store, so a decision made on any replica reaches it.
	Poll time.Duration `yaml:"poll"`
	// Notify, when its URL is set, tells people that a call waits for them (a chat webhook).
	Notify NotifyConfig `yaml:"notify"`
}

// Defaults.
const (
	DefaultWait   = 5 * time.Minute
	DefaultExpiry = time.Hour
	DefaultPoll   = 500 * time.Millisecond
)

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Wait == 0 {
		c.Wait = DefaultWait
	}
	if c.ExpireAfter == 0 {
		c.ExpireAfter = max(DefaultExpiry, c.Wait)
	}
	if c.Poll == 0 {
		c.Poll = DefaultPoll
	}
	return c
}

// Validate names the field at fault.
func (c Config) Validate() error {
	switch {
	case c.Wait < 0 || c.ExpireAfter < 0 || c.Poll < 0:
		return errors.New("approvals: wait, expire_after and poll must not be negative")
	case c.ExpireAfter != 0 && c.ExpireAfter < c.Wait:
		return fmt.Errorf("approvals: expire_after (%s) must be at least wait (%s): an approval cannot expire while its call waits", c.ExpireAfter, c.Wait)
	}
	return c.Notify.validate()
}

// Call is what an approval is bound to.
type Call struct {
	Tool      string          // the tool reference
	ToolName  string          // the MCP tool name
	Arguments json.RawMessage // as the client sent them
	Principal string
	Agent     string
}

// Digest identifies the call: SHA-256 over the tool (reference and MCP name), the arguments
// (canonical JSON: object keys sorted, no insignificant space, numbers as written), the principal
// and the agent, each length-prefixed. An approval is good for the call with the same digest only.
func (c Call) Digest() string {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte("lush-approval-v1"))
	field([]byte(c.Tool))
	field([]byte(c.ToolName))
	field(canonical(c.Arguments))
	field([]byte(c.Principal))
	field([]byte(c.Agent))
	return hex.EncodeToString(h.Sum(nil))
}

// canonical re-encodes JSON with sorted keys; absent or null arguments are {}.
func canonical(raw json.RawMessage) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || v == nil {
		return []byte("{}")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return b
}

// Resume uses up an approved, unused approval of the call for the decision v (which asked for
// approval), if there is one: the call's first attempt gave up waiting, or ran at another replica
// or before a restart, and this repeat runs under it, once.
func Resume(ctx context.Context, store *decisionlog.Approvals, c Call, v *enforce.Verdict) (decisionlog.Approval, bool, error) {
	return store.ConsumeApproved(ctx, c.Digest(), v.ID)
}

// Request returns the pending approval the same call already waits on (joined), or records a new
// one keyed by v's decision id, with the policy's reasons, expiring cfg.ExpireAfter from now.
func Request(ctx context.Context, store *decisionlog.Approvals, cfg Config, c Call, v *enforce.Verdict) (ap decisionlog.Approval, joined bool, err error) {
	digest := c.Digest()
	if ap, joined, err = store.Pending(ctx, digest); err != nil || joined {
		return ap, joined, err
	}
	reasons, _ := json.Marshal(v.Approvals)
	now := time.Now().UTC()
	ap = decisionlog.Approval{ID: v.ID, Created: now, Expires: now.Add(cfg.WithDefaults().ExpireAfter), Digest: digest,
		Principal: c.Principal, Agent: c.Agent, Tool: c.Tool, ToolName: c.ToolName, Reasons: reasons}
	return ap, false, store.Create(ctx, ap)
}

// ToolLabel names an approval's call for people: the tool reference, and the MCP tool's name
// when the reference does not already end with it.
func ToolLabel(ap decisionlog.Approval) string {
	if ap.ToolName != "" && !strings.HasSuffix(ap.Tool, "/"+ap.ToolName) {
		return ap.Tool + " " + ap.ToolName
	}
	return ap.Tool
}

// Grant returns the input of a call a person approved: deciding it again, the policy drops the
// approvals it asks for (lush.approval.granted) and still applies every denial and stub.
func Grant(in authz.Input, ap decisionlog.Approval) authz.Input {
	in.Approval = &authz.Approval{ID: ap.ID, Status: decisionlog.ApprovalApproved, ApprovedBy: ap.DecidedBy}
	return in
}
