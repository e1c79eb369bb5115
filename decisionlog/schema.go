package decisionlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// schemaVersion is the PRAGMA user_version of the newest schema; migrations[i] upgrades a
// database from version i to i+1.
const schemaVersion = 2

// migrations create and upgrade the schema. Every index costs each commit a page write, so only the columns that queries usually lead
// with are indexed: time, principal, agent and tool. Outcome and revision filters narrow those
// (or scan, on a log without other filters).
var migrations = []string{
	// 0 -> 1: events and completions, append-only.
	`CREATE TABLE events (
	seq         INTEGER PRIMARY KEY,
	decision_id TEXT    NOT NULL UNIQUE,
	ts          INTEGER NOT NULL,
	revision    TEXT    NOT NULL,
	point       TEXT    NOT NULL,
	principal   TEXT    NOT NULL,
	agent       TEXT    NOT NULL,
	action      TEXT    NOT NULL,
	tool        TEXT    NOT NULL,
	tool_name   TEXT    NOT NULL,
	access      TEXT    NOT NULL,
	risk        TEXT    NOT NULL,
	outcome     TEXT    NOT NULL,
	latency_ns  INTEGER NOT NULL,
	trace_id    TEXT    NOT NULL,
	event       TEXT    NOT NULL
) STRICT;
CREATE INDEX events_ts        ON events(ts);
CREATE INDEX events_principal ON events(principal);
CREATE INDEX events_agent     ON events(agent);
CREATE INDEX events_tool      ON events(tool);
CREATE TABLE completions (
	decision_id TEXT    PRIMARY KEY REFERENCES events(decision_id),
	ts          INTEGER NOT NULL,
	status      TEXT    NOT NULL,
	latency_ns  INTEGER NOT NULL,
	response    TEXT,
	error       TEXT
) STRICT, WITHOUT ROWID;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only'); END;
CREATE TRIGGER completions_no_update BEFORE UPDATE ON completions
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only'); END;
CREATE TRIGGER completions_no_delete BEFORE DELETE ON completions
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only'); END;`,
	// 1 -> 2: token counts of agent invocations (agentd's agent/invoke completions).
	`ALTER TABLE completions ADD COLUMN tokens_input INTEGER;
ALTER TABLE completions ADD COLUMN tokens_output INTEGER;`,
}

// openDB opens the SQLite database at path with params. The path is escaped in the URI, so '?'
// and '#' in a directory name cannot smuggle in parameters.
func openDB(path string, params url.Values) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), OmitHost: true, RawQuery: params.Encode()}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, fmt.Errorf("open decision log %s: %w", path, err)
	}
	return db, nil
}

// migrate brings the database to schemaVersion inside one immediate transaction.
func migrate(ctx context.Context, conn *sql.Conn) (err error) {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	var v int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return err
	}
	if v > schemaVersion {
		return fmt.Errorf("schema version %d is newer than this program supports (%d): upgrade lushctl", v, schemaVersion)
	}
	for ; v < schemaVersion; v++ {
		if _, err := conn.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrate schema to version %d: %w", v+1, err)
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
			return err
		}
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err
}

// isConstraint reports whether err is a SQLite constraint violation, which aborts only the
// statement (the transaction and the rest of the batch go on), and which one.
func isConstraint(err error) (code int, ok bool) {
	var se interface{ Code() int }
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT {
		return se.Code(), true
	}
	return 0, false
}
