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
// the chain's head, and Verify proves the log complete and unaltered or names the first broken
// entry (chain.go, verify.go). Retention deletes whole expired segments and records it in the
// chain. The same log runs on PostgreSQL, shared by gateway replicas (postgres.go).
//
// Decision ids should be time-ordered (UUIDv7, uuid.NewV7): the unique decision_id index then
// grows at its end, and a batch touches a few index pages instead of one page per event. Random
// (v4) ids work, at about half the throughput under load (BenchmarkRecord/writers=64/ids=v4).
package decisionlog

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/hex"
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

	partition       string
	signingKey      ed25519.PrivateKey
	checkpointEvery time.Duration
	retention       time.Duration
	retentionChunk  int
}

// Partition sets the hash chain partition this log writes (default DefaultPartition). Writers
// sharing a partition extend one chain, one transaction at a time; give each gateway replica
// its own partition on a shared PostgreSQL store so that they do not wait on each other.
func Partition(name string) Option {
	return func(c *config) error {
		if name == "" || len(name) > 128 {
			return fmt.Errorf("Partition must be 1 to 128 bytes, not %q", name)
		}
		c.partition = name
		return nil
	}
}

// SigningKey sets the Ed25519 key that signs checkpoints (see LoadOrCreateSigningKey). Without
// one, checkpoints are unsigned: they still bound segments for retention, but only a signed
// checkpoint shows that the chain before it was not rewritten.
func SigningKey(key ed25519.PrivateKey) Option {
	return func(c *config) error {
		if len(key) != ed25519.PrivateKeySize {
			return fmt.Errorf("SigningKey must be an Ed25519 private key")
		}
		c.signingKey = key
		return nil
	}
}

// CheckpointEvery sets how often the log checkpoints its chain head when something was written
// since the last checkpoint (default 1m; 0 checkpoints only on Close and on Checkpoint).
// Checkpoints also bound the segments retention deletes.
func CheckpointEvery(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("CheckpointEvery must not be negative, not %s", d)
		}
		c.checkpointEvery = d
		return nil
	}
}

// RetentionPeriod makes the log delete, after each checkpoint, the segments whose closing
// checkpoint is older than d (0, the default, keeps everything). Each deletion is recorded in
// the chain, so the rest still verifies.
func RetentionPeriod(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("RetentionPeriod must not be negative, not %s", d)
		}
		c.retention = d
		return nil
	}
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

	sharedMu sync.Mutex
	shared   map[any]any // Shared's values
}

// Shared returns the value kept under key for everyone using this log, made by mk on first use:
// state that belongs with the store rather than with any one of its users, such as the budget
// ledger that caches the log's budget usage for every enforcer writing to it. key should be a
// value of an unexported type of the caller's package.
func (l *Log) Shared(key any, mk func() any) any {
	l.sharedMu.Lock()
	defer l.sharedMu.Unlock()
	if v, ok := l.shared[key]; ok {
		return v
	}
	if l.shared == nil {
		l.shared = map[any]any{}
	}
	v := mk()
	l.shared[key] = v
	return v
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
	cfg := config{batchSize: 512, batchDelay: time.Millisecond, queueSize: 8192, synchronous: "normal",
		clock: time.Now, busyTimeout: 5 * time.Second, partition: DefaultPartition, checkpointEvery: time.Minute, retentionChunk: defaultRetentionChunk}
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
	if err := ev.validate(); err != nil {
		l.rejected.Add(1)
		return fmt.Errorf("record decision: %w", err)
	}
	if err := validateCharges(ev.Charges); err != nil {
		l.rejected.Add(1)
		return fmt.Errorf("record decision %s: %w", ev.DecisionID, err)
	}
	data, err := encodeJSON(&ev)
	if err != nil {
		l.rejected.Add(1)
		return fmt.Errorf("record decision %s: encode: %w", ev.DecisionID, err)
	}
	r := &request{kind: kindEvent, done: make(chan error, 1), args: eventColumns(&ev, string(data)), charges: ev.Charges}
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
	return &request{kind: kindCompletion, args: []any{
		cp.DecisionID, cp.Timestamp.UnixNano(), cp.Status, cp.LatencyNS, resp, msg, tin, tout}, charges: cp.Charges}, nil
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

// writer owns the writer connection, its prepared statements and the chain it extends.
type writer struct {
	conn              *sql.Conn
	cfg               *config
	d                 *dialect
	event, completion *sql.Stmt
	floor, head       *sql.Stmt
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
)

func newWriter(ctx context.Context, db *sql.DB, d *dialect, cfg *config) (_ *writer, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	w := &writer{conn: conn, cfg: cfg, d: d}
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
	if _, err := w.conn.ExecContext(ctx, w.d.begin); err != nil {
		return fail(fmt.Errorf("write decision log: begin: %w", err))
	}
	rollback := func(err error) []error {
		_, _ = w.conn.ExecContext(ctx, "ROLLBACK")
		return fail(fmt.Errorf("write decision log: %w", err))
	}
	// The head is read inside the write transaction (after the partition's row is locked, for
	// PostgreSQL), so another process writing the same partition (lushctl audit retain, a second
	// gateway) extends the same chain instead of forking it.
	h := head{pos: 0, hash: genesis}
	if err := w.floor.QueryRowContext(ctx, w.cfg.partition).Scan(&h.floor); err != nil {
		return rollback(fmt.Errorf("read the partition: %w", err))
	}
	switch err := w.head.QueryRowContext(ctx, w.cfg.partition).Scan(&h.pos, &h.hash); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return rollback(fmt.Errorf("read the chain head: %w", err))
	}
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
			err = w.checkpoint(ctx, &h, r)
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
	if _, err := w.conn.ExecContext(ctx, "COMMIT"); err != nil {
		return rollback(fmt.Errorf("commit: %w", err))
	}
	return errs
}

// refusedError fails one request of a batch and lets the rest commit.
type refusedError struct{ error }

func (w *writer) appendEvent(ctx context.Context, h *head, r *request) error {
	pos := h.pos + 1
	hash := chainHash(h.hash, eventEntry(w.cfg.partition, pos, r.args[0].(string), r.args[1].(int64), r.args[len(r.args)-1].(string)))
	res, err := w.event.ExecContext(ctx, append(r.args, w.cfg.partition, pos, hash)...)
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
	hash := chainHash(h.hash, completionEntry(w.cfg.partition, pos, a[0].(string), a[1].(int64), a[2].(string), a[3].(int64), a[4], a[5], a[6], a[7]))
	res, err := w.completion.ExecContext(ctx, append(a, w.cfg.partition, pos, hash, a[0])...)
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

// checkpoint signs the head, unless it is already checkpointed or the chain is empty; r.out
// receives the *Checkpoint (nil when there was nothing new).
func (w *writer) checkpoint(ctx context.Context, h *head, r *request) error {
	var last int64
	if err := w.conn.QueryRowContext(ctx, w.d.q("SELECT coalesce(max(pos), 0) FROM checkpoints WHERE part = ?"), w.cfg.partition).Scan(&last); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if h.pos == 0 || h.pos <= last {
		return nil
	}
	c := &Checkpoint{Partition: w.cfg.partition, Pos: h.pos, Hash: hex.EncodeToString(h.hash), Timestamp: w.cfg.clock().UTC()}
	c.sign(w.cfg.signingKey)
	if _, err := w.conn.ExecContext(ctx, w.d.q(`INSERT INTO checkpoints (part, pos, hash, ts, key_id, public_key, signature) VALUES (?,?,?,?,?,?,?)`),
		c.Partition, c.Pos, h.hash, c.Timestamp.UnixNano(), c.KeyID, c.PublicKey, c.Signature); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	r.out = c
	return nil
}

// defaultRetentionChunk bounds the rows of each table one retention pass deletes, so that a
// large expired segment is deleted over several transactions and writes go on between them.
const defaultRetentionChunk = 2000

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
	for _, s := range []*sql.Stmt{w.event, w.completion, w.floor, w.head} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(append(errs, w.conn.Close())...)
}
