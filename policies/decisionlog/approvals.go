package decisionlog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Approval states. A call that needs a person's approval is pending until a holder of the
// approve role approves or denies it, or until it expires; an approved approval is consumed by
// the one call it was given for.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalExpired  = "expired"
	ApprovalConsumed = "consumed"
)

// ApprovalStates lists every state, in lifecycle order.
var ApprovalStates = []string{ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalExpired, ApprovalConsumed}

// Approval is a call that waited (or waits) for a person's approval. Its id is that of the
// approval_required decision, whose event in the log holds the call's (masked) input; what was
// decided about it is in the log too (approval/decide decisions and the completion of the
// approval_required decision). This row is the state the gateway and the approvals API share.
type Approval struct {
	ID        string          `json:"id"`
	Status    string          `json:"status"` // one of ApprovalStates
	Created   time.Time       `json:"created"`
	Expires   time.Time       `json:"expires"` // pending until then; an approved one can be used until then
	Digest    string          `json:"digest"`  // the exact call: tool, name, arguments, principal, agent
	Principal string          `json:"principal"`
	Agent     string          `json:"agent"`
	Tool      string          `json:"tool"`
	ToolName  string          `json:"tool_name,omitempty"`
	Reasons   json.RawMessage `json:"reasons"` // why the policy asks for approval: [{"rule", "message"}]
	DecidedBy string          `json:"decided_by,omitempty"`
	DecidedAt *time.Time      `json:"decided_at,omitempty"`
	Note      string          `json:"reason,omitempty"`      // the approver's reason
	Decision  string          `json:"decision_id,omitempty"` // the approval/decide decision
	UsedBy    string          `json:"used_by,omitempty"`     // the decision that ran the call under it
}

// Approvals is the approvals table beside the decision log, in the same SQLite file or
// PostgreSQL database: mutable state, read and written by the gateways waiting for approvals
// and by the approvals API, so that a decision made on one replica reaches a call waiting on
// another, and survives restarts. It is safe for concurrent use.
type Approvals struct {
	db    *sql.DB
	d     *dialect
	where string
	now   func() time.Time
}

// ErrNoApproval is returned for an approval id that is not in the store.
var ErrNoApproval = errors.New("no such approval")

// NotPendingError is returned when an approval cannot be decided because it is no longer
// pending: it carries the approval as it is.
type NotPendingError struct{ Approval Approval }

func (e *NotPendingError) Error() string {
	a := e.Approval
	switch a.Status {
	case ApprovalExpired:
		return fmt.Sprintf("approval %s expired at %s without a decision", a.ID, a.Expires.UTC().Format(time.RFC3339))
	case ApprovalApproved, ApprovalDenied, ApprovalConsumed:
		return fmt.Sprintf("approval %s was already %s by %s", a.ID, pastTense(a.Status), a.DecidedBy)
	}
	return fmt.Sprintf("approval %s is %s", a.ID, a.Status)
}

func pastTense(status string) string {
	if status == ApprovalConsumed {
		return "approved (and used)"
	}
	return status
}

// OpenApprovals opens the approvals of the decision log at location (a SQLite file or a
// postgres:// URL). The log's schema must exist: Open creates it.
func OpenApprovals(location string) (*Approvals, error) {
	if IsPostgres(location) {
		db, where, err := openPostgresDB(location, 4)
		if err != nil {
			return nil, err
		}
		return checkApprovals(&Approvals{db: db, d: postgresDialect, where: where, now: time.Now})
	}
	params := url.Values{}
	params.Add("_pragma", "busy_timeout(5000)")
	db, err := openDB(location, params)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(4)
	return checkApprovals(&Approvals{db: db, d: sqliteDialect, where: location, now: time.Now})
}

// checkApprovals makes sure the table is there (the log's schema is version 4 or newer).
func checkApprovals(a *Approvals) (*Approvals, error) {
	if _, err := a.db.Exec("SELECT 1 FROM approvals WHERE id = ''"); err != nil {
		a.db.Close()
		return nil, fmt.Errorf("open approvals of decision log %s: the log has no approvals table (open it with this version of Lush once to upgrade it): %w", a.where, err)
	}
	return a, nil
}

// Close closes the store.
func (a *Approvals) Close() error { return a.db.Close() }

const approvalSelect = `SELECT id, status, created, expires, digest, principal, agent, tool, tool_name, reasons,
	decided_by, decided_at, note, decision, used_by FROM approvals`

// Create records a pending approval. Created and Expires must be set; Status is set to pending.
func (a *Approvals) Create(ctx context.Context, ap Approval) error {
	if ap.ID == "" || ap.Digest == "" || ap.Created.IsZero() || !ap.Expires.After(ap.Created) {
		return errors.New("record approval: id, digest and an expiry after its creation are required")
	}
	reasons := string(ap.Reasons)
	if reasons == "" {
		reasons = "[]"
	}
	_, err := a.db.ExecContext(ctx, a.d.q(`INSERT INTO approvals (id, status, created, expires, digest, principal, agent, tool,
	tool_name, reasons, decided_by, decided_at, note, decision, used_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', 0, '', '', '')`),
		ap.ID, ApprovalPending, ap.Created.UnixNano(), ap.Expires.UnixNano(), ap.Digest, ap.Principal, ap.Agent, ap.Tool, ap.ToolName, reasons)
	if err != nil {
		return fmt.Errorf("record approval %s: %w", ap.ID, err)
	}
	return nil
}

// Get returns the approval with id, or ErrNoApproval. A pending approval past its expiry, or an
// approved one not used before it, is returned as expired.
func (a *Approvals) Get(ctx context.Context, id string) (Approval, error) {
	rows, err := a.db.QueryContext(ctx, a.d.q(approvalSelect+" WHERE id = ?"), id)
	if err != nil {
		return Approval{}, fmt.Errorf("read approval %s: %w", id, err)
	}
	list, err := a.scan(rows)
	if err != nil {
		return Approval{}, fmt.Errorf("read approval %s: %w", id, err)
	}
	if len(list) == 0 {
		return Approval{}, fmt.Errorf("approval %s: %w", id, ErrNoApproval)
	}
	return list[0], nil
}

// ApprovalFilter selects approvals for List.
type ApprovalFilter struct {
	Status string // one of ApprovalStates; "" for all
	Limit  int    // at most this many (default 100, at most 1,000), newest first
}

// List returns the approvals f selects, newest first. Pending and approved mean not expired;
// expired includes those pending, or approved and unused, past their expiry.
func (a *Approvals) List(ctx context.Context, f ApprovalFilter) ([]Approval, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	now := a.now().UnixNano()
	q, args := approvalSelect, []any{}
	switch f.Status {
	case "":
	case ApprovalPending:
		q, args = q+" WHERE status = ? AND expires > ?", append(args, ApprovalPending, now)
	case ApprovalApproved:
		q, args = q+" WHERE status = ? AND expires > ?", append(args, ApprovalApproved, now)
	case ApprovalExpired:
		q, args = q+" WHERE status = ? OR (status IN (?, ?) AND expires <= ?)", append(args, ApprovalExpired, ApprovalPending, ApprovalApproved, now)
	case ApprovalDenied, ApprovalConsumed:
		q, args = q+" WHERE status = ?", append(args, f.Status)
	default:
		return nil, fmt.Errorf("list approvals: status %q is not one of %s", f.Status, strings.Join(ApprovalStates, ", "))
	}
	q += " ORDER BY created DESC, id DESC LIMIT ?"
	rows, err := a.db.QueryContext(ctx, a.d.q(q), append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	list, err := a.scan(rows)
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	return list, nil
}

// Pending returns the oldest pending, unexpired approval of the call with digest, if any: a call
// repeated while its first attempt waits joins that approval.
func (a *Approvals) Pending(ctx context.Context, digest string) (Approval, bool, error) {
	return a.first(ctx, digest, ApprovalPending)
}

func (a *Approvals) first(ctx context.Context, digest, status string) (Approval, bool, error) {
	rows, err := a.db.QueryContext(ctx, a.d.q(approvalSelect+" WHERE digest = ? AND status = ? AND expires > ? ORDER BY created, id LIMIT 1"),
		digest, status, a.now().UnixNano())
	if err != nil {
		return Approval{}, false, fmt.Errorf("find %s approval: %w", status, err)
	}
	list, err := a.scan(rows)
	if err != nil || len(list) == 0 {
		return Approval{}, false, err
	}
	return list[0], true, nil
}

// Decide approves (approve true) or denies the pending approval id on behalf of by, with the
// approver's note and the id of the approval/decide decision. It fails with a *NotPendingError
// when the approval was already decided or has expired, and ErrNoApproval when there is none.
func (a *Approvals) Decide(ctx context.Context, id string, approve bool, by, note, decisionID string) (Approval, error) {
	status := ApprovalDenied
	if approve {
		status = ApprovalApproved
	}
	now := a.now()
	res, err := a.db.ExecContext(ctx, a.d.q(`UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, note = ?, decision = ?
	WHERE id = ? AND status = ? AND expires > ?`), status, by, now.UnixNano(), note, decisionID, id, ApprovalPending, now.UnixNano())
	if err != nil {
		return Approval{}, fmt.Errorf("decide approval %s: %w", id, err)
	}
	ap, err := a.Get(ctx, id)
	if err != nil {
		return Approval{}, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return ap, &NotPendingError{Approval: ap}
	}
	return ap, nil
}

// Expire marks the approval id expired if it is still pending (or approved and unused) past its
// expiry, and returns it.
func (a *Approvals) Expire(ctx context.Context, id string) (Approval, error) {
	if _, err := a.db.ExecContext(ctx, a.d.q("UPDATE approvals SET status = ? WHERE id = ? AND status IN (?, ?) AND expires <= ?"),
		ApprovalExpired, id, ApprovalPending, ApprovalApproved, a.now().UnixNano()); err != nil {
		return Approval{}, fmt.Errorf("expire approval %s: %w", id, err)
	}
	return a.Get(ctx, id)
}

// Consume uses up the approved, unexpired approval id for the call decided as usedBy: it
// reports false when the approval is not (or no longer) approved, so that one approval lets
// exactly one call run.
func (a *Approvals) Consume(ctx context.Context, id, usedBy string) (bool, error) {
	res, err := a.db.ExecContext(ctx, a.d.q("UPDATE approvals SET status = ?, used_by = ? WHERE id = ? AND status = ? AND expires > ?"),
		ApprovalConsumed, usedBy, id, ApprovalApproved, a.now().UnixNano())
	if err != nil {
		return false, fmt.Errorf("use approval %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ConsumeApproved uses up the oldest approved, unexpired approval of the call with digest, if
// there is one: a call repeated after its approval (its first attempt gave up waiting, or the
// gateway restarted) runs under it, once.
func (a *Approvals) ConsumeApproved(ctx context.Context, digest, usedBy string) (Approval, bool, error) {
	for range 3 { // another replica may take the one found first
		ap, ok, err := a.first(ctx, digest, ApprovalApproved)
		if err != nil || !ok {
			return Approval{}, false, err
		}
		used, err := a.Consume(ctx, ap.ID, usedBy)
		if err != nil {
			return Approval{}, false, err
		}
		if used {
			ap.Status, ap.UsedBy = ApprovalConsumed, usedBy
			return ap, true, nil
		}
	}
	return Approval{}, false, nil
}

func (a *Approvals) scan(rows *sql.Rows) ([]Approval, error) {
	defer rows.Close()
	now := a.now()
	var out []Approval
	for rows.Next() {
		var ap Approval
		var created, expires, decidedAt int64
		var reasons string
		if err := rows.Scan(&ap.ID, &ap.Status, &created, &expires, &ap.Digest, &ap.Principal, &ap.Agent, &ap.Tool, &ap.ToolName,
			&reasons, &ap.DecidedBy, &decidedAt, &ap.Note, &ap.Decision, &ap.UsedBy); err != nil {
			return nil, err
		}
		ap.Created, ap.Expires = time.Unix(0, created).UTC(), time.Unix(0, expires).UTC()
		if decidedAt != 0 {
			t := time.Unix(0, decidedAt).UTC()
			ap.DecidedAt = &t
		}
		ap.Reasons = json.RawMessage(reasons)
		if (ap.Status == ApprovalPending || ap.Status == ApprovalApproved) && !now.Before(ap.Expires) {
			ap.Status = ApprovalExpired // undecided, or approved and never used, in time
		}
		out = append(out, ap)
	}
	return out, rows.Err()
}
