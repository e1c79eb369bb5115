package decisionlog

import (
	"database/sql"
	"strconv"
	"strings"
)

// dialect is what differs between the two stores, SQLite (the embedded default) and PostgreSQL
// (shared by gateway replicas): both have the same tables, columns and chain rules, and every
// statement is written once, with ? placeholders that q rewrites for PostgreSQL.
type dialect struct {
	postgres bool
	begin    string // starts the writer's transaction, taking the write lock at once
	// lockPartition is appended to the SELECT of the partition's row, which every write
	// transaction reads first: replicas writing one partition take turns.
	lockPartition string
	// insertCompletion inserts a completion only when its decision is in the log.
	insertCompletion string
	// groupMember and argumentsContain are Filter clauses over the event document.
	groupMember, argumentsContain string
	// denialReasons joins each event (e) to the reasons of its result (one row per reason
	// object), and reasonRule is a reason's rule id: Summarize counts the rules that deny.
	denialReasons, reasonRule string
	// verifyTx reads Verify's statements from one snapshot.
	verifyTx sql.TxOptions
	// multiRow writes a run of events (or completions) with multi-row statements (appendRun)
	// instead of one statement each: a round trip to the server costs more than the row.
	multiRow bool
}

var sqliteDialect = &dialect{
	begin: "BEGIN IMMEDIATE",
	insertCompletion: `INSERT INTO completions (decision_id, ts, status, latency_ns, response, error, tokens_input, tokens_output,
	part, pos, hash) SELECT ?,?,?,?,?,?,?,?,?,?,? WHERE EXISTS (SELECT 1 FROM events WHERE decision_id = ?)
	ON CONFLICT (decision_id) DO NOTHING`,
	groupMember:      "(e.principal = ? OR EXISTS (SELECT 1 FROM json_each(e.event, '$.groups') WHERE value = ?))",
	argumentsContain: "instr(CAST(json_extract(e.event, '$.input.arguments') AS TEXT), ?) > 0",
	denialReasons:    "events e JOIN json_each(e.event, '$.result.reasons') r ON r.type = 'object'",
	reasonRule:       "json_extract(r.value, '$.rule')",
	verifyTx:         sql.TxOptions{ReadOnly: true},
}

var postgresDialect = &dialect{
	postgres:      true,
	begin:         "BEGIN",
	lockPartition: " FOR UPDATE",
	insertCompletion: `INSERT INTO completions (decision_id, ts, status, latency_ns, response, error, tokens_input, tokens_output,
	part, pos, hash) SELECT ?::text, ?::bigint, ?::text, ?::bigint, ?::text, ?::text, ?::bigint, ?::bigint, ?::text, ?::bigint, ?::bytea
	WHERE EXISTS (SELECT 1 FROM events WHERE decision_id = ?) ON CONFLICT (decision_id) DO NOTHING`,
	groupMember:      "(e.principal = ? OR (e.event::jsonb -> 'groups') @> jsonb_build_array(?::text))",
	argumentsContain: "strpos((e.event::jsonb -> 'input' -> 'arguments')::text, ?) > 0",
	denialReasons: `events e CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(e.event::jsonb -> 'result' -> 'reasons') = 'array'
	THEN e.event::jsonb -> 'result' -> 'reasons' ELSE '[]'::jsonb END) r(value)`,
	reasonRule: "r.value ->> 'rule'",
	verifyTx:   sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead},
	multiRow:   true,
}

// q rewrites a statement's placeholders for the dialect: for PostgreSQL, ? becomes $1, $2, …
// in order and ?N becomes $N.
func (d *dialect) q(stmt string) string {
	if !d.postgres {
		return stmt
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(stmt); i++ {
		if stmt[i] != '?' {
			b.WriteByte(stmt[i])
			continue
		}
		j := i + 1
		for j < len(stmt) && stmt[j] >= '0' && stmt[j] <= '9' {
			j++
		}
		b.WriteByte('$')
		if j > i+1 {
			b.WriteString(stmt[i+1 : j])
		} else {
			n++
			b.WriteString(strconv.Itoa(n))
		}
		i = j - 1
	}
	return b.String()
}
