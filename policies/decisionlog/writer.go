package decisionlog

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// writer owns the writer connection, its prepared statements and the chain it extends.
type writer struct {
	conn              *sql.Conn
	cfg               *config
	d                 *dialect
	event, completion *sql.Stmt
	floor, head       *sql.Stmt
	// checkpointed is the newest position of the partition known to be checkpointed, by this
	// writer or another: CheckpointEntries counts from it.
	checkpointed int64
	// SQLite only: version reads the database's data_version, which changes when another
	// connection (another process: a second gateway, lushctl audit) commits. While it is the
	// version the last commit saw, the chain head and floor that commit left (last) are still the
	// partition's, and the next transaction extends them without reading them.
	version     *sql.Stmt
	begin, end  *sql.Stmt // SQLite only: the transaction's BEGIN and COMMIT, parsed once
	last        head
	lastVersion int64
	lastValid   bool
	part        any // cfg.partition, as a statement argument
	// scratch holds the previous hash and an entry's encoding while the entry's hash is taken.
	scratch []byte
}

const (
	insertEvent = `INSERT INTO events (decision_id, ts, revision, point, principal, agent, action, tool,
	tool_name, access, risk, outcome, latency_ns, trace_id, event, part, pos, hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
	ON CONFLICT (decision_id) DO NOTHING`
	// The head is the newest entry of the partition: reading three index ends is cheaper than
	// writing the head down in every transaction.
	selectHead = `SELECT pos, hash FROM (SELECT pos, hash FROM events WHERE part = ?1 ORDER BY pos DESC LIMIT 1) e
	UNION ALL SELECT pos, hash FROM (SELECT pos, hash FROM completions WHERE part = ?1 ORDER BY pos DESC LIMIT 1) c
	UNION ALL SELECT pos, hash FROM (SELECT pos, hash FROM markers WHERE part = ?1 ORDER BY pos DESC LIMIT 1) m
	ORDER BY pos DESC LIMIT 1`
	selectFloor = `SELECT floor FROM partitions WHERE part = ?`
	// dataVersion changes when another connection commits to the database (not for this one's).
	dataVersion = `PRAGMA data_version`
)

func newWriter(ctx context.Context, db *sql.DB, d *dialect, cfg *config) (_ *writer, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	w := &writer{conn: conn, cfg: cfg, d: d, part: cfg.partition}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if d.postgres {
		if err := createPostgres(ctx, conn); err != nil {
			return nil, err
		}
	} else {
		var mode string
		if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			return nil, err
		}
		if !strings.EqualFold(mode, "wal") {
			return nil, fmt.Errorf("journal_mode is %q, not wal", mode)
		}
		if err := migrate(ctx, conn); err != nil {
			return nil, err
		}
	}
	// The partition's row exists before the first transaction, so that PostgreSQL replicas
	// starting a partition together lock it rather than both inserting it.
	if _, err := conn.ExecContext(ctx, d.q("INSERT INTO partitions (part, floor) VALUES (?, 1) ON CONFLICT (part) DO NOTHING"),
		cfg.partition); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{{&w.event, insertEvent}, {&w.completion, d.insertCompletion}, {&w.floor, selectFloor + d.lockPartition}, {&w.head, selectHead}} {
		if *p.stmt, err = conn.PrepareContext(ctx, d.q(p.sql)); err != nil {
			return nil, err
		}
	}
	if !d.postgres {
		for _, p := range []struct {
			stmt **sql.Stmt
			sql  string
		}{{&w.version, dataVersion}, {&w.begin, d.begin}, {&w.end, "COMMIT"}} {
			if *p.stmt, err = conn.PrepareContext(ctx, p.sql); err != nil {
				return nil, err
			}
		}
	}
	if w.checkpointed, err = w.lastCheckpoint(ctx); err != nil {
		return nil, err
	}
	if cfg.onConn != nil {
		if err := cfg.onConn(ctx, conn); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// head is a partition's chain head as the writer extends it within one transaction.
type head struct {
	pos   int64
	hash  []byte
	floor int64 // positions below it were deleted by retention
}

// commit writes batch in one transaction, extending the partition's chain, and returns one error
// per request (appended to errs). A duplicate decision_id, or a completion whose decision is
// missing or already completed, fails only its own request (and takes no chain position); any
// other error fails the whole batch.
func (w *writer) commit(batch []*request, errs []error) (out []error) {
	ctx := context.Background()
	fail := func(err error) []error {
		w.lastValid = false // whatever the transaction did, the head is read again
		errs = errs[:0]
		for range batch {
			errs = append(errs, err)
		}
		return errs
	}
	defer func() {
		// A panic in the driver must not leave callers waiting forever or kill the process
		// with decisions half-answered: fail the batch (closed, towards denial).
		if p := recover(); p != nil {
			_, _ = w.conn.ExecContext(ctx, "ROLLBACK")
			out = fail(fmt.Errorf("write decision log: panic: %v", p))
		}
	}()
	if _, err := w.exec(ctx, w.begin, w.d.begin); err != nil {
		return fail(fmt.Errorf("write decision log: begin: %w", err))
	}
	rollback := func(err error) []error {
		_, _ = w.conn.ExecContext(ctx, "ROLLBACK")
		return fail(fmt.Errorf("write decision log: %w", err))
	}
	// The head is read inside the write transaction (after the partition's row is locked, for
	// PostgreSQL), so another process writing the same partition (lushctl audit retain, a second
	// gateway) extends the same chain instead of forking it.
	// On SQLite, with the write lock held, the head the last commit left is still the head
	// unless another connection has committed since.
	var version int64
	if w.version != nil {
		if err := w.version.QueryRowContext(ctx).Scan(&version); err != nil {
			return rollback(fmt.Errorf("read the data version: %w", err))
		}
	}
	h := head{pos: 0, hash: genesis}
	if w.version != nil && w.lastValid && version == w.lastVersion {
		h = w.last
	} else {
		if err := w.floor.QueryRowContext(ctx, w.cfg.partition).Scan(&h.floor); err != nil {
			return rollback(fmt.Errorf("read the partition: %w", err))
		}
		switch err := w.head.QueryRowContext(ctx, w.cfg.partition).Scan(&h.pos, &h.hash); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return rollback(fmt.Errorf("read the chain head: %w", err))
		}
	}
	covered := w.checkpointed // the newest position checkpointed, as of this transaction
	for i := 0; i < len(batch); i++ {
		r := batch[i]
		if w.d.multiRow && (r.kind == kindEvent || r.kind == kindCompletion) {
			// A run of writes of one kind goes in a few statements (a round trip each).
			j := i + 1
			for j < len(batch) && batch[j].kind == r.kind {
				j++
			}
			refused, err := w.appendRun(ctx, &h, batch[i:j])
			if err != nil {
				return rollback(err)
			}
			errs = append(errs, refused...)
			i = j - 1
			continue
		}
		var err error
		switch r.kind {
		case kindEvent:
			if err = w.appendEvent(ctx, &h, r); err == nil {
				err = w.charge(ctx, r.charges)
			}
		case kindCompletion:
			if err = w.appendCompletion(ctx, &h, r); err == nil {
				err = w.charge(ctx, r.charges)
			}
		case kindCheckpoint:
			var c *Checkpoint
			if c, err = w.checkpoint(ctx, &h, &covered); err == nil {
				r.out = c
			}
		case kindRetention:
			err = w.retain(ctx, &h, r)
		}
		var refused refusedError
		switch {
		case errors.As(err, &refused):
			errs = append(errs, refused.error)
		case err != nil:
			return rollback(err)
		default:
			errs = append(errs, nil)
		}
	}
	// A transaction that takes the chain CheckpointEntries past the last checkpoint signs the
	// head it leaves.
	if n := int64(w.cfg.checkpointEntries); n > 0 && h.pos-covered >= n {
		if _, err := w.checkpoint(ctx, &h, &covered); err != nil {
			return rollback(err)
		}
	}
	if _, err := w.exec(ctx, w.end, "COMMIT"); err != nil {
		return rollback(fmt.Errorf("commit: %w", err))
	}
	w.checkpointed = covered
	if w.version != nil {
		w.last, w.lastVersion, w.lastValid = h, version, true
	}
	return errs
}

// exec runs stmt, or query when stmt was not prepared.
func (w *writer) exec(ctx context.Context, stmt *sql.Stmt, query string) (sql.Result, error) {
	if stmt != nil {
		return stmt.ExecContext(ctx)
	}
	return w.conn.ExecContext(ctx, query)
}

// refusedError fails one request of a batch and lets the rest commit.
type refusedError struct{ error }

func (w *writer) appendEvent(ctx context.Context, h *head, r *request) error {
	pos := h.pos + 1
	w.scratch = appendEventEntry(append(w.scratch[:0], h.hash...), w.cfg.partition, pos, r.args[0].(string), r.args[1].(int64), r.args[len(r.args)-1].(string))
	hash := hashScratch(&w.scratch)
	res, err := w.event.ExecContext(ctx, append(r.args, w.part, pos, hash)...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return refusedError{errors.New("decision_id is already in the log")}
	}
	h.pos, h.hash = pos, hash
	return nil
}

func (w *writer) appendCompletion(ctx context.Context, h *head, r *request) error {
	a := r.args
	pos := h.pos + 1
	w.scratch = appendCompletionEntry(append(w.scratch[:0], h.hash...), w.cfg.partition, pos, a[0].(string), a[1].(int64), a[2].(string), a[3].(int64), a[4], a[5], a[6], a[7])
	hash := hashScratch(&w.scratch)
	res, err := w.completion.ExecContext(ctx, append(a, w.part, pos, hash, a[0])...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		var done bool
		if err := w.conn.QueryRowContext(ctx, w.d.q("SELECT EXISTS (SELECT 1 FROM completions WHERE decision_id = ?)"), a[0]).Scan(&done); err != nil {
			return err
		}
		if done {
			return refusedError{errors.New("a completion for this decision_id is already in the log")}
		}
		return refusedError{errors.New("decision_id is not in the log")}
	}
	h.pos, h.hash = pos, hash
	return nil
}

// checkpoint signs the head, unless it is already checkpointed or the chain is empty, and
// returns the checkpoint (nil when there was nothing new); *covered becomes the newest position
// checkpointed.
func (w *writer) checkpoint(ctx context.Context, h *head, covered *int64) (*Checkpoint, error) {
	last, err := w.lastCheckpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	*covered = max(*covered, last)
	if h.pos == 0 || h.pos <= last {
		return nil, nil
	}
	c := &Checkpoint{Partition: w.cfg.partition, Pos: h.pos, Hash: hex.EncodeToString(h.hash), Timestamp: w.cfg.clock().UTC()}
	c.sign(w.cfg.signingKey)
	if _, err := w.conn.ExecContext(ctx, w.d.q(`INSERT INTO checkpoints (part, pos, hash, ts, key_id, public_key, signature) VALUES (?,?,?,?,?,?,?)`),
		c.Partition, c.Pos, h.hash, c.Timestamp.UnixNano(), c.KeyID, c.PublicKey, c.Signature); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	*covered = c.Pos
	return c, nil
}

// lastCheckpoint is the newest position of the partition checkpointed (0 when none is).
func (w *writer) lastCheckpoint(ctx context.Context) (int64, error) {
	var last int64
	err := w.conn.QueryRowContext(ctx, w.d.q("SELECT coalesce(max(pos), 0) FROM checkpoints WHERE part = ?"), w.cfg.partition).Scan(&last)
	return last, err
}

// retentionResult is what one retention pass did.
type retentionResult struct {
	rec  *RetentionRecord // the record it appended; nil when no new segment had expired
	more bool             // rows below the floor remain to be deleted
}

// retain records, for the newest checkpoint taken before r's cutoff, that every entry up to it
// is deleted (a retention record in the chain: the first position kept and the hash before it,
// so the rest still verifies), raises the partition's floor to match, and deletes up to
// retentionChunk rows of each table below the floor. r.out receives a retentionResult.
func (w *writer) retain(ctx context.Context, h *head, r *request) error {
	cutoff := r.args[0].(time.Time)
	res := retentionResult{}
	var (
		cpPos, cpTS int64
		cpHash      []byte
	)
	err := w.conn.QueryRowContext(ctx, w.d.q(`SELECT pos, hash, ts FROM checkpoints WHERE part = ? AND ts < ? AND pos >= ?
	ORDER BY pos DESC LIMIT 1`), w.cfg.partition, cutoff.UnixNano(), h.floor).Scan(&cpPos, &cpHash, &cpTS)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("retention: %w", err)
	default:
		rec := &RetentionRecord{Below: cpPos + 1, PrevHash: hex.EncodeToString(cpHash), Cutoff: cutoff.UTC(), Checkpoint: time.Unix(0, cpTS).UTC()}
		for _, t := range []struct {
			table string
			n     *int64
		}{{"events", &rec.Events}, {"completions", &rec.Completions}, {"markers", &rec.Markers}} {
			if err := w.conn.QueryRowContext(ctx, w.d.q("SELECT count(*) FROM "+t.table+" WHERE part = ? AND pos >= ? AND pos < ?"),
				w.cfg.partition, h.floor, rec.Below).Scan(t.n); err != nil {
				return fmt.Errorf("retention: count %s: %w", t.table, err)
			}
		}
		body, err := encodeJSON(rec)
		if err != nil {
			return fmt.Errorf("retention: %w", err)
		}
		pos, ts := h.pos+1, w.cfg.clock().UnixNano()
		hash := chainHash(h.hash, markerEntry(w.cfg.partition, pos, KindRetention, ts, string(body)))
		if _, err := w.conn.ExecContext(ctx, w.d.q("INSERT INTO markers (part, pos, kind, ts, body, hash) VALUES (?,?,?,?,?,?)"),
			w.cfg.partition, pos, KindRetention, ts, string(body), hash); err != nil {
			return fmt.Errorf("retention: %w", err)
		}
		h.pos, h.hash, h.floor = pos, hash, rec.Below
		// The triggers allow deleting below the partition's floor only.
		if _, err := w.conn.ExecContext(ctx, w.d.q("UPDATE partitions SET floor = ? WHERE part = ?"), h.floor, w.cfg.partition); err != nil {
			return fmt.Errorf("retention: %w", err)
		}
		res.rec = rec
	}
	for _, table := range []string{"events", "completions", "markers"} {
		del, err := w.conn.ExecContext(ctx, w.d.q("DELETE FROM "+table+" WHERE part = ? AND pos IN (SELECT pos FROM "+table+
			" WHERE part = ? AND pos < ? ORDER BY pos LIMIT ?)"), w.cfg.partition, w.cfg.partition, h.floor, w.cfg.retentionChunk)
		if err != nil {
			return fmt.Errorf("retention: delete from %s: %w", table, err)
		}
		if n, err := del.RowsAffected(); err != nil {
			return fmt.Errorf("retention: %w", err)
		} else if n == int64(w.cfg.retentionChunk) {
			res.more = true
		}
	}
	r.out = res
	return nil
}

func (w *writer) close() error {
	var errs []error
	for _, s := range []*sql.Stmt{w.event, w.completion, w.floor, w.head, w.version, w.begin, w.end} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(append(errs, w.conn.Close())...)
}
