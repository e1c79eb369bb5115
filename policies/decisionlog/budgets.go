package decisionlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Budget usage: the budget_usage table beside the log holds, per budget, subject (an agent or a
// principal) and period, the units used and the units top-ups granted. Changes to it are made
// only as Charges of an event or a completion, in the same transaction as that entry: a call
// is charged exactly when its allowing decision is committed, and a top-up exactly when its
// decision is. The table is not chained; the entries that charged it are.

// Charge adds units to a budget's usage in one period: Used (a call's tool calls, credits or
// tokens) and Granted (a top-up).
type Charge struct {
	Budget  string    // the budget's name (lush.yaml budgets)
	Subject string    // whose usage: the agent of an agent budget, the caller of a principal budget
	Period  time.Time // the period's start (UTC)
	Used    int64
	Granted int64
}

// maxChargeField bounds a charge's budget and subject.
const maxChargeField = 512

func (c Charge) validate() error {
	switch {
	case c.Budget == "" || len(c.Budget) > maxChargeField:
		return fmt.Errorf("charge: budget must be 1 to %d bytes", maxChargeField)
	case c.Subject == "" || len(c.Subject) > maxChargeField:
		return fmt.Errorf("charge of budget %s: subject must be 1 to %d bytes", c.Budget, maxChargeField)
	case c.Period.IsZero():
		return fmt.Errorf("charge of budget %s: period is not set", c.Budget)
	case c.Used < 0 || c.Granted < 0:
		return fmt.Errorf("charge of budget %s: used and granted must not be negative", c.Budget)
	}
	return nil
}

func validateCharges(cs []Charge) error {
	for _, c := range cs {
		if err := c.validate(); err != nil {
			return err
		}
	}
	return nil
}

// BudgetUsage is one row of budget usage.
type BudgetUsage struct {
	Budget  string    `json:"budget"`
	Subject string    `json:"subject"`
	Period  time.Time `json:"period"` // the period's start (UTC)
	Used    int64     `json:"used"`
	Granted int64     `json:"granted"`
	Updated time.Time `json:"updated"`
}

// BudgetFilter selects budget usage rows; empty fields match everything.
type BudgetFilter struct {
	Budget  string
	Subject string
	Period  time.Time // exactly this period
	Since   time.Time // periods starting at or after it
}

// BudgetUsage returns the usage rows f selects, by budget, subject and period.
func (r *Reader) BudgetUsage(ctx context.Context, f BudgetFilter) ([]BudgetUsage, error) {
	var where []string
	var args []any
	if f.Budget != "" {
		where, args = append(where, "budget = ?"), append(args, f.Budget)
	}
	if f.Subject != "" {
		where, args = append(where, "subject = ?"), append(args, f.Subject)
	}
	if !f.Period.IsZero() {
		where, args = append(where, "period = ?"), append(args, f.Period.Unix())
	}
	if !f.Since.IsZero() {
		where, args = append(where, "period >= ?"), append(args, f.Since.Unix())
	}
	q := "SELECT budget, subject, period, used, granted, updated FROM budget_usage"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY budget, subject, period"
	rows, err := r.db.QueryContext(ctx, r.d.q(q), args...)
	if err != nil {
		return nil, fmt.Errorf("read budget usage from %s: %w", r.path, err)
	}
	defer rows.Close()
	var out []BudgetUsage
	for rows.Next() {
		var u BudgetUsage
		var period, updated int64
		if err := rows.Scan(&u.Budget, &u.Subject, &period, &u.Used, &u.Granted, &updated); err != nil {
			return nil, fmt.Errorf("read budget usage from %s: %w", r.path, err)
		}
		u.Period, u.Updated = time.Unix(period, 0).UTC(), time.Unix(0, updated).UTC()
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read budget usage from %s: %w", r.path, err)
	}
	return out, nil
}

// BudgetUsage reads budget usage from the log's store (see Reader.BudgetUsage).
func (l *Log) BudgetUsage(ctx context.Context, f BudgetFilter) ([]BudgetUsage, error) {
	if l.reader == nil {
		return nil, errors.New("read budget usage: the log has no reader")
	}
	return l.reader.BudgetUsage(ctx, f)
}

// maxChargeRows bounds the rows of one upsert (6 parameters each).
const maxChargeRows = 1000

// charge applies charges to budget_usage within the writer's transaction. Charges of one key
// are summed first (PostgreSQL's upsert may not touch a row twice in one statement).
func (w *writer) charge(ctx context.Context, charges []Charge) error {
	if len(charges) == 0 {
		return nil
	}
	type key struct {
		budget, subject string
		period          int64
	}
	sums := map[key]*Charge{}
	var order []key
	for _, c := range charges {
		k := key{c.Budget, c.Subject, c.Period.Unix()}
		if s := sums[k]; s != nil {
			s.Used += c.Used
			s.Granted += c.Granted
			continue
		}
		cp := c
		sums[k] = &cp
		order = append(order, k)
	}
	now := w.cfg.clock().UnixNano()
	for len(order) > 0 {
		n := min(len(order), maxChargeRows)
		var b strings.Builder
		b.WriteString("INSERT INTO budget_usage (budget, subject, period, used, granted, updated) VALUES ")
		args := make([]any, 0, n*6)
		for i, k := range order[:n] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("(?,?,?,?,?,?)")
			s := sums[k]
			args = append(args, k.budget, k.subject, k.period, s.Used, s.Granted, now)
		}
		b.WriteString(` ON CONFLICT (budget, subject, period) DO UPDATE SET used = budget_usage.used + excluded.used,
	granted = budget_usage.granted + excluded.granted, updated = excluded.updated`)
		if _, err := w.conn.ExecContext(ctx, w.d.q(b.String()), args...); err != nil {
			return fmt.Errorf("charge budgets: %w", err)
		}
		order = order[n:]
	}
	return nil
}
