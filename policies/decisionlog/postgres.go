package decisionlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// The PostgreSQL store: the decision log shared by gateway replicas. Its tables are SQLite's
// (schema version 4), in their own PostgreSQL schema, lush_decisionlog, so that the log can
// share a database with other stores (the scheduler's). Each replica writes its own chain
// partition (its host name unless Partition says otherwise); writers of one partition take
// turns on its partitions row (SELECT … FOR UPDATE). Events get their seq from a sequence, so
// seq is the insertion order, not the commit order, across replicas.

// pgSchema is the PostgreSQL schema holding the log's tables.
const pgSchema = "lush_decisionlog"

// pgLock is the advisory lock that serializes creating the schema (replicas start together).
const pgLock = 0x6c7573685f646c // "lush_dl"

const pgTables = `
CREATE TABLE lush_decisionlog.events (
	seq         BIGSERIAL PRIMARY KEY,
	decision_id TEXT COLLATE "C" NOT NULL UNIQUE, -- C: prefix queries compare bytes, as in SQLite
	ts          BIGINT NOT NULL,
	revision    TEXT COLLATE "C" NOT NULL,
	point       TEXT   NOT NULL,
	principal   TEXT   NOT NULL,
	agent       TEXT   NOT NULL,
	action      TEXT   NOT NULL,
	tool        TEXT   NOT NULL,
	tool_name   TEXT   NOT NULL,
	access      TEXT   NOT NULL,
	risk        TEXT   NOT NULL,
	outcome     TEXT   NOT NULL,
	latency_ns  BIGINT NOT NULL,
	trace_id    TEXT   NOT NULL,
	event       TEXT   NOT NULL, -- the document as hashed: TEXT, not JSONB, which would reformat it
	part        TEXT   NOT NULL,
	pos         BIGINT NOT NULL,
	hash        BYTEA  NOT NULL,
	UNIQUE (part, pos)
);
CREATE INDEX events_ts        ON lush_decisionlog.events(ts);
CREATE INDEX events_principal ON lush_decisionlog.events(principal);
CREATE INDEX events_agent     ON lush_decisionlog.events(agent);
CREATE INDEX events_tool      ON lush_decisionlog.events(tool);
CREATE TABLE lush_decisionlog.completions (
	decision_id   TEXT   PRIMARY KEY,
	ts            BIGINT NOT NULL,
	status        TEXT   NOT NULL,
	latency_ns    BIGINT NOT NULL,
	response      TEXT,
	error         TEXT,
	tokens_input  BIGINT,
	tokens_output BIGINT,
	part          TEXT   NOT NULL,
	pos           BIGINT NOT NULL,
	hash          BYTEA  NOT NULL,
	UNIQUE (part, pos)
);
CREATE TABLE lush_decisionlog.markers (
	part TEXT   NOT NULL,
	pos  BIGINT NOT NULL,
	kind TEXT   NOT NULL,
	ts   BIGINT NOT NULL,
	body TEXT   NOT NULL,
	hash BYTEA  NOT NULL,
	PRIMARY KEY (part, pos)
);
CREATE TABLE lush_decisionlog.checkpoints (
	part       TEXT   NOT NULL,
	pos        BIGINT NOT NULL,
	hash       BYTEA  NOT NULL,
	ts         BIGINT NOT NULL,
	key_id     TEXT   NOT NULL,
	public_key TEXT   NOT NULL,
	signature  TEXT   NOT NULL,
	PRIMARY KEY (part, pos)
);
CREATE TABLE lush_decisionlog.partitions (
	part  TEXT   PRIMARY KEY,
	floor BIGINT NOT NULL
);
-- Append-only: no UPDATE; DELETE only below the partition's floor (retention, recorded in the chain).
CREATE FUNCTION lush_decisionlog.append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' AND TG_TABLE_NAME <> 'checkpoints' AND OLD.pos < coalesce(
		(SELECT floor FROM lush_decisionlog.partitions WHERE part = OLD.part), 1) THEN
		RETURN OLD;
	END IF;
	RAISE EXCEPTION 'the decision log is append-only (retention deletes whole expired segments)';
END $$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON lush_decisionlog.events
	FOR EACH ROW EXECUTE FUNCTION lush_decisionlog.append_only();
CREATE TRIGGER completions_append_only BEFORE UPDATE OR DELETE ON lush_decisionlog.completions
	FOR EACH ROW EXECUTE FUNCTION lush_decisionlog.append_only();
CREATE TRIGGER markers_append_only BEFORE UPDATE OR DELETE ON lush_decisionlog.markers
	FOR EACH ROW EXECUTE FUNCTION lush_decisionlog.append_only();
CREATE TRIGGER checkpoints_append_only BEFORE UPDATE OR DELETE ON lush_decisionlog.checkpoints
	FOR EACH ROW EXECUTE FUNCTION lush_decisionlog.append_only();
`

// pgV4 upgrades the tables of schema version 3 (pgTables) to 4: approvals and budget usage,
// as in SQLite.
const pgV4 = `CREATE TABLE lush_decisionlog.approvals (` + approvalsColumns + `);
CREATE INDEX approvals_status ON lush_decisionlog.approvals(status, created);
CREATE INDEX approvals_digest ON lush_decisionlog.approvals(digest, status);
CREATE TABLE lush_decisionlog.budget_usage (` + budgetUsageColumns + `);`

// pgDSN parses a postgres:// URL, returns it with search_path set to the log's schema, and
// where it is for messages (without password or parameters).
func pgDSN(location string) (dsn, where string, err error) {
	u, err := url.Parse(location)
	if err != nil || u.Host == "" {
		return "", "", errors.New("open decision log: the PostgreSQL URL does not parse (postgres://user:password@host:5432/db)")
	}
	where = (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	if u.User != nil {
		where = (&url.URL{Scheme: u.Scheme, User: url.User(u.User.Username()), Host: u.Host, Path: u.Path}).String()
	}
	q := u.Query()
	q.Set("search_path", pgSchema)
	u.RawQuery = q.Encode()
	return u.String(), where, nil
}

// openPostgresDB opens a connection pool of at most conns connections to the log at location
// and returns it with where the log is, for messages.
func openPostgresDB(location string, conns int) (*sql.DB, string, error) {
	dsn, where, err := pgDSN(location)
	if err != nil {
		return nil, "", err
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, "", fmt.Errorf("open decision log %s: %w", where, err)
	}
	db.SetMaxOpenConns(conns)
	return db, where, nil
}

func openPostgres(ctx context.Context, location string, cfg config) (*Log, error) {
	db, where, err := openPostgresDB(location, 1) // the writer's connection
	if err != nil {
		return nil, err
	}
	w, err := newWriter(ctx, db, postgresDialect, &cfg)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open decision log %s: %w", where, err)
	}
	reader, err := OpenReader(location)
	if err != nil {
		w.close()
		db.Close()
		return nil, err
	}
	l := start(cfg, where, db, reader, w)
	close(l.ckptDone) // no WAL to checkpoint
	return l, nil
}

// createPostgres creates the log's schema unless it exists.
func createPostgres(ctx context.Context, conn *sql.Conn) error {
	return inTx(ctx, conn, "BEGIN", func() error { return createPostgresInTx(ctx, conn) })
}

func createPostgresInTx(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d);
CREATE SCHEMA IF NOT EXISTS %s;
CREATE TABLE IF NOT EXISTS %[2]s.schema_version (version INTEGER NOT NULL)`, pgLock, pgSchema)); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	var v sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT max(version) FROM lush_decisionlog.schema_version").Scan(&v); err != nil {
		return err
	}
	switch {
	case v.Int64 > schemaVersion:
		return fmt.Errorf("schema version %d is newer than this program supports (%d): upgrade lushctl", v.Int64, schemaVersion)
	case !v.Valid:
		if _, err := conn.ExecContext(ctx, pgTables); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
		v.Int64 = 3
		fallthrough
	case v.Int64 == 3:
		if _, err := conn.ExecContext(ctx, pgV4); err != nil {
			return fmt.Errorf("migrate schema to version 4: %w", err)
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("INSERT INTO lush_decisionlog.schema_version VALUES (%d)", schemaVersion)); err != nil {
			return err
		}
	}
	return nil
}

func openPostgresReader(location string) (*Reader, error) {
	db, where, err := openPostgresDB(location, 8)
	if err != nil {
		return nil, err
	}
	var v sql.NullInt64
	if err := db.QueryRow("SELECT max(version) FROM lush_decisionlog.schema_version").Scan(&v); err != nil || !v.Valid {
		db.Close()
		if err == nil {
			err = errors.New("no schema version")
		}
		return nil, fmt.Errorf("open decision log %s: not a decision log (a gateway with decision_log set to this URL creates it): %w", where, err)
	}
	if v.Int64 > schemaVersion {
		db.Close()
		return nil, fmt.Errorf("open decision log %s: schema version %d is newer than this program supports (%d): upgrade lushctl", where, v.Int64, schemaVersion)
	}
	return &Reader{path: where, db: db, d: postgresDialect}, nil
}
