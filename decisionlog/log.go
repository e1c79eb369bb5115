// Package decisionlog is Lush's one decision-log writer: every policy decision (allow, deny,
// stub, live write, error) becomes one Event, committed to an embedded SQLite database before
// the enforcement point acts on it, and what happened afterwards is appended as a Completion.
// It also reads the log back (Reader, for `lushctl audit`) and masks inputs before they are
// logged (ApplyMask).
//
// The rule it exists for: no decision is dropped silently. Record returns nil only once the event
// is committed; any error (a full queue, a failed write, a closed log) means the caller must deny
// the call. Concurrent Records share transactions (group commit): one writer goroutine takes
// everything queued, up to BatchSize, inserts it in one transaction and wakes every caller.
//
// Durability: the database runs in WAL mode. With Synchronous("normal") (the default) a
// committed event survives a crash of the process but not necessarily a power loss or kernel
// crash (the last transactions may roll back); Synchronous("full") survives both and costs an
// fsync per transaction.
//
// The log is append-only: triggers refuse UPDATE and DELETE on both tables.
//
// Decision ids should be time-ordered (UUIDv7, uuid.NewV7): the unique decision_id index then
// grows at its end, and a batch touches a few index pages instead of one page per event. Random
// (v4) ids work, at about half the throughput under load (BenchmarkRecord/writers=64/ids=v4).
package decisionlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "modernc.org/sqlite/lib"
)

// ErrBackpressure is returned at once when the writer's queue is full; the decision was not
// logged and the call must be denied.
var ErrBackpressure = errors.New("decision log queue is full")

// ErrClosed is returned by Record, Complete, CompleteAsync and Sync after Close.
var ErrClosed = errors.New("decision log is closed")

// Option configures Open.
type Option func(*config) error

type config struct {
	batchSize   int
	batchDelay  time.Duration
	queueSize   int
	synchronous string
	clock       func() time.Time
	busyTimeout time.Duration
	onConn      func(context.Context, *sql.Conn) error // tests: runs on the writer's connection after setup
}

// BatchSize sets the most events (and completions) one transaction commits; default 512.
func BatchSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("BatchSize must be at least 1, not %d", n)
		}
		c.batchSize = n
		return nil
	}
}

// BatchDelay bounds how long the writer keeps filling a batch while events keep arriving;
// default 1ms. An idle writer, or one that finds the queue empty, commits at once.
func BatchDelay(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("BatchDelay must not be negative, not %s", d)
		}
		c.batchDelay = d
		return nil
	}
}

// QueueSize sets how many writes may wait for the writer; default 8192. When the queue is full,
// Record, Complete and CompleteAsync fail at once with ErrBackpressure: they never block on a
// full queue and never drop.
func QueueSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("QueueSize must be at least 1, not %d", n)
		}
		c.queueSize = n
		return nil
	}
}

// Synchronous sets SQLite's synchronous mode: "normal" (the default: with WAL, committed events
// survive a process crash but the last ones may be lost on power loss) or "full" (they survive
// power loss too, at the cost of an fsync per transaction).
func Synchronous(mode string) Option {
	return func(c *config) error {
		switch strings.ToLower(mode) {
		case "normal", "full":
			c.synchronous = strings.ToLower(mode)
			return nil
		}
		return fmt.Errorf(`Synchronous must be "normal" or "full", not %q`, mode)
	}
}

// Clock sets the clock that stamps events and completions without a Timestamp (tests).
func Clock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return errors.New("Clock must not be nil")
		}
		c.clock = now
		return nil
	}
}

// Stats counts the log's writes (events and completions) since Open.
type Stats struct {
	Written  int64 `json:"written"`  // committed
	Failed   int64 `json:"failed"`   // reached the writer and could not be committed
	Rejected int64 `json:"rejected"` // refused before the writer: invalid, queue full (ErrBackpressure), closed
	Queued   int64 `json:"queued"`   // accepted and not yet committed or failed
}

// Log is the SQLite decision log (the embedded default): WAL mode, one writer goroutine, group
// commit. It is safe for concurrent use.
type Log struct {
	cfg    config
	path   string
	db     *sql.DB // the writer's single connection
	reader *Reader // queries on the same file

	mu     sync.RWMutex // guards closed and sends on queue against Close
	closed bool
	queue  chan *request
	done   chan struct{} // closed when the writer goroutine has exited
	werr   error         // the writer's shutdown error, read after done

	kick     chan struct{} // the writer tells the checkpointer that it committed
	ckptStop chan struct{} // closed by Close to stop the checkpointer
	ckptDone chan struct{} // closed when the checkpointer has exited

	written, failed, rejected, pending atomic.Int64
}

type kind uint8

const (
	kindEvent kind = iota
	kindCompletion
	kindBarrier // writes nothing: answered once everything queued before it is answered
)

// request is one write waiting for the writer. A synchronous caller waits on done; an
// asynchronous one (CompleteAsync) gets the result through then, which may be nil.
type request struct {
	kind kind
	args []any // the insert statement's arguments
	done chan error
	then func(error)
}

// answer hands the writer's result to whoever waits for it.
func (r *request) answer(err error) {
	switch {
	case r.done != nil:
		r.done <- err
	case r.then != nil:
		r.then(err)
	}
}

// Open opens (creating it, its directories and its schema if needed) the decision log at path
// and starts its writer. Close stops it.
func Open(ctx context.Context, path string, opts ...Option) (*Log, error) {
	cfg := config{batchSize: 512, batchDelay: time.Millisecond, queueSize: 8192, synchronous: "normal",
		clock: time.Now, busyTimeout: 5 * time.Second}
	for _, opt := range opts {
		if err := opt(&cfg); err != nil {
			return nil, fmt.Errorf("open decision log: %w", err)
		}
	}
	if path == "" {
		return nil, errors.New("open decision log: path is empty")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	// Create the file ourselves so that it (and SQLite's -wal and -shm files, which copy its
	// mode) is readable by its owner only: events hold (masked) call inputs.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	f.Close()

	params := url.Values{}
	params.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.busyTimeout.Milliseconds()))
	params.Add("_pragma", "journal_mode(WAL)")
	params.Add("_pragma", "synchronous("+cfg.synchronous+")")
	params.Add("_pragma", "foreign_keys(1)")
	params.Add("_pragma", "temp_store(memory)")
	// Checkpoints run on their own connection (see checkpoint); the writer checkpoints itself only
	// when the WAL outgrows this many pages (when the checkpointer cannot keep up, or a
	// checkpoint never catches up with a writer that never pauses).
	params.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", walSafetyPages))
	db, err := openDB(path, params)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(2) // the writer and the checkpointer
	db.SetMaxIdleConns(2)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	w, err := newWriter(ctx, db, &cfg)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open decision log %s: %w", path, err)
	}
	ckpt, err := db.Conn(ctx)
	if err != nil {
		w.close()
		db.Close()
		return nil, fmt.Errorf("open decision log %s: %w", path, err)
	}
	reader, err := OpenReader(path)
	if err != nil {
		ckpt.Close()
		w.close()
		db.Close()
		return nil, err
	}
	l := &Log{cfg: cfg, path: path, db: db, reader: reader, queue: make(chan *request, cfg.queueSize), done: make(chan struct{}),
		kick: make(chan struct{}, 1), ckptStop: make(chan struct{}), ckptDone: make(chan struct{})}
	go l.run(w)
	go l.checkpoint(ckpt)
	return l, nil
}

// Path returns the database file's path.
func (l *Log) Path() string { return l.path }

// Record logs one decision. It returns nil only once the event is committed; on any error (the
// event is invalid, the queue is full, the write failed, the log is closed, ctx ended first) the
// caller must treat the decision as not logged and deny the call. An event whose ctx ended may
// still be committed later. e is not modified: a zero Timestamp is stamped and an empty Path is
// defaulted in the stored copy.
func (l *Log) Record(ctx context.Context, e *Event) error {
	if e == nil {
		l.rejected.Add(1)
		return errors.New("record decision: event is nil")
	}
	ev := *e
	if ev.Timestamp.IsZero() {
		ev.Timestamp = l.cfg.clock()
	}
	ev.Timestamp = ev.Timestamp.UTC()
	if ev.Path == "" {
		ev.Path = DefaultPath
	}
	if err := ev.validate(); err != nil {
		l.rejected.Add(1)
		return fmt.Errorf("record decision: %w", err)
	}
	data, err := encodeJSON(&ev)
	if err != nil {
		l.rejected.Add(1)
		return fmt.Errorf("record decision %s: encode: %w", ev.DecisionID, err)
	}
	r := &request{kind: kindEvent, done: make(chan error, 1), args: []any{
		ev.DecisionID, ev.Timestamp.UnixNano(), ev.Revision, ev.Point, ev.Principal, ev.Agent, ev.Action,
		ev.Tool, ev.ToolName, ev.Access, ev.Risk, ev.Outcome, ev.LatencyNS, ev.TraceID, string(data)}}
	if err := l.submit(ctx, r); err != nil {
		return fmt.Errorf("record decision %s: %w", ev.DecisionID, err)
	}
	return nil
}

// Complete appends what happened after a decision (at most once per decision_id; the decision
// must be in the log). It gives Record's guarantee: nil only once committed.
func (l *Log) Complete(ctx context.Context, c *Completion) error {
	r, err := l.completion(c)
	if err != nil {
		return err
	}
	r.done = make(chan error, 1)
	if err := l.submit(ctx, r); err != nil {
		return fmt.Errorf("record completion %s: %w", c.DecisionID, err)
	}
	return nil
}

// CompleteAsync queues a completion and returns without waiting for its commit: for callers
// that have already acted and must not make their client wait for the log. It fails at once if
// c is invalid, the queue is full or the log is closed; otherwise then (if not nil) is later
// called, on the writer goroutine, with the commit's result, and must return quickly. Close
// commits queued completions before it returns.
func (l *Log) CompleteAsync(c *Completion, then func(error)) error {
	r, err := l.completion(c)
	if err != nil {
		return err
	}
	r.then = then
	if err := l.enqueue(r); err != nil {
		return fmt.Errorf("record completion %s: %w", c.DecisionID, err)
	}
	return nil
}

// Sync waits until every write queued before it (CompleteAsync's included) has been committed or
// has failed. It returns ctx's error if ctx ends first, and ErrClosed after Close (which itself
// commits everything queued).
func (l *Log) Sync(ctx context.Context) error {
	return l.submit(ctx, &request{kind: kindBarrier, done: make(chan error, 1)})
}

// completion validates c and turns it into a request without a waiter.
func (l *Log) completion(c *Completion) (*request, error) {
	if c == nil {
		l.rejected.Add(1)
		return nil, errors.New("record completion: completion is nil")
	}
	cp := *c
	if cp.Timestamp.IsZero() {
		cp.Timestamp = l.cfg.clock()
	}
	if err := cp.validate(); err != nil {
		l.rejected.Add(1)
		return nil, fmt.Errorf("record completion: %w", err)
	}
	var resp, msg any
	if len(cp.Response) > 0 {
		compact, err := encodeJSON(cp.Response)
		if err != nil {
			l.rejected.Add(1)
			return nil, fmt.Errorf("record completion %s: encode response: %w", cp.DecisionID, err)
		}
		resp = string(compact)
	}
	if cp.Error != "" {
		msg = cp.Error
	}
	var tin, tout any
	if cp.TokensInput != 0 || cp.TokensOutput != 0 {
		tin, tout = cp.TokensInput, cp.TokensOutput
	}
	return &request{kind: kindCompletion, args: []any{
		cp.DecisionID, cp.Timestamp.UnixNano(), cp.Status, cp.LatencyNS, resp, msg, tin, tout}}, nil
}

// submit queues r without blocking and waits until the writer has committed it or failed.
func (l *Log) submit(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		l.rejected.Add(1)
		return err
	}
	if err := l.enqueue(r); err != nil {
		return err
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("not known to be committed: %w", ctx.Err())
	}
}

// enqueue hands r to the writer without blocking.
func (l *Log) enqueue(r *request) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.rejected.Add(1)
		return ErrClosed
	}
	l.pending.Add(1)
	select {
	case l.queue <- r:
		return nil
	default:
		l.pending.Add(-1)
		l.rejected.Add(1)
		return ErrBackpressure
	}
}

// Stats returns the write counters.
func (l *Log) Stats() Stats {
	return Stats{Written: l.written.Load(), Failed: l.failed.Load(), Rejected: l.rejected.Load(), Queued: l.pending.Load()}
}

// Query reads the log (see Reader.Query).
func (l *Log) Query(ctx context.Context, f Filter) ([]Record, error) {
	return l.reader.Query(ctx, f)
}

// Close stops accepting writes, commits everything already queued, stops the writer and closes
// the database. It is safe to call more than once.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	close(l.queue)
	l.mu.Unlock()
	<-l.done
	close(l.ckptStop)
	<-l.ckptDone
	err := errors.Join(l.werr, l.db.Close(), l.reader.Close())
	if err != nil {
		return fmt.Errorf("close decision log: %w", err)
	}
	return nil
}

// run is the writer goroutine: it takes a batch from the queue, commits it and answers every
// request in it, until the queue is closed and drained.
func (l *Log) run(w *writer) {
	defer close(l.done)
	batch := make([]*request, 0, l.cfg.batchSize)
	errs := make([]error, 0, l.cfg.batchSize)
	for {
		r, ok := <-l.queue
		if !ok {
			l.werr = w.close()
			return
		}
		batch = l.fill(append(batch[:0], r))
		errs = w.commit(batch, errs[:0])
		for i, r := range batch {
			switch {
			case r.kind == kindBarrier:
			case errs[i] != nil:
				l.failed.Add(1)
			default:
				l.written.Add(1)
			}
			l.pending.Add(-1)
			r.answer(errs[i])
			batch[i] = nil
		}
		select {
		case l.kick <- struct{}{}:
		default:
		}
		// Let the callers just answered run (and queue their next writes) before the next batch
		// starts: batches grow, and a writer that never blocks would otherwise hold its P and
		// leave them waiting in its run queue until it is preempted.
		runtime.Gosched()
	}
}

// Checkpointing: walSafetyPages is the WAL size (pages) at which the writer checkpoints inline;
// checkpointInterval paces the background checkpointer.
const (
	walSafetyPages     = 10000
	checkpointInterval = 25 * time.Millisecond
)

// checkpoint is the checkpointer goroutine: after commits, at most every checkpointInterval, it
// copies the WAL into the database (a PASSIVE checkpoint, which never blocks the writer or
// readers) on its own connection, so that the copying and its fsyncs stay off the writer's path.
func (l *Log) checkpoint(conn *sql.Conn) {
	defer close(l.ckptDone)
	defer conn.Close()
	pace := time.NewTimer(checkpointInterval)
	defer pace.Stop()
	for {
		select {
		case <-l.ckptStop:
			return
		case <-l.kick:
		}
		var busy, frames, copied int
		// An error here is not a lost decision: the writer's inline checkpoint takes over.
		_ = conn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
		pace.Reset(checkpointInterval)
		select {
		case <-l.ckptStop:
			return
		case <-pace.C:
		}
	}
}

// fill adds queued requests to batch without waiting: it stops when the queue is empty, the
// batch is full, or BatchDelay has passed since it started (so a queue that never empties still
// commits regularly).
func (l *Log) fill(batch []*request) []*request {
	deadline := time.Now().Add(l.cfg.batchDelay)
	for len(batch) < l.cfg.batchSize {
		select {
		case r, ok := <-l.queue:
			if !ok {
				return batch
			}
			batch = append(batch, r)
		default:
			return batch
		}
		if len(batch)%16 == 0 && time.Now().After(deadline) {
			return batch
		}
	}
	return batch
}

// writer owns the writer connection and its prepared statements.
type writer struct {
	conn              *sql.Conn
	event, completion *sql.Stmt
}

const (
	insertEvent = `INSERT INTO events (decision_id, ts, revision, point, principal, agent, action, tool,
	tool_name, access, risk, outcome, latency_ns, trace_id, event) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`
	insertCompletion = `INSERT INTO completions (decision_id, ts, status, latency_ns, response, error, tokens_input, tokens_output) VALUES (?,?,?,?,?,?,?,?)`
)

func newWriter(ctx context.Context, db *sql.DB, cfg *config) (_ *writer, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	w := &writer{conn: conn}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
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
	if w.event, err = conn.PrepareContext(ctx, insertEvent); err != nil {
		return nil, err
	}
	if w.completion, err = conn.PrepareContext(ctx, insertCompletion); err != nil {
		return nil, err
	}
	if cfg.onConn != nil {
		if err := cfg.onConn(ctx, conn); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// commit writes batch in one transaction and returns one error per request (appended to errs).
// A constraint violation (a duplicate decision_id, a completion without its decision) fails only
// its own request; any other error fails the whole batch.
func (w *writer) commit(batch []*request, errs []error) (out []error) {
	ctx := context.Background()
	fail := func(err error) []error {
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
	if _, err := w.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fail(fmt.Errorf("write decision log: begin: %w", err))
	}
	for _, r := range batch {
		stmt := w.event
		switch r.kind {
		case kindCompletion:
			stmt = w.completion
		case kindBarrier:
			errs = append(errs, nil)
			continue
		}
		_, err := stmt.ExecContext(ctx, r.args...)
		if err != nil {
			if code, ok := isConstraint(err); ok {
				errs = append(errs, constraintError(r, code))
				continue
			}
			_, _ = w.conn.ExecContext(ctx, "ROLLBACK")
			return fail(fmt.Errorf("write decision log: %w", err))
		}
		errs = append(errs, nil)
	}
	if _, err := w.conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = w.conn.ExecContext(ctx, "ROLLBACK")
		return fail(fmt.Errorf("write decision log: commit: %w", err))
	}
	return errs
}

func constraintError(r *request, code int) error {
	switch {
	case r.kind == kindEvent && code == sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return errors.New("decision_id is already in the log")
	case r.kind == kindCompletion && code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return errors.New("a completion for this decision_id is already in the log")
	case r.kind == kindCompletion && code == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return errors.New("decision_id is not in the log")
	}
	return fmt.Errorf("constraint violated (SQLite code %d)", code)
}

func (w *writer) close() error {
	var errs []error
	for _, s := range []*sql.Stmt{w.event, w.completion} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(append(errs, w.conn.Close())...)
}
