package decisionlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lush-agents/lush/policies/authz"
)

// Bounds of a summary: how many time buckets it counts and how long its top lists are.
const (
	MaxSummaryBuckets   = 500
	MaxSummaryTop       = 50
	DefaultSummaryTop   = 10
	maxSummaryRevisions = 100
)

// SummaryFilter selects the window a summary counts: Since <= timestamp < Until, in buckets of
// Bucket, with top lists of Top entries.
type SummaryFilter struct {
	Since, Until time.Time
	Bucket       time.Duration
	Top          int // DefaultSummaryTop when zero, at most MaxSummaryTop
}

// Summary counts the decisions of a window, all by the store (GROUP BY), for the console's
// overview.
type Summary struct {
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	Bucket string    `json:"bucket"` // a Go duration
	// Buckets are the window's buckets, oldest first, each with its count per outcome (every one
	// of authz.Outcomes is present, zero or not).
	Buckets []SummaryBucket `json:"buckets"`
	// Totals counts the window's decisions per outcome (the buckets' sums).
	Totals map[string]int64 `json:"totals"`
	// LiveWrites counts the allowed writes that ran for real (outcome allow, access write).
	LiveWrites int64 `json:"live_writes"`
	// The most denied tools ("<ref> (<tool name>)"), principals and rules (the rules of the
	// denials' reasons), most first.
	TopDeniedTools      []Count `json:"top_denied_tools"`
	TopDeniedPrincipals []Count `json:"top_denied_principals"`
	TopDeniedRules      []Count `json:"top_denied_rules"`
	// TopLiveWriteTools are the tools of the live writes, most first.
	TopLiveWriteTools []Count `json:"top_live_write_tools"`
	// Revisions are the bundle revisions that decided in the window, first used first.
	Revisions []RevisionUse `json:"revisions"`
}

// SummaryBucket is one time bucket of a summary.
type SummaryBucket struct {
	Start  time.Time        `json:"start"`
	Counts map[string]int64 `json:"counts"`
}

// Count is one entry of a top list. For tools, Tool and ToolName say which (Key is both).
type Count struct {
	Key      string `json:"key"`
	Tool     string `json:"tool,omitempty"`
	ToolName string `json:"tool_name,omitempty"`
	Count    int64  `json:"count"`
}

// RevisionUse is a revision that decided in a window: when first and last, and how often.
type RevisionUse struct {
	Revision  string    `json:"revision"`
	First     time.Time `json:"first"`
	Last      time.Time `json:"last"`
	Decisions int64     `json:"decisions"`
}

// ErrTooManyBuckets is wrapped by Summarize's error when the window holds more than
// MaxSummaryBuckets buckets.
var ErrTooManyBuckets = errors.New("too many buckets")

// check validates f and returns its top list length.
func (f SummaryFilter) check() (int, error) {
	switch {
	case f.Since.IsZero() || f.Until.IsZero():
		return 0, errors.New("a summary needs both since and until")
	case !f.Since.Before(f.Until):
		return 0, fmt.Errorf("since (%s) must be before until (%s)", f.Since.Format(time.RFC3339), f.Until.Format(time.RFC3339))
	case f.Bucket <= 0:
		return 0, errors.New("the bucket must be a positive duration")
	case f.Top < 0 || f.Top > MaxSummaryTop:
		return 0, fmt.Errorf("top must be from 1 to %d, not %d", MaxSummaryTop, f.Top)
	}
	if n := f.buckets(); n > MaxSummaryBuckets {
		return 0, fmt.Errorf("%w: %d buckets of %s, at most %d", ErrTooManyBuckets, n, f.Bucket, MaxSummaryBuckets)
	}
	if f.Top == 0 {
		return DefaultSummaryTop, nil
	}
	return f.Top, nil
}

// buckets is the number of buckets of the window (the last one may be partial).
func (f SummaryFilter) buckets() int64 {
	span := f.Until.Sub(f.Since)
	n := int64(span / f.Bucket)
	if span%f.Bucket != 0 {
		n++
	}
	return n
}

// Summarize counts the decisions of f's window: per bucket and outcome, the live writes, the
// most denied tools, principals and rules, and the revisions that decided. Every count is one
// SQL aggregate over the window (the events' time index), in SQLite and PostgreSQL alike.
func (r *Reader) Summarize(ctx context.Context, f SummaryFilter) (*Summary, error) {
	top, err := f.check()
	if err != nil {
		return nil, fmt.Errorf("summarize decision log: %w", err)
	}
	since, until := clampNano(f.Since), clampNano(f.Until)
	n := f.buckets()
	s := &Summary{Since: f.Since.UTC(), Until: f.Until.UTC(), Bucket: f.Bucket.String(), Totals: zeroCounts(),
		Buckets: make([]SummaryBucket, n)}
	for i := range s.Buckets {
		s.Buckets[i] = SummaryBucket{Start: f.Since.Add(time.Duration(i) * f.Bucket).UTC(), Counts: zeroCounts()}
	}
	fail := func(what string, err error) (*Summary, error) {
		return nil, fmt.Errorf("summarize decision log %s: %s: %w", r.path, what, err)
	}
	window := "e.ts >= ? AND e.ts < ?"

	rows, err := r.db.QueryContext(ctx, r.d.q(`SELECT (e.ts - CAST(? AS BIGINT)) / CAST(? AS BIGINT) AS b, e.outcome, COUNT(*)
FROM events e WHERE `+window+` GROUP BY b, e.outcome`), since, int64(f.Bucket), since, until)
	if err != nil {
		return fail("count by outcome", err)
	}
	err = scanRows(rows, func(rows *sql.Rows) error {
		var b, c int64
		var outcome string
		if err := rows.Scan(&b, &outcome, &c); err != nil {
			return err
		}
		if b < 0 || b >= n {
			return fmt.Errorf("bucket %d outside the window's %d", b, n)
		}
		s.Buckets[b].Counts[outcome] += c
		s.Totals[outcome] += c
		return nil
	})
	if err != nil {
		return fail("count by outcome", err)
	}

	if err := r.db.QueryRowContext(ctx, r.d.q(`SELECT COUNT(*) FROM events e WHERE `+window+` AND e.outcome = ? AND e.access = ?`),
		since, until, authz.OutcomeAllow, "write").Scan(&s.LiveWrites); err != nil {
		return fail("count live writes", err)
	}

	toolTop := func(what, outcome, access string) ([]Count, error) {
		q := `SELECT e.tool, e.tool_name, COUNT(*) AS n FROM events e WHERE ` + window + ` AND e.outcome = ? AND e.tool <> ''`
		args := []any{since, until, outcome}
		if access != "" {
			q += ` AND e.access = ?`
			args = append(args, access)
		}
		q += ` GROUP BY e.tool, e.tool_name ORDER BY n DESC, e.tool, e.tool_name LIMIT ?`
		rows, err := r.db.QueryContext(ctx, r.d.q(q), append(args, top)...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out := []Count{}
		err = scanRows(rows, func(rows *sql.Rows) error {
			var c Count
			if err := rows.Scan(&c.Tool, &c.ToolName, &c.Count); err != nil {
				return err
			}
			c.Key = c.Tool
			if c.ToolName != "" {
				c.Key += " (" + c.ToolName + ")"
			}
			out = append(out, c)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return out, nil
	}
	if s.TopDeniedTools, err = toolTop("top denied tools", authz.OutcomeDeny, ""); err != nil {
		return fail("count", err)
	}
	if s.TopLiveWriteTools, err = toolTop("top live-write tools", authz.OutcomeAllow, "write"); err != nil {
		return fail("count", err)
	}
	keyTop := func(what, q string, args ...any) ([]Count, error) {
		rows, err := r.db.QueryContext(ctx, r.d.q(q), args...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out := []Count{}
		err = scanRows(rows, func(rows *sql.Rows) error {
			var c Count
			if err := rows.Scan(&c.Key, &c.Count); err != nil {
				return err
			}
			out = append(out, c)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return out, nil
	}
	if s.TopDeniedPrincipals, err = keyTop("top denied principals", `SELECT e.principal, COUNT(*) AS n FROM events e WHERE `+window+
		` AND e.outcome = ? GROUP BY e.principal ORDER BY n DESC, e.principal LIMIT ?`, since, until, authz.OutcomeDeny, top); err != nil {
		return fail("count", err)
	}
	if s.TopDeniedRules, err = keyTop("top denied rules", `SELECT `+r.d.reasonRule+` AS rule, COUNT(*) AS n FROM `+r.d.denialReasons+`
WHERE `+window+` AND e.outcome = ? AND `+r.d.reasonRule+` IS NOT NULL GROUP BY rule ORDER BY n DESC, rule LIMIT ?`, since, until, authz.OutcomeDeny, top); err != nil {
		return fail("count", err)
	}

	rows, err = r.db.QueryContext(ctx, r.d.q(`SELECT e.revision, MIN(e.ts), MAX(e.ts), COUNT(*) FROM events e WHERE `+window+`
GROUP BY e.revision ORDER BY MIN(e.ts), e.revision LIMIT ?`), since, until, maxSummaryRevisions)
	if err != nil {
		return fail("revisions", err)
	}
	s.Revisions = []RevisionUse{}
	err = scanRows(rows, func(rows *sql.Rows) error {
		var u RevisionUse
		var first, last int64
		if err := rows.Scan(&u.Revision, &first, &last, &u.Decisions); err != nil {
			return err
		}
		u.First, u.Last = time.Unix(0, first).UTC(), time.Unix(0, last).UTC()
		s.Revisions = append(s.Revisions, u)
		return nil
	})
	if err != nil {
		return fail("revisions", err)
	}
	return s, nil
}

// Summarize counts the decisions of a window (see Reader.Summarize).
func (l *Log) Summarize(ctx context.Context, f SummaryFilter) (*Summary, error) {
	return l.reader.Summarize(ctx, f)
}

func zeroCounts() map[string]int64 {
	m := make(map[string]int64, len(authz.Outcomes))
	for _, o := range authz.Outcomes {
		m[o] = 0
	}
	return m
}

// scanRows calls each for every row, then closes rows.
func scanRows(rows *sql.Rows, each func(*sql.Rows) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ChainHealth is the state of one partition's chain, cheaply read (no hashes recomputed; Verify
// does that): its head, its last checkpoint and the entries no checkpoint covers yet.
type ChainHealth struct {
	Partition      string      `json:"partition"`
	Head           int64       `json:"head"` // the last position written
	LastCheckpoint *Checkpoint `json:"last_checkpoint,omitempty"`
	// Unprotected counts the entries after the last checkpoint (Verify's Uncovered).
	Unprotected int64 `json:"unprotected"`
}

// Health reads every partition's head and last checkpoint.
func (r *Reader) Health(ctx context.Context) ([]ChainHealth, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT part FROM partitions ORDER BY part`)
	if err != nil {
		return nil, fmt.Errorf("read decision log health %s: %w", r.path, err)
	}
	var parts []string
	err = scanRows(rows, func(rows *sql.Rows) error {
		var p string
		parts = append(parts, p)
		return rows.Scan(&parts[len(parts)-1])
	})
	if err != nil {
		return nil, fmt.Errorf("read decision log health %s: %w", r.path, err)
	}
	out := []ChainHealth{}
	for _, p := range parts {
		h := ChainHealth{Partition: p}
		var head sql.NullInt64
		if err := r.db.QueryRowContext(ctx, r.d.q(`SELECT MAX(pos) FROM (
	SELECT MAX(pos) AS pos FROM events WHERE part = ?
	UNION ALL SELECT MAX(pos) FROM completions WHERE part = ?
	UNION ALL SELECT MAX(pos) FROM markers WHERE part = ?) x`), p, p, p).Scan(&head); err != nil {
			return nil, fmt.Errorf("read decision log health %s: partition %s: %w", r.path, p, err)
		}
		h.Head = head.Int64
		var c Checkpoint
		var ts int64
		var hash []byte
		err := r.db.QueryRowContext(ctx, r.d.q(`SELECT pos, hash, ts, key_id FROM checkpoints WHERE part = ? ORDER BY pos DESC LIMIT 1`), p).
			Scan(&c.Pos, &hash, &ts, &c.KeyID)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			h.Unprotected = h.Head
		case err != nil:
			return nil, fmt.Errorf("read decision log health %s: partition %s: %w", r.path, p, err)
		default:
			c.Partition, c.Timestamp, c.Hash = p, time.Unix(0, ts).UTC(), fmt.Sprintf("%x", hash)
			h.LastCheckpoint = &c
			h.Unprotected = max(h.Head-c.Pos, 0)
		}
		out = append(out, h)
	}
	return out, nil
}

// Health reads every partition's head and last checkpoint (see Reader.Health).
func (l *Log) Health(ctx context.Context) ([]ChainHealth, error) {
	return l.reader.Health(ctx)
}

// ChainEntry is one entry of a partition's hash chain, as a decision's page shows its
// neighbours: its position, kind (event, completion, retention) and, for events and
// completions, the decision it belongs to.
type ChainEntry struct {
	Pos        int64  `json:"pos"`
	Kind       string `json:"kind"`
	DecisionID string `json:"decision_id,omitempty"`
	Hash       string `json:"hash"` // hex
}

// ChainPosition is where a decision sits in its partition's hash chain: its event's entry, the
// entries just before and after it, its completion's entry, and the first checkpoint at or after
// it (the signature that covers it; nil while none does).
type ChainPosition struct {
	Partition  string      `json:"partition"`
	Entry      ChainEntry  `json:"entry"`
	Previous   *ChainEntry `json:"previous,omitempty"`
	Next       *ChainEntry `json:"next,omitempty"`
	Completion *ChainEntry `json:"completion,omitempty"`
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
}

// ChainPosition returns where the decision with exactly this id sits in the chain, or nil when
// the log has no such decision.
func (r *Reader) ChainPosition(ctx context.Context, decisionID string) (*ChainPosition, error) {
	fail := func(err error) (*ChainPosition, error) {
		return nil, fmt.Errorf("read the chain position of decision %s in %s: %w", decisionID, r.path, err)
	}
	p := &ChainPosition{Entry: ChainEntry{Kind: KindEvent, DecisionID: decisionID}}
	var hash []byte
	err := r.db.QueryRowContext(ctx, r.d.q(`SELECT part, pos, hash FROM events WHERE decision_id = ?`), decisionID).Scan(&p.Partition, &p.Entry.Pos, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return fail(err)
	}
	p.Entry.Hash = fmt.Sprintf("%x", hash)
	at := func(pos int64) (*ChainEntry, error) {
		if pos < 1 {
			return nil, nil
		}
		e := &ChainEntry{Pos: pos}
		var h []byte
		err := r.db.QueryRowContext(ctx, r.d.q(`SELECT 'event', decision_id, hash FROM events WHERE part = ?1 AND pos = ?2
UNION ALL SELECT 'completion', decision_id, hash FROM completions WHERE part = ?1 AND pos = ?2
UNION ALL SELECT kind, '', hash FROM markers WHERE part = ?1 AND pos = ?2`), p.Partition, pos).Scan(&e.Kind, &e.DecisionID, &h)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil // deleted by retention, or not written yet
		}
		if err != nil {
			return nil, err
		}
		e.Hash = fmt.Sprintf("%x", h)
		return e, nil
	}
	if p.Previous, err = at(p.Entry.Pos - 1); err != nil {
		return fail(err)
	}
	if p.Next, err = at(p.Entry.Pos + 1); err != nil {
		return fail(err)
	}
	c := ChainEntry{Kind: KindCompletion, DecisionID: decisionID}
	switch err := r.db.QueryRowContext(ctx, r.d.q(`SELECT pos, hash FROM completions WHERE decision_id = ?`), decisionID).Scan(&c.Pos, &hash); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fail(err)
	default:
		c.Hash = fmt.Sprintf("%x", hash)
		p.Completion = &c
	}
	var ck Checkpoint
	var ts int64
	switch err := r.db.QueryRowContext(ctx, r.d.q(`SELECT pos, hash, ts, key_id, public_key, signature FROM checkpoints
WHERE part = ? AND pos >= ? ORDER BY pos LIMIT 1`), p.Partition, p.Entry.Pos).Scan(&ck.Pos, &hash, &ts, &ck.KeyID, &ck.PublicKey, &ck.Signature); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fail(err)
	default:
		ck.Partition, ck.Timestamp, ck.Hash = p.Partition, time.Unix(0, ts).UTC(), fmt.Sprintf("%x", hash)
		p.Checkpoint = &ck
	}
	return p, nil
}

// ChainPosition returns where a decision sits in the chain (see Reader.ChainPosition).
func (l *Log) ChainPosition(ctx context.Context, decisionID string) (*ChainPosition, error) {
	return l.reader.ChainPosition(ctx, decisionID)
}
