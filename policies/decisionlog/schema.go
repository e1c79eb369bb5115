package decisionlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// schemaVersion is the PRAGMA user_version of the newest schema; migrations[i] upgrades a
// database from version i to i+1.
const schemaVersion = 4

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
	// 2 -> 3: the hash chain (chain.go). Events and completions get their partition, position
	// and hash (backfilled by chainExisting); completions lose their foreign key, so that
	// retention can delete an event whose completion is in a later segment; retention records,
	// checkpoints and partitions (each one's floor) get tables. Rows below a partition's floor may be
	// deleted (by retention, which records it in the chain); nothing else may.
	`DROP TRIGGER events_no_update;
DROP TRIGGER events_no_delete;
ALTER TABLE events ADD COLUMN part TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN pos  INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN hash BLOB NOT NULL DEFAULT x'';
CREATE TABLE completions_v3 (
	decision_id   TEXT    PRIMARY KEY,
	ts            INTEGER NOT NULL,
	status        TEXT    NOT NULL,
	latency_ns    INTEGER NOT NULL,
	response      TEXT,
	error         TEXT,
	tokens_input  INTEGER,
	tokens_output INTEGER,
	part          TEXT    NOT NULL,
	pos           INTEGER NOT NULL,
	hash          BLOB    NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO completions_v3 SELECT decision_id, ts, status, latency_ns, response, error, tokens_input, tokens_output, '', 0, x''
	FROM completions;
DROP TABLE completions;
ALTER TABLE completions_v3 RENAME TO completions;
CREATE TABLE markers (
	part TEXT    NOT NULL,
	pos  INTEGER NOT NULL,
	kind TEXT    NOT NULL,
	ts   INTEGER NOT NULL,
	body TEXT    NOT NULL,
	hash BLOB    NOT NULL,
	PRIMARY KEY (part, pos)
) STRICT, WITHOUT ROWID;
CREATE TABLE checkpoints (
	part       TEXT    NOT NULL,
	pos        INTEGER NOT NULL,
	hash       BLOB    NOT NULL,
	ts         INTEGER NOT NULL,
	key_id     TEXT    NOT NULL,
	public_key TEXT    NOT NULL,
	signature  TEXT    NOT NULL,
	PRIMARY KEY (part, pos)
) STRICT, WITHOUT ROWID;
CREATE TABLE partitions (
	part  TEXT    PRIMARY KEY,
	floor INTEGER NOT NULL
) STRICT, WITHOUT ROWID;`,
	// 3 -> 4: state that changes, kept beside the log: approvals (approvals.go) and budget usage
	// (budgets). Not chained: what happened to them is in the chained events (each approval,
	// denial, expiry and top-up is a decision).
	`CREATE TABLE approvals (` + sqliteColumns(approvalsColumns) + `) STRICT, WITHOUT ROWID;
CREATE INDEX approvals_status ON approvals(status, created);
CREATE INDEX approvals_digest ON approvals(digest, status);
CREATE TABLE budget_usage (` + sqliteColumns(budgetUsageColumns) + `) STRICT, WITHOUT ROWID;`,
}

// sqliteColumns is a column list written for PostgreSQL with SQLite's STRICT type names.
func sqliteColumns(cols string) string { return strings.ReplaceAll(cols, "BIGINT", "INTEGER") }

// approvalsColumns are the approvals table's, the same in SQLite and PostgreSQL: one row per
// call that waited (or waits) for a person's approval.
const approvalsColumns = `
	id         TEXT    PRIMARY KEY, -- the approval_required decision's id
	created    BIGINT  NOT NULL,    -- unix ns
	expires    BIGINT  NOT NULL,    -- unix ns: pending until then
	digest     TEXT    NOT NULL,    -- the call (CallDigest): tool, name, arguments, principal, agent
	principal  TEXT    NOT NULL,
	agent      TEXT    NOT NULL,
	tool       TEXT    NOT NULL,
	tool_name  TEXT    NOT NULL,
	reasons    TEXT    NOT NULL,    -- JSON: the policy's approval reasons
	status     TEXT    NOT NULL,    -- pending, approved, denied, expired, consumed
	decided_by TEXT    NOT NULL,    -- who approved or denied ('' while pending)
	decided_at BIGINT  NOT NULL,    -- unix ns (0 while pending)
	note       TEXT    NOT NULL,    -- the approver's reason
	decision   TEXT    NOT NULL,    -- the id of the approval/decide decision
	used_by    TEXT    NOT NULL     -- the id of the decision whose call ran under the approval
`

// budgetUsageColumns are the budget_usage table's: units used of a budget by one subject in
// one period, and the units top-ups added to it.
const budgetUsageColumns = `
	budget  TEXT   NOT NULL, -- the budget's name (lush.yaml budgets)
	subject TEXT   NOT NULL, -- whose: an agent or principal id
	period  BIGINT NOT NULL, -- the period's start, unix seconds (UTC)
	used    BIGINT NOT NULL, -- units used: tokens, tool calls or credits
	granted BIGINT NOT NULL, -- units added by top-ups in this period
	updated BIGINT NOT NULL, -- unix ns of the last change
	PRIMARY KEY (budget, subject, period)
`

// chainTriggers finish schema version 3 once existing rows are chained: the chain's unique
// positions, and the append-only rules (deleting is allowed below a partition's floor only).
const chainTriggers = `CREATE UNIQUE INDEX events_chain ON events(part, pos);
CREATE UNIQUE INDEX completions_chain ON completions(part, pos);
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
	WHEN old.pos >= coalesce((SELECT floor FROM partitions WHERE part = old.part), 1)
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only (retention deletes whole expired segments)'); END;
CREATE TRIGGER completions_no_update BEFORE UPDATE ON completions
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only'); END;
CREATE TRIGGER completions_no_delete BEFORE DELETE ON completions
	WHEN old.pos >= coalesce((SELECT floor FROM partitions WHERE part = old.part), 1)
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only (retention deletes whole expired segments)'); END;
CREATE TRIGGER markers_no_update BEFORE UPDATE ON markers
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only'); END;
CREATE TRIGGER markers_no_delete BEFORE DELETE ON markers
	WHEN old.pos >= coalesce((SELECT floor FROM partitions WHERE part = old.part), 1)
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only (retention deletes whole expired segments)'); END;
CREATE TRIGGER checkpoints_no_update BEFORE UPDATE ON checkpoints
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only'); END;
CREATE TRIGGER checkpoints_no_delete BEFORE DELETE ON checkpoints
	BEGIN SELECT RAISE(ABORT, 'the decision log is append-only'); END;`

// chainExisting chains the rows a version-2 log already holds, in partition DefaultPartition:
// events in seq order, then completions in time order.
func chainExisting(ctx context.Context, conn *sql.Conn) error {
	type link struct {
		key  any // seq or decision_id
		pos  int64
		hash []byte
	}
	var events, completions []link
	prev, pos := genesis, int64(0)
	rows, err := conn.QueryContext(ctx, "SELECT seq, decision_id, ts, event FROM events ORDER BY seq")
	if err != nil {
		return err
	}
	for rows.Next() {
		var seq, ts int64
		var id, event string
		if err := rows.Scan(&seq, &id, &ts, &event); err != nil {
			rows.Close()
			return err
		}
		pos++
		prev = chainHash(prev, eventEntry(DefaultPartition, pos, id, ts, event))
		events = append(events, link{seq, pos, prev})
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	rows, err = conn.QueryContext(ctx, `SELECT decision_id, ts, status, latency_ns, response, error, tokens_input, tokens_output
	FROM completions ORDER BY ts, decision_id`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var c completionRow
		if err := rows.Scan(&c.id, &c.ts, &c.status, &c.latency, &c.response, &c.err, &c.tokensIn, &c.tokensOut); err != nil {
			rows.Close()
			return err
		}
		pos++
		prev = chainHash(prev, c.entry(DefaultPartition, pos))
		completions = append(completions, link{c.id, pos, prev})
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, l := range events {
		if _, err := conn.ExecContext(ctx, "UPDATE events SET part = ?, pos = ?, hash = ? WHERE seq = ?", DefaultPartition, l.pos, l.hash, l.key); err != nil {
			return err
		}
	}
	for _, l := range completions {
		if _, err := conn.ExecContext(ctx, "UPDATE completions SET part = ?, pos = ?, hash = ? WHERE decision_id = ?", DefaultPartition, l.pos, l.hash, l.key); err != nil {
			return err
		}
	}
	_, err = conn.ExecContext(ctx, chainTriggers)
	return err
}

// completionRow is a completion as stored.
type completionRow struct {
	id, status          string
	ts, latency         int64
	response, err       sql.NullString
	tokensIn, tokensOut sql.NullInt64
}

// entry encodes the row for the chain.
func (c *completionRow) entry(part string, pos int64) []byte {
	return completionEntry(part, pos, c.id, c.ts, c.status, c.latency, nullString(c.response), nullString(c.err),
		nullInt(c.tokensIn), nullInt(c.tokensOut))
}

func nullString(s sql.NullString) any {
	if !s.Valid {
		return nil
	}
	return s.String
}

func nullInt(n sql.NullInt64) any {
	if !n.Valid {
		return nil
	}
	return n.Int64
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

// inTx runs fn in a transaction that begin starts on conn: committed when fn succeeds, rolled
// back otherwise.
func inTx(ctx context.Context, conn *sql.Conn, begin string, fn func() error) error {
	if _, err := conn.ExecContext(ctx, begin); err != nil {
		return err
	}
	err := fn()
	if err == nil {
		_, err = conn.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
	}
	return err
}

// migrate brings the database to schemaVersion inside one immediate transaction.
func migrate(ctx context.Context, conn *sql.Conn) error {
	return inTx(ctx, conn, "BEGIN IMMEDIATE", func() error { return migrateInTx(ctx, conn) })
}

func migrateInTx(ctx context.Context, conn *sql.Conn) error {
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
		if v+1 == 3 {
			if err := chainExisting(ctx, conn); err != nil {
				return fmt.Errorf("migrate schema to version 3: chain the existing entries: %w", err)
			}
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
			return err
		}
	}
	return nil
}
