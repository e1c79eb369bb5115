package tracestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// schemaVersion is the schema this package writes, kept in PRAGMA user_version.
const schemaVersion = 1

// migrations[v] brings a database from schema version v to v+1.
//
// One row per span. root marks the spans that may be their trace's root (no parent, or a remote
// one); agent and principal are copied out of the attributes of those rows only, so that the
// partial indexes serve List. Attribute values are stored with their types, which JSON alone
// would lose (is 3 an int64 or a float64?):
//
//	attributes: {"lush.agent": {"type": "string", "value": "triage"}, "lush.tokens.input": {"type": "int64", "value": 812}}
//	events:     [{"name": "exception", "time_ns": 1767225600000000000, "attributes": {...}}]
//
// Types are string, int64, float64, bool, string[], int64[], float64[] and bool[].
var migrations = []string{
	`CREATE TABLE spans (
	trace_id       TEXT    NOT NULL,
	span_id        TEXT    NOT NULL,
	parent         TEXT    NOT NULL, -- the parent span's id, '' for none
	root           INTEGER NOT NULL CHECK (root IN (0, 1)),
	name           TEXT    NOT NULL,
	kind           TEXT    NOT NULL,
	start_ns       INTEGER NOT NULL, -- Unix nanoseconds
	end_ns         INTEGER NOT NULL,
	status         TEXT    NOT NULL, -- ok, error or unset
	status_message TEXT    NOT NULL,
	attributes     TEXT    NOT NULL,
	events         TEXT    NOT NULL,
	agent          TEXT,             -- lush.agent, on root rows only
	principal      TEXT,             -- lush.principal, on root rows only
	UNIQUE (trace_id, span_id)
) STRICT;
CREATE INDEX spans_roots_by_start ON spans (start_ns) WHERE root = 1;
CREATE INDEX spans_roots_by_agent ON spans (agent, start_ns) WHERE root = 1;
CREATE INDEX spans_roots_by_principal ON spans (principal, start_ns) WHERE root = 1;
CREATE INDEX spans_by_end ON spans (end_ns);`,
}

// spanColumns are the columns scanSpan reads, in its order.
const spanColumns = `trace_id, span_id, parent, root, name, kind, start_ns, end_ns, status, status_message, attributes, events`

const insertSpan = `INSERT OR REPLACE INTO spans (` + spanColumns + `, agent, principal)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// busyTimeout is how long a statement waits for another connection's (or process's) write
// lock before failing.
const busyTimeout = 5 * time.Second

// SQLite is a Store kept in an SQLite database file, for `lushctl serve` (TRACE_BACKEND=sqlite).
// The database runs in WAL mode: queries do not wait for exports, and exports wait for each other
// (each ExportSpans call is one transaction). It keeps everything until Retain deletes it. It is
// safe for concurrent use.
type SQLite struct {
	path string
	w    *sql.DB // one connection: exports, Retain and schema changes
	r    *sql.DB // read-only connections: List and Get

	closeOnce sync.Once
	closeErr  error
}

var _ Store = (*SQLite)(nil)

// OpenSQLite opens the trace database at path, creating it (readable by its owner only: spans
// may carry tool inputs), its parent directories and its schema if needed. Close releases it.
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	if path == "" {
		return nil, errors.New("open trace store: path is empty")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("open trace store: %w", err)
	}
	// Create the file ourselves to choose its mode; SQLite's -wal and -shm files copy it.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open trace store: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("open trace store: %w", err)
	}

	wp := url.Values{}
	wp.Set("_txlock", "immediate") // take the write lock at BEGIN, not halfway through
	wp.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	wp.Add("_pragma", "journal_mode(WAL)")
	wp.Add("_pragma", "synchronous(normal)")
	wp.Add("_pragma", "temp_store(memory)")
	w, err := openDB(path, wp)
	if err != nil {
		return nil, err
	}
	// One writer: concurrent exports queue in database/sql (honouring their contexts) instead of
	// contending for SQLite's lock.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("open trace store %s: %w", path, err)
	}

	rp := url.Values{}
	rp.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	rp.Add("_pragma", "query_only(1)")
	r, err := openDB(path, rp)
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	return &SQLite{path: path, w: w, r: r}, nil
}

// openDB opens the SQLite database at path with params. The path is escaped in the URI, so '?'
// and '#' in a directory name cannot smuggle in parameters.
func openDB(path string, params url.Values) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open trace store: %w", err)
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), OmitHost: true, RawQuery: params.Encode()}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, fmt.Errorf("open trace store %s: %w", path, err)
	}
	return db, nil
}

// migrate brings the database to schemaVersion in one transaction.
func migrate(ctx context.Context, db *sql.DB) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v > schemaVersion {
		return fmt.Errorf("schema version %d is newer than this program supports (%d): upgrade lushctl", v, schemaVersion)
	}
	for ; v < schemaVersion; v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrate schema to version %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
			return fmt.Errorf("migrate schema to version %d: %w", v+1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	return nil
}

// Path returns the database file's path.
func (s *SQLite) Path() string { return s.path }

// ExportSpans stores spans in one transaction: all of them or, on error, none. A span stored
// again (same trace and span id) replaces the earlier copy.
func (s *SQLite) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) (err error) {
	if len(spans) == 0 {
		return nil
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("export %d spans to %s: %w", len(spans), s.path, err)
		}
	}()
	rows := make([][]any, len(spans))
	for i, sp := range spans {
		r := fromSDK(sp)
		if rows[i], err = insertArgs(&r); err != nil {
			return fmt.Errorf("span %s of trace %s: %w", r.SpanID, r.TraceID, err)
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, insertSpan)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, args := range rows {
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("span %s of trace %s: %w", args[1], args[0], err)
		}
	}
	return tx.Commit()
}

// insertArgs returns the arguments of insertSpan for r.
func insertArgs(r *record) ([]any, error) {
	attrs, err := encodeAttributes(r.Attributes)
	if err != nil {
		return nil, err
	}
	events, err := encodeEvents(r.Events)
	if err != nil {
		return nil, err
	}
	var root int64
	var agent, principal any // NULL but on root rows
	if r.root {
		root = 1
		agent, principal = stringAttr(r.Attributes, AttrAgent), stringAttr(r.Attributes, AttrPrincipal)
	}
	return []any{r.TraceID, r.SpanID, r.ParentSpanID, root, r.Name, r.Kind, unixNano(r.Start), unixNano(r.End),
		r.Status, r.StatusMessage, attrs, events, agent, principal}, nil
}

// Shutdown does nothing: the store goes on accepting spans and answering queries until Close
// (see Store).
func (s *SQLite) Shutdown(context.Context) error { return nil }

// List returns the summaries of the traces that match f, newest first (see Store).
func (s *SQLite) List(ctx context.Context, f Filter) ([]Trace, error) {
	// The candidates are root rows (served by a partial index); a trace with more than one (an
	// invocation called from elsewhere that called itself from elsewhere) is listed by its
	// earliest, as rootIndex chooses.
	conds, args := []string{"s.root = 1"}, []any{}
	if f.Agent != "" {
		conds, args = append(conds, "s.agent = ?"), append(args, f.Agent)
	}
	if f.Principal != "" {
		conds, args = append(conds, "s.principal = ?"), append(args, f.Principal)
	}
	if !f.Since.IsZero() {
		conds, args = append(conds, "s.start_ns >= ?"), append(args, unixNano(f.Since))
	}
	q := `SELECT ` + prefixColumns("s.") + `, (SELECT count(*) FROM spans c WHERE c.trace_id = s.trace_id)
FROM spans s
WHERE ` + strings.Join(conds, " AND ") + `
	AND NOT EXISTS (SELECT 1 FROM spans e WHERE e.trace_id = s.trace_id AND e.root = 1
		AND (e.start_ns < s.start_ns OR e.start_ns = s.start_ns AND e.span_id < s.span_id))
ORDER BY s.start_ns DESC, s.trace_id DESC
LIMIT ?`
	args = append(args, f.limit())
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list traces in %s: %w", s.path, err)
	}
	defer rows.Close()
	var out []Trace
	for rows.Next() {
		var (
			root  record
			count int
		)
		if err := scanSpan(rows, &root, &count); err != nil {
			return nil, fmt.Errorf("list traces in %s: %w", s.path, err)
		}
		out = append(out, summarize(&root.Span, count))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list traces in %s: %w", s.path, err)
	}
	return out, nil
}

// Get returns the trace with every span the store holds for it (see Store).
func (s *SQLite) Get(ctx context.Context, traceID string) (*Trace, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+spanColumns+` FROM spans WHERE trace_id = ? ORDER BY start_ns, span_id`, traceID)
	if err != nil {
		return nil, fmt.Errorf("get trace %s from %s: %w", traceID, s.path, err)
	}
	defer rows.Close()
	var rs []record
	for rows.Next() {
		var r record
		if err := scanSpan(rows, &r); err != nil {
			return nil, fmt.Errorf("get trace %s from %s: %w", traceID, s.path, err)
		}
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get trace %s from %s: %w", traceID, s.path, err)
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("get trace %s: %w", traceID, ErrNotFound)
	}
	return assemble(rs), nil
}

// Retain deletes every trace whose spans all ended before olderThan. It never deletes part of a
// trace, and it deletes the remains of traces whose root never arrived (an agent that crashed
// mid-invocation) as well.
func (s *SQLite) Retain(ctx context.Context, olderThan time.Time) error {
	cutoff := unixNano(olderThan)
	// The old spans are found by spans_by_end; each one's trace is checked for a newer span by
	// its (trace_id, span_id) index.
	_, err := s.w.ExecContext(ctx, `DELETE FROM spans WHERE trace_id IN (
	SELECT o.trace_id FROM spans o WHERE o.end_ns < ?
		AND NOT EXISTS (SELECT 1 FROM spans n WHERE n.trace_id = o.trace_id AND n.end_ns >= ?))`, cutoff, cutoff)
	if err != nil {
		return fmt.Errorf("delete traces older than %s from %s: %w", olderThan.Format(time.RFC3339), s.path, err)
	}
	return nil
}

// Close closes the database; ExportSpans, List, Get and Retain fail afterwards. It is safe to
// call more than once.
func (s *SQLite) Close() error {
	s.closeOnce.Do(func() {
		if err := errors.Join(s.w.Close(), s.r.Close()); err != nil {
			s.closeErr = fmt.Errorf("close trace store %s: %w", s.path, err)
		}
	})
	return s.closeErr
}

// scanSpan reads the spanColumns of the current row into r, and any further columns into
// extra.
func scanSpan(rows *sql.Rows, r *record, extra ...any) error {
	var (
		root             int64
		startNS, endNS   int64
		attrs, eventsRaw string
	)
	dest := append([]any{&r.TraceID, &r.SpanID, &r.ParentSpanID, &root, &r.Name, &r.Kind, &startNS, &endNS,
		&r.Status, &r.StatusMessage, &attrs, &eventsRaw}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	r.root = root == 1
	r.Start, r.End = time.Unix(0, startNS).UTC(), time.Unix(0, endNS).UTC()
	r.DurationMS = durationMS(r.Start, r.End)
	var err error
	if r.Attributes, err = decodeAttributes(attrs); err != nil {
		return fmt.Errorf("span %s: attributes: %w", r.SpanID, err)
	}
	if r.Events, err = decodeEvents(eventsRaw); err != nil {
		return fmt.Errorf("span %s: events: %w", r.SpanID, err)
	}
	return nil
}

// prefixColumns returns spanColumns with each column qualified by prefix.
func prefixColumns(prefix string) string {
	cols := strings.Split(spanColumns, ", ")
	for i, c := range cols {
		cols[i] = prefix + c
	}
	return strings.Join(cols, ", ")
}

// unixNano returns t in Unix nanoseconds, clamped to what an int64 holds (years 1678 to 2262).
func unixNano(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}
