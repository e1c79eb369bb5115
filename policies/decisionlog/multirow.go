package decisionlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// maxRowsPerInsert keeps a multi-row INSERT under PostgreSQL's 65,535 parameters.
const maxRowsPerInsert = 1000

// appendRun writes a run of events, or of completions, in a few statements: one query finds the
// refusals (a decision_id already logged; a completion whose decision is missing or already
// completed), then the rest is inserted with multi-row INSERTs, each taking the next chain
// positions in order. It returns one error per request (nil, or why it was refused) and a
// non-nil error when the batch must fail.
func (w *writer) appendRun(ctx context.Context, h *head, run []*request) ([]error, error) {
	ids := make([]string, len(run))
	for i, r := range run {
		ids[i] = r.args[0].(string)
	}
	completions := run[0].kind == kindCompletion
	query := "SELECT decision_id, true, false FROM events WHERE decision_id = ANY(?)"
	if completions {
		query = `SELECT e.decision_id, true, c.decision_id IS NOT NULL FROM events e
	LEFT JOIN completions c ON c.decision_id = e.decision_id WHERE e.decision_id = ANY(?)`
	}
	rows, err := w.conn.QueryContext(ctx, w.d.q(query), ids)
	if err != nil {
		return nil, err
	}
	logged, completed := map[string]bool{}, map[string]bool{}
	for rows.Next() {
		var id string
		var isLogged, isCompleted bool
		if err := rows.Scan(&id, &isLogged, &isCompleted); err != nil {
			rows.Close()
			return nil, err
		}
		logged[id], completed[id] = isLogged, isCompleted
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}

	refused := make([]error, len(run))
	var args []any
	var charges []Charge // of the requests inserted
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		stmt := multiRowInsert(completions, n)
		res, err := w.conn.ExecContext(ctx, w.d.q(stmt), args...)
		if err != nil {
			return err
		}
		if got, err := res.RowsAffected(); err != nil || got != int64(n) {
			// Another writer logged one of these ids since the check: fail closed.
			return fmt.Errorf("inserted %d of %d rows: a decision_id was logged concurrently", got, n)
		}
		args, n = args[:0], 0
		return nil
	}
	for i, r := range run {
		id := ids[i]
		switch {
		case !completions && logged[id]:
			refused[i] = errors.New("decision_id is already in the log")
			continue
		case completions && !logged[id]:
			refused[i] = errors.New("decision_id is not in the log")
			continue
		case completions && completed[id]:
			refused[i] = errors.New("a completion for this decision_id is already in the log")
			continue
		}
		pos := h.pos + 1
		var hash []byte
		if completions {
			a := r.args
			hash = chainHash(h.hash, completionEntry(w.cfg.partition, pos, id, a[1].(int64), a[2].(string), a[3].(int64), a[4], a[5], a[6], a[7]))
			completed[id] = true
		} else {
			hash = chainHash(h.hash, eventEntry(w.cfg.partition, pos, id, r.args[1].(int64), r.args[len(r.args)-1].(string)))
			logged[id] = true
		}
		charges = append(charges, r.charges...)
		args = append(append(args, r.args...), w.cfg.partition, pos, hash)
		h.pos, h.hash = pos, hash
		if n++; n == maxRowsPerInsert {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := w.charge(ctx, charges); err != nil {
		return nil, err
	}
	return refused, nil
}

// multiRowInsert is an INSERT of n events or completions (their columns, then part, pos, hash).
func multiRowInsert(completions bool, n int) string {
	head, cols := `INSERT INTO events (decision_id, ts, revision, point, principal, agent, action, tool,
	tool_name, access, risk, outcome, latency_ns, trace_id, event, part, pos, hash) VALUES `, 18
	if completions {
		head, cols = `INSERT INTO completions (decision_id, ts, status, latency_ns, response, error, tokens_input, tokens_output,
	part, pos, hash) VALUES `, 11
	}
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", cols), ",") + ")"
	var b strings.Builder
	b.Grow(len(head) + n*(len(row)+1))
	b.WriteString(head)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	return b.String()
}
