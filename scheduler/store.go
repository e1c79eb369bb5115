package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver
)

// Status is where a firing stands. Pending and running are live; the others are final.
type Status string

// Firing statuses.
const (
	StatusPending   Status = "pending"   // recorded, waiting for a free slot
	StatusRunning   Status = "running"   // claimed by a scheduler that holds its lease
	StatusSucceeded Status = "succeeded" // the agent answered
	StatusFailed    Status = "failed"    // the agent (or the model, or the store) failed
	StatusTimedOut  Status = "timed_out" // the loop's timeout cancelled the run
	StatusDenied    Status = "denied"    // the policy refused the invocation: nothing ran
	StatusSkipped   Status = "skipped"   // never ran: missed beyond the catch-up window, or overlap
)

// Final reports whether a firing with this status will never run (again).
func (s Status) Final() bool { return s != StatusPending && s != StatusRunning }

// Triggers: why a firing exists.
const (
	TriggerSchedule = "schedule" // its schedule came due while a scheduler ran
	TriggerCatchUp  = "catch_up" // it came due while no scheduler ran and is replayed
	TriggerManual   = "manual"   // lushctl loop trigger / POST /loops/{name}/trigger
)

// Firing is one firing of a loop: the row of the history. Its key is (Loop, ScheduledAt).
type Firing struct {
	Loop        string    `json:"loop"`
	ScheduledAt time.Time `json:"scheduled_at"`
	Trigger     string    `json:"trigger"`
	Status      Status    `json:"status"`
	Instruction string    `json:"instruction,omitempty"` // set for manual firings that override the loop's
	TriggeredBy string    `json:"triggered_by,omitempty"`
	Attempts    int       `json:"attempts"`
	Owner       string    `json:"owner,omitempty"` // the scheduler instance running it
	StartedAt   time.Time `json:"started_at,omitzero"`
	FinishedAt  time.Time `json:"finished_at,omitzero"`
	DecisionID  string    `json:"decision_id,omitempty"` // the agent/invoke decision
	Revision    string    `json:"revision,omitempty"`    // the build that ran it
	Error       string    `json:"error,omitempty"`
	Response    string    `json:"response,omitempty"` // the agent's answer (truncated)

	leaseUntil time.Time
}

// Duration is how long the firing ran (zero until it finishes).
func (f Firing) Duration() time.Duration {
	if f.StartedAt.IsZero() || f.FinishedAt.IsZero() {
		return 0
	}
	return f.FinishedAt.Sub(f.StartedAt)
}

// maxResponse bounds the response kept in the history.
const maxResponse = 4096

// store keeps firings and per-loop cursors in SQLite or PostgreSQL. The primary key
// (loop_name, scheduled_at) makes every firing unique; planning and claiming run in one
// transaction under a database-wide lock (SQLite's write lock, a PostgreSQL advisory lock), so
// replicas never both plan or claim the same firing.
type store struct {
	db       *sql.DB
	postgres bool
	where    string               // for errors: the file or the database host, never the password
	stmts    map[string]*sql.Stmt // the hot queries, prepared once by openStore (q applied)

	finishes     chan finishReq // to finisher
	finisherDone chan struct{}
	closeOnce    sync.Once
}

// Hot queries, prepared once: parsing a statement costs as much as running it.
const (
	qCursors   = "SELECT loop_name, planned_through FROM lush_loop_cursors"
	qSetCursor = `INSERT INTO lush_loop_cursors (loop_name, planned_through) VALUES (?, ?)
		ON CONFLICT (loop_name) DO UPDATE SET planned_through = excluded.planned_through`
	qInsert = `INSERT INTO lush_loop_firings
		(loop_name, scheduled_at, trigger_kind, status, instruction, triggered_by, finished_at, error)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (loop_name, scheduled_at) DO NOTHING`
	qLive = "SELECT " + firingColumns + ` FROM lush_loop_firings
		WHERE status IN ('pending', 'running') AND (scheduled_at, loop_name) > (?, ?)
		ORDER BY scheduled_at, loop_name LIMIT ?`
	qRunning = "SELECT " + firingColumns + ` FROM lush_loop_firings WHERE status = 'running'
		ORDER BY scheduled_at, loop_name`
	// The pending firings of the loops that have a running firing (once per running firing).
	qPending = `SELECT p.loop_name, p.scheduled_at, p.trigger_kind, p.status, p.instruction, p.triggered_by,
		p.attempts, p.owner, p.lease_until, p.started_at, p.finished_at, p.decision_id, p.revision, p.error,
		p.response FROM lush_loop_firings AS r JOIN lush_loop_firings AS p ON p.loop_name = r.loop_name
		WHERE r.status = 'running' AND p.status = 'pending'`
	qClaim = `UPDATE lush_loop_firings SET status = 'running', owner = ?, lease_until = ?,
		attempts = ?, started_at = ? WHERE loop_name = ? AND scheduled_at = ?`
	qFinish = `UPDATE lush_loop_firings SET status = ?, finished_at = ?, decision_id = ?,
		revision = ?, error = ?, response = ?, owner = '', lease_until = 0
		WHERE loop_name = ? AND scheduled_at = ? AND owner = ? AND status = 'running'`
)

var hotQueries = []string{qCursors, qSetCursor, qInsert, qLive, qRunning, qPending, qClaim, qFinish}

func (s *store) prepare(ctx context.Context) error {
	s.stmts = map[string]*sql.Stmt{}
	for _, query := range hotQueries {
		st, err := s.db.PrepareContext(ctx, s.q(query))
		if err != nil {
			return fmt.Errorf("prepare %q: %w", query, err)
		}
		s.stmts[query] = st
	}
	return nil
}

// stmt is a hot query's prepared statement, in tx unless it is nil.
func (s *store) stmt(ctx context.Context, tx *sql.Tx, query string) *sql.Stmt {
	st := s.stmts[query]
	if tx != nil {
		return tx.StmtContext(ctx, st)
	}
	return st
}

// advisoryLock is the PostgreSQL advisory lock key that serializes planning and claiming.
const advisoryLock = 0x6c757368 // "lush"

// openStore opens (and creates) the store: a postgres:// or postgresql:// URL, or a SQLite file.
func openStore(ctx context.Context, dsn string) (*store, error) {
	s := &store{}
	var err error
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, perr := url.Parse(dsn)
		if perr != nil {
			return nil, errors.New("open scheduler store: the PostgreSQL URL does not parse (postgres://user:password@host:5432/db)")
		}
		s.postgres, s.where = true, "postgres://"+u.Host+u.Path
		if s.db, err = sql.Open("pgx", dsn); err != nil {
			return nil, fmt.Errorf("open scheduler store %s: %w", s.where, err)
		}
		s.db.SetMaxOpenConns(8)
	} else {
		path := strings.TrimPrefix(dsn, "sqlite:")
		s.where = path
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("open scheduler store %s: %w", path, err)
		}
		q := url.Values{}
		q.Add("_pragma", "busy_timeout(10000)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Set("_txlock", "immediate")
		if s.db, err = sql.Open("sqlite", "file:"+path+"?"+q.Encode()); err != nil {
			return nil, fmt.Errorf("open scheduler store %s: %w", path, err)
		}
		s.db.SetMaxOpenConns(1) // one writer; SQLite serializes writers anyway
	}
	if err := s.migrate(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("open scheduler store %s: %w", s.where, err)
	}
	if err := s.prepare(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("open scheduler store %s: %w", s.where, err)
	}
	s.finishes, s.finisherDone = make(chan finishReq), make(chan struct{})
	go s.finisher()
	return s, nil
}

func (s *store) close() error {
	s.closeOnce.Do(func() { close(s.finishes) })
	<-s.finisherDone
	return s.db.Close()
}

const schema = `
CREATE TABLE IF NOT EXISTS lush_loop_firings (
	loop_name    TEXT    NOT NULL,
	scheduled_at BIGINT  NOT NULL, -- unix microseconds
	trigger_kind TEXT    NOT NULL,
	status       TEXT    NOT NULL,
	instruction  TEXT    NOT NULL DEFAULT '',
	triggered_by TEXT    NOT NULL DEFAULT '',
	attempts     INTEGER NOT NULL DEFAULT 0,
	owner        TEXT    NOT NULL DEFAULT '',
	lease_until  BIGINT  NOT NULL DEFAULT 0,
	started_at   BIGINT  NOT NULL DEFAULT 0,
	finished_at  BIGINT  NOT NULL DEFAULT 0,
	decision_id  TEXT    NOT NULL DEFAULT '',
	revision     TEXT    NOT NULL DEFAULT '',
	error        TEXT    NOT NULL DEFAULT '',
	response     TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (loop_name, scheduled_at)
);
CREATE INDEX IF NOT EXISTS lush_loop_firings_queue ON lush_loop_firings (scheduled_at, loop_name)
	WHERE status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS lush_loop_firings_running ON lush_loop_firings (scheduled_at, loop_name)
	WHERE status = 'running';
DROP INDEX IF EXISTS lush_loop_firings_live;
CREATE TABLE IF NOT EXISTS lush_loop_cursors (
	loop_name       TEXT   NOT NULL PRIMARY KEY,
	planned_through BIGINT NOT NULL -- unix microseconds: every firing up to here is recorded
);`

func (s *store) migrate(ctx context.Context) error {
	if s.postgres {
		// Replicas starting together: one creates the tables, the others wait for it.
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", advisoryLock); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, schema); err != nil {
			return err
		}
		return tx.Commit()
	}
	for _, stmt := range strings.Split(schema, ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// q rewrites ? placeholders as $1, $2, ... for PostgreSQL.
func (s *store) q(query string) string {
	if !s.postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// begin starts a transaction holding the store-wide lock.
func (s *store) begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := s.db.BeginTx(ctx, nil) // SQLite: BEGIN IMMEDIATE (_txlock), the write lock
	if err != nil {
		return nil, err
	}
	if s.postgres {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", advisoryLock); err != nil {
			tx.Rollback()
			return nil, err
		}
	}
	return tx, nil
}

// cursors reads how far each loop has been planned.
func (s *store) cursors(ctx context.Context, tx *sql.Tx) (map[string]time.Time, error) {
	rows, err := s.stmt(ctx, tx, qCursors).QueryContext(ctx)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var name string
		var us int64
		if err := rows.Scan(&name, &us); err != nil {
			return nil, err
		}
		out[name] = fromMicros(us)
	}
	return out, rows.Err()
}

func (s *store) setCursor(ctx context.Context, tx *sql.Tx, loop string, through time.Time) error {
	_, err := s.stmt(ctx, tx, qSetCursor).ExecContext(ctx, loop, micros(through))
	return err
}

// insert records a firing unless one with its key exists; it reports whether it did.
func (s *store) insert(ctx context.Context, tx *sql.Tx, f Firing) (bool, error) {
	res, err := s.stmt(ctx, tx, qInsert).ExecContext(ctx,
		f.Loop, micros(f.ScheduledAt), f.Trigger, string(f.Status), f.Instruction, f.TriggeredBy, micros(f.FinishedAt), f.Error)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

const firingColumns = `loop_name, scheduled_at, trigger_kind, status, instruction, triggered_by, attempts, owner,
	lease_until, started_at, finished_at, decision_id, revision, error, response`

func scanFiring(sc interface{ Scan(...any) error }) (Firing, error) {
	var f Firing
	var at, lease, started, finished int64
	var status string
	err := sc.Scan(&f.Loop, &at, &f.Trigger, &status, &f.Instruction, &f.TriggeredBy, &f.Attempts, &f.Owner,
		&lease, &started, &finished, &f.DecisionID, &f.Revision, &f.Error, &f.Response)
	f.Status = Status(status)
	f.ScheduledAt, f.leaseUntil, f.StartedAt, f.FinishedAt = fromMicros(at), fromMicros(lease), fromMicros(started), fromMicros(finished)
	return f, err
}

// live reads at most limit pending and running firings after the firing after, oldest first,
// then by loop name.
func (s *store) live(ctx context.Context, tx *sql.Tx, after firingKey, limit int) ([]Firing, error) {
	return collect(s.stmt(ctx, tx, qLive).QueryContext(ctx, after.at, after.loop, limit))
}

// running reads the running firings.
func (s *store) running(ctx context.Context, tx *sql.Tx) ([]Firing, error) {
	return collect(s.stmt(ctx, tx, qRunning).QueryContext(ctx))
}

// pendingOfRunning reads the pending firings of the loops that have a running firing, once per
// running firing of their loop.
func (s *store) pendingOfRunning(ctx context.Context, tx *sql.Tx) ([]Firing, error) {
	return collect(s.stmt(ctx, tx, qPending).QueryContext(ctx))
}

// collect reads the firings of a query.
func collect(rows *sql.Rows, err error) ([]Firing, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Firing
	for rows.Next() {
		f, err := scanFiring(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// claim marks a firing as running for owner until lease.
func (s *store) claim(ctx context.Context, tx *sql.Tx, f *Firing, owner string, now, lease time.Time) error {
	f.Status, f.Owner, f.Attempts, f.StartedAt, f.leaseUntil = StatusRunning, owner, f.Attempts+1, now, lease
	_, err := s.stmt(ctx, tx, qClaim).ExecContext(ctx, owner, micros(lease), f.Attempts, micros(now), f.Loop, micros(f.ScheduledAt))
	return err
}

// close ends a live firing without running it (skipped, or failed after too many attempts).
func (s *store) closeLive(ctx context.Context, tx *sql.Tx, f *Firing, status Status, now time.Time, msg string) error {
	f.Status, f.FinishedAt, f.Error, f.Owner = status, now, msg, ""
	_, err := tx.ExecContext(ctx, s.q(`UPDATE lush_loop_firings SET status = ?, finished_at = ?, error = ?, owner = ''
		WHERE loop_name = ? AND scheduled_at = ?`), string(status), micros(now), msg, f.Loop, micros(f.ScheduledAt))
	return err
}

// renew extends the lease of a firing owner runs; false means the owner lost it.
func (s *store) renew(ctx context.Context, f Firing, owner string, until time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE lush_loop_firings SET lease_until = ?
		WHERE loop_name = ? AND scheduled_at = ? AND owner = ? AND status = 'running'`),
		micros(until), f.Loop, micros(f.ScheduledAt), owner)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// finish records how a run ended; false means owner no longer held the firing (its lease
// expired and another scheduler took it), and nothing was written. Runs that end together are
// recorded in one transaction (see finisher).
func (s *store) finish(ctx context.Context, f Firing, owner string) (bool, error) {
	if len(f.Response) > maxResponse {
		f.Response = f.Response[:maxResponse] + "…[truncated]"
	}
	req := finishReq{ctx: ctx, f: f, owner: owner, done: make(chan finishResult, 1)}
	s.finishes <- req
	r := <-req.done
	return r.ok, r.err
}

type finishReq struct {
	ctx   context.Context
	f     Firing
	owner string
	done  chan finishResult
}

type finishResult struct {
	ok  bool
	err error
}

// maxFinishBatch bounds the runs' ends recorded in one transaction.
const maxFinishBatch = 256

// finisher records the ends of runs, all those waiting in one transaction: one commit for many
// runs, and one turn at the connection (SQLite has one) instead of one per run.
func (s *store) finisher() {
	defer close(s.finisherDone)
	for req := range s.finishes {
		batch := []finishReq{req}
	more:
		for len(batch) < maxFinishBatch {
			select {
			case r, ok := <-s.finishes:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		if len(batch) == 1 {
			ok, err := s.finishOne(req.ctx, nil, req.f, req.owner)
			req.done <- finishResult{ok, err}
			continue
		}
		results, err := s.finishBatch(batch)
		for i, r := range batch {
			if err != nil { // record them one by one: one bad write fails only its run
				ok, err := s.finishOne(r.ctx, nil, r.f, r.owner)
				r.done <- finishResult{ok, err}
				continue
			}
			r.done <- results[i]
		}
	}
}

// finishBatch records the ends of several runs in one transaction.
func (s *store) finishBatch(batch []finishReq) ([]finishResult, error) {
	ctx := context.Background() // the runs' contexts are WithoutCancel already
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	out := make([]finishResult, len(batch))
	for i, r := range batch {
		ok, err := s.finishOne(ctx, tx, r.f, r.owner)
		if err != nil {
			return nil, err
		}
		out[i].ok = ok
	}
	return out, tx.Commit()
}

func (s *store) finishOne(ctx context.Context, tx *sql.Tx, f Firing, owner string) (bool, error) {
	res, err := s.stmt(ctx, tx, qFinish).ExecContext(ctx, string(f.Status), micros(f.FinishedAt), f.DecisionID, f.Revision, f.Error, f.Response,
		f.Loop, micros(f.ScheduledAt), owner)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// release gives a running firing back (pending) so that another scheduler, or this one after a
// restart, runs it; the attempt does not count.
func (s *store) release(ctx context.Context, f Firing, owner string) error {
	_, err := s.db.ExecContext(ctx, s.q(`UPDATE lush_loop_firings SET status = 'pending', owner = '', lease_until = 0,
		started_at = 0, attempts = attempts - 1 WHERE loop_name = ? AND scheduled_at = ? AND owner = ? AND status = 'running'`),
		f.Loop, micros(f.ScheduledAt), owner)
	return err
}

// get reads one firing.
func (s *store) get(ctx context.Context, loop string, at time.Time) (Firing, error) {
	row := s.db.QueryRowContext(ctx, s.q("SELECT "+firingColumns+" FROM lush_loop_firings WHERE loop_name = ? AND scheduled_at = ?"),
		loop, micros(at))
	return scanFiring(row)
}

// history reads a loop's firings, newest first, scheduled before before (zero: any).
func (s *store) history(ctx context.Context, loop string, before time.Time, limit int) ([]Firing, error) {
	b := int64(1<<63 - 1)
	if !before.IsZero() {
		b = micros(before)
	}
	rows, err := s.db.QueryContext(ctx, s.q("SELECT "+firingColumns+` FROM lush_loop_firings
		WHERE loop_name = ? AND scheduled_at < ? ORDER BY scheduled_at DESC LIMIT ?`), loop, b, limit)
	return collect(rows, err)
}
