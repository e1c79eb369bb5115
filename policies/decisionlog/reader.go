package decisionlog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/lush-agents/lush/policies/authz"
)

// Query limits.
const (
	DefaultLimit = 100
	MaxLimit     = 10000
)

// Filter selects events. Empty fields match everything; all set fields must match.
type Filter struct {
	Since, Until time.Time // Since <= timestamp < Until
	Principal    string
	Agent        string
	Tool         string // tool reference, exact
	ToolName     string
	Outcome      string
	DecisionID   string // exact, or a prefix (as `lushctl audit` prints it short)
	Revision     string // exact, or a prefix (as lushctl prints hashes short)
	Action       string
	Access       string // read or write
	Group        string // the principal, or any member of this group (group:<name>) at the time
	Text         string // text that appears in the logged arguments
	AfterSeq     int64  // only events with a greater seq (for tailing)
	BeforeSeq    int64  // only events with a smaller seq (for paging back)
	Limit        int    // default DefaultLimit, at most MaxLimit
	Oldest       bool   // oldest first; the default is newest first (by seq, i.e. commit order)
}

// Record is one logged decision with its completion, if any.
type Record struct {
	Seq        int64       `json:"seq"`
	Event      Event       `json:"event"`
	Completion *Completion `json:"completion,omitempty"`
}

// Reader reads a decision log, also while another process writes it (WAL readers do not block
// the writer, nor it them). It is safe for concurrent use.
type Reader struct {
	path string // the file, or the PostgreSQL URL without its password
	db   *sql.DB
	d    *dialect
}

// OpenReader opens the decision log at path (a SQLite file or a postgres:// URL) read-only. A missing file is an error wrapping
// fs.ErrNotExist that names the path; so is a file that is not a decision log.
func OpenReader(path string) (*Reader, error) {
	if IsPostgres(path) {
		return openPostgresReader(path)
	}
	info, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open decision log: %s does not exist: %w", path, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	if info.IsDir() {
		return nil, fmt.Errorf("open decision log: %s is a directory", path)
	}
	params := url.Values{}
	params.Set("mode", "ro")
	params.Add("_pragma", "busy_timeout(5000)")
	params.Add("_pragma", "query_only(1)")
	db, err := openDB(path, params)
	if err != nil {
		return nil, err
	}
	db.SetMaxIdleConns(2)
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		db.Close()
		return nil, fmt.Errorf("open decision log %s: %w", path, err)
	}
	if v == 0 {
		db.Close()
		return nil, fmt.Errorf("open decision log %s: not a decision log (no schema)", path)
	}
	if v > schemaVersion {
		db.Close()
		return nil, fmt.Errorf("open decision log %s: schema version %d is newer than this program supports (%d): upgrade lushctl", path, v, schemaVersion)
	}
	return &Reader{path: path, db: db, d: sqliteDialect}, nil
}

// Path returns the database file's path.
func (r *Reader) Path() string { return r.path }

// Close closes the reader.
func (r *Reader) Close() error { return r.db.Close() }

// Query returns the events f selects, each with its completion, in seq order (newest first
// unless f.Oldest).
func (r *Reader) Query(ctx context.Context, f Filter) ([]Record, error) {
	q, args, err := f.sql(r.d)
	if err != nil {
		return nil, fmt.Errorf("query decision log: %w", err)
	}
	rows, err := r.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("query decision log %s: %w", r.path, err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var (
			rec                  Record
			event                string
			cts, clat, tin, tout sql.NullInt64
			cstatus, cresp, cer  sql.NullString
		)
		if err := rows.Scan(&rec.Seq, &event, &cts, &cstatus, &clat, &cresp, &cer, &tin, &tout); err != nil {
			return nil, fmt.Errorf("query decision log %s: %w", r.path, err)
		}
		if err := json.Unmarshal([]byte(event), &rec.Event); err != nil {
			return nil, fmt.Errorf("query decision log %s: event %d: %w", r.path, rec.Seq, err)
		}
		if cstatus.Valid {
			c := &Completion{DecisionID: rec.Event.DecisionID, Timestamp: time.Unix(0, cts.Int64).UTC(),
				Status: cstatus.String, LatencyNS: clat.Int64, Error: cer.String, TokensInput: tin.Int64, TokensOutput: tout.Int64}
			if cresp.Valid {
				c.Response = json.RawMessage(cresp.String)
			}
			rec.Completion = c
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query decision log %s: %w", r.path, err)
	}
	return out, nil
}

// sql builds the query for f.
func (f Filter) sql(d *dialect) (string, []any, error) {
	limit := f.Limit
	switch {
	case limit < 0:
		return "", nil, fmt.Errorf("limit must not be negative, not %d", limit)
	case limit == 0:
		limit = DefaultLimit
	case limit > MaxLimit:
		return "", nil, fmt.Errorf("limit must be at most %d, not %d", MaxLimit, limit)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return "", nil, fmt.Errorf("since (%s) must be before until (%s)", f.Since.Format(time.RFC3339), f.Until.Format(time.RFC3339))
	}
	if f.Outcome != "" {
		if err := oneOf("outcome", f.Outcome, authz.Outcomes); err != nil {
			return "", nil, err
		}
	}
	var where []string
	var args []any
	eq := func(col, v string) {
		if v != "" {
			where = append(where, "e."+col+" = ?")
			args = append(args, v)
		}
	}
	prefix := func(col, v string) {
		if v == "" {
			return
		}
		if hi, ok := prefixEnd(v); ok {
			where = append(where, "e."+col+" >= ? AND e."+col+" < ?")
			args = append(args, v, hi)
		} else {
			where = append(where, "e."+col+" >= ?")
			args = append(args, v)
		}
	}
	if !f.Since.IsZero() {
		where = append(where, "e.ts >= ?")
		args = append(args, clampNano(f.Since))
	}
	if !f.Until.IsZero() {
		where = append(where, "e.ts < ?")
		args = append(args, clampNano(f.Until))
	}
	eq("principal", f.Principal)
	eq("agent", f.Agent)
	eq("tool", f.Tool)
	eq("tool_name", f.ToolName)
	eq("outcome", f.Outcome)
	eq("action", f.Action)
	prefix("decision_id", f.DecisionID)
	prefix("revision", f.Revision)
	eq("access", f.Access)
	if f.Group != "" {
		where = append(where, d.groupMember)
		args = append(args, f.Group, f.Group)
	}
	if f.Text != "" {
		where = append(where, d.argumentsContain)
		args = append(args, f.Text)
	}
	if f.AfterSeq > 0 {
		where = append(where, "e.seq > ?")
		args = append(args, f.AfterSeq)
	}
	if f.BeforeSeq > 0 {
		where = append(where, "e.seq < ?")
		args = append(args, f.BeforeSeq)
	}
	var b strings.Builder
	b.WriteString(`SELECT e.seq, e.event, c.ts, c.status, c.latency_ns, c.response, c.error, c.tokens_input, c.tokens_output
FROM events e LEFT JOIN completions c ON c.decision_id = e.decision_id`)
	if len(where) > 0 {
		b.WriteString("\nWHERE ")
		b.WriteString(strings.Join(where, " AND "))
	}
	if f.Oldest {
		b.WriteString("\nORDER BY e.seq ASC")
	} else {
		b.WriteString("\nORDER BY e.seq DESC")
	}
	b.WriteString("\nLIMIT ?")
	args = append(args, limit)
	return d.q(b.String()), args, nil
}

// prefixEnd returns the smallest string greater than every string with prefix p (SQLite compares
// TEXT bytewise), or false if there is none.
func prefixEnd(p string) (string, bool) {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// clampNano converts t to Unix nanoseconds, saturating outside the representable range.
func clampNano(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, -1<<63)):
		return -1 << 63
	case t.After(time.Unix(0, 1<<63-1)):
		return 1<<63 - 1
	}
	return t.UnixNano()
}
