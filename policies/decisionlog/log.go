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
// The log is append-only (triggers refuse UPDATE, and DELETE except by retention) and tamper
// evident: every entry is hash-chained to the one before it in its partition, checkpoints sign
// the chain's head (every CheckpointEvery, every CheckpointEntries entries, and at Close), and
// Verify proves the log complete and unaltered up to its last checkpoint, counting the entries
// after it, or names the first broken entry (chain.go, verify.go). Retention deletes whole expired segments and records it in the
// chain. The same log runs on PostgreSQL, shared by gateway replicas (postgres.go).
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
)

// ErrBackpressure is returned at once when the writer's queue is full; the decision was not
// logged and the call must be denied.
var ErrBackpressure = errors.New("decision log queue is full")

// ErrClosed is returned by Record, Complete, CompleteAsync and Sync after Close.
var ErrClosed = errors.New("decision log is closed")

// Stats counts the log's writes (events and completions) since Open.
type Stats struct {
	Written  int64 `json:"written"`  // committed
	Failed   int64 `json:"failed"`   // reached the writer and could not be committed
	Rejected int64 `json:"rejected"` // refused before the writer: invalid, queue full (ErrBackpressure), closed
	Queued   int64 `json:"queued"`   // accepted and not yet committed or failed
	// MaintenanceFailures counts checkpoints and retention passes that failed (the next round
	// retries).
	MaintenanceFailures int64 `json:"maintenance_failures"`
}

// Log is the decision log: SQLite (the embedded default, WAL mode) or PostgreSQL, one writer
// goroutine, group commit. It is safe for concurrent use.
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

	maintCtx  context.Context    // the maintainer's (checkpoints, retention); Close cancels it
	maintStop context.CancelFunc // cancels maintCtx
	maintDone chan struct{}      // closed when the maintainer has exited

	kick     chan struct{} // the writer tells the checkpointer that it committed
	ckptStop chan struct{} // closed by Close to stop the checkpointer
	ckptDone chan struct{} // closed when the checkpointer has exited

	written, failed, rejected, pending, maintFailed atomic.Int64
}

type kind uint8

const (
	kindEvent kind = iota
	kindCompletion
	kindBarrier    // writes nothing: answered once everything queued before it is answered
	kindCheckpoint // signs the chain head
	kindRetention  // deletes expired segments (args[0]: the cutoff time.Time)
)

// request is one write waiting for the writer. A synchronous caller waits on done; an
// asynchronous one (CompleteAsync) gets the result through then, which may be nil.
type request struct {
	kind kind
	args []any // the insert statement's arguments
	// charges are applied to budget usage when the event or completion is inserted (not when
	// it is refused).
	charges []Charge
	out     any // a checkpoint's or retention's result, set by the writer before it answers
	done    chan error
	then    func(error)
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

// Open opens (creating it, its directories and its schema if needed) the decision log at path,
// a SQLite file, or at a postgres:// URL, and starts its writer. Close stops it.
func Open(ctx context.Context, path string, opts ...Option) (*Log, error) {
	cfg := defaultConfig()
	if IsPostgres(path) {
		// Replicas sharing the database each write their own chain unless told otherwise.
		if host, err := os.Hostname(); err == nil && host != "" && len(host) <= 128 {
			cfg.partition = host
		}
	}
	for _, opt := range opts {
		if err := opt(&cfg); err != nil {
			return nil, fmt.Errorf("open decision log: %w", err)
		}
	}
	if IsPostgres(path) {
		return openPostgres(ctx, path, cfg)
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
	w, err := newWriter(ctx, db, sqliteDialect, &cfg)
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
	l := start(cfg, path, db, reader, w)
	go l.checkpoint(ckpt)
	return l, nil
}

// start makes the Log and starts its writer and maintainer; the caller starts the checkpointer
// (SQLite) or closes ckptDone (PostgreSQL has none).
func start(cfg config, where string, db *sql.DB, reader *Reader, w *writer) *Log {
	l := &Log{cfg: cfg, path: where, db: db, reader: reader, queue: make(chan *request, cfg.queueSize), done: make(chan struct{}),
		kick: make(chan struct{}, 1), ckptStop: make(chan struct{}), ckptDone: make(chan struct{}),
		maintDone: make(chan struct{})}
	l.maintCtx, l.maintStop = context.WithCancel(context.Background())
	go l.run(w)
	go l.maintain()
	return l
}

// IsPostgres reports whether a decision log location is a PostgreSQL URL rather than a file.
func IsPostgres(location string) bool {
	return strings.HasPrefix(location, "postgres://") || strings.HasPrefix(location, "postgresql://")
}

// Path returns the database file's path, or the PostgreSQL URL without its password.
func (l *Log) Path() string { return l.path }

// Reader returns the log's reader (queries and Verify on the same store).
func (l *Log) Reader() *Reader { return l.reader }

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
	if err := ev.validateColumns(); err != nil {
		l.rejected.Add(1)
		return fmt.Errorf("record decision: %w", err)
	}
	// The event is written once; the fast writer validates the raw documents as it compacts
	// them, so they are checked apart only when it cannot write the event.
	data, fast := encodeEventFast(&ev)
	if !fast {
		if err := ev.validateDocuments(); err != nil {
			l.rejected.Add(1)
			return fmt.Errorf("record decision: %w", err)
		}
	}
	if err := validateCharges(ev.Charges); err != nil {
		l.rejected.Add(1)
		return fmt.Errorf("record decision %s: %w", ev.DecisionID, err)
	}
	if !fast {
		b, err := encodeJSON(&ev)
		if err != nil {
			l.rejected.Add(1)
			return fmt.Errorf("record decision %s: encode: %w", ev.DecisionID, err)
		}
		data = string(b)
	}
	r := &request{kind: kindEvent, done: make(chan error, 1), args: eventColumns(&ev, data), charges: ev.Charges}
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
	if err := validateCharges(cp.Charges); err != nil {
		l.rejected.Add(1)
		return nil, fmt.Errorf("record completion %s: %w", cp.DecisionID, err)
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
	// Room for the four arguments the writer adds (part, pos, hash, decision_id).
	args := append(make([]any, 0, 12), cp.DecisionID, cp.Timestamp.UnixNano(), cp.Status, cp.LatencyNS, resp, msg, tin, tout)
	return &request{kind: kindCompletion, args: args, charges: cp.Charges}, nil
}

// submit queues r without blocking and waits until the writer has committed it or failed.
func (l *Log) submit(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		l.reject(r)
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
		l.reject(r)
		return ErrClosed
	}
	l.pending.Add(1)
	select {
	case l.queue <- r:
		return nil
	default:
		l.pending.Add(-1)
		l.reject(r)
		return ErrBackpressure
	}
}

// reject counts a write refused before the writer (Stats counts writes, not barriers or
// maintenance).
func (l *Log) reject(r *request) {
	if r.kind == kindEvent || r.kind == kindCompletion {
		l.rejected.Add(1)
	}
}

// Checkpoint signs the chain head now (if anything was written since the last checkpoint) and
// returns the checkpoint, or nil when there was nothing new.
func (l *Log) Checkpoint(ctx context.Context) (*Checkpoint, error) {
	r := &request{kind: kindCheckpoint, done: make(chan error, 1)}
	if err := l.submit(ctx, r); err != nil {
		return nil, fmt.Errorf("checkpoint decision log: %w", err)
	}
	c, _ := r.out.(*Checkpoint)
	return c, nil
}

// Retain deletes every segment whose closing checkpoint was taken before cutoff, recording the
// deletion in the chain, and returns the record (nil when no segment had expired). A large
// segment is deleted over several transactions, so writes go on meanwhile; Retain returns when
// all of it is gone.
func (l *Log) Retain(ctx context.Context, cutoff time.Time) (*RetentionRecord, error) {
	var rec *RetentionRecord
	for {
		r := &request{kind: kindRetention, args: []any{cutoff}, done: make(chan error, 1)}
		if err := l.submit(ctx, r); err != nil {
			return rec, fmt.Errorf("apply retention to decision log: %w", err)
		}
		res, _ := r.out.(retentionResult)
		if res.rec != nil {
			rec = res.rec
		}
		if !res.more {
			return rec, nil
		}
	}
}

// maintain is the maintainer goroutine: every CheckpointEvery it checkpoints and, with a
// RetentionPeriod, applies it. A failure (a full queue, say) is counted in
// Stats.MaintenanceFailures; the next round catches up.
func (l *Log) maintain() {
	defer close(l.maintDone)
	if l.cfg.checkpointEvery == 0 {
		<-l.maintCtx.Done()
		return
	}
	tick := time.NewTicker(l.cfg.checkpointEvery)
	defer tick.Stop()
	for {
		select {
		case <-l.maintCtx.Done():
			return
		case <-tick.C:
		}
		_, err := l.Checkpoint(l.maintCtx)
		if err == nil && l.cfg.retention > 0 {
			_, err = l.Retain(l.maintCtx, l.cfg.clock().Add(-l.cfg.retention))
		}
		if err != nil && l.maintCtx.Err() == nil {
			l.maintFailed.Add(1)
		}
	}
}

// Stats returns the write counters.
func (l *Log) Stats() Stats {
	return Stats{Written: l.written.Load(), Failed: l.failed.Load(), Rejected: l.rejected.Load(), Queued: l.pending.Load(),
		MaintenanceFailures: l.maintFailed.Load()}
}

// Query reads the log (see Reader.Query).
func (l *Log) Query(ctx context.Context, f Filter) ([]Record, error) {
	return l.reader.Query(ctx, f)
}

// Close stops accepting writes, commits everything already queued, stops the writer and closes
// the database. It is safe to call more than once.
func (l *Log) Close() error {
	l.maintStop() // first: a checkpoint it has queued is answered; it queues no more
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	// The last request signs the final head, so that nothing written before Close can be cut off
	// unnoticed. (A blocking send: the writer drains the queue without taking mu.)
	final := &request{kind: kindCheckpoint, done: make(chan error, 1)}
	l.pending.Add(1)
	l.queue <- final
	close(l.queue)
	l.mu.Unlock()
	<-l.maintDone
	<-l.done
	close(l.ckptStop)
	<-l.ckptDone
	err := errors.Join(l.werr, <-final.done, l.db.Close(), l.reader.Close())
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
	var wait *time.Timer // CompletionDelay's
	for {
		r, ok := <-l.queue
		if !ok {
			l.werr = w.close()
			return
		}
		batch = l.fill(append(batch[:0], r))
		if l.cfg.asyncDelay > 0 && len(batch) < l.cfg.batchSize && onlyAsync(batch) {
			// Nobody waits for these: give the next write that someone waits for (a call's
			// completion is usually followed by a decision) the chance to carry them.
			if wait == nil {
				wait = time.NewTimer(l.cfg.asyncDelay)
			} else {
				wait.Reset(l.cfg.asyncDelay)
			}
			select {
			case r, ok := <-l.queue:
				if ok {
					batch = l.fill(append(batch, r))
				} // closed: commit what there is; the next receive ends the loop
			case <-wait.C:
			}
			wait.Stop()
		}
		errs = w.commit(batch, errs[:0])
		for i, r := range batch {
			switch {
			case r.kind != kindEvent && r.kind != kindCompletion:
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

// onlyAsync reports whether nobody waits for any request of batch: all are queued completions,
// and none charges a budget (its usage must count as soon as it can).
func onlyAsync(batch []*request) bool {
	for _, r := range batch {
		if r.done != nil || r.kind != kindCompletion || len(r.charges) > 0 {
			return false
		}
	}
	return true
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
