package decisionlog

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// VerifyOptions configures Verify.
type VerifyOptions struct {
	// PublicKeys pins the keys checkpoints must be signed with: an unsigned checkpoint, or one
	// signed by another key, is then a problem. Without them every signature is checked against
	// the public key the checkpoint carries, and Verify reports which keys signed.
	PublicKeys []ed25519.PublicKey
	Partition  string                            // only this partition; all when empty
	Progress   func(partition string, pos int64) // called every 100,000 entries
}

// VerifyReport is what Verify found, one PartitionReport per chain partition. OK says that no
// chain is broken: every entry up to each partition's last checkpoint is there and unaltered.
// Uncovered counts the entries after the last checkpoints, which Verify cannot vouch for.
type VerifyReport struct {
	OK         bool              `json:"ok"`
	Uncovered  int64             `json:"uncovered"` // the partitions' Uncovered, summed
	Partitions []PartitionReport `json:"partitions"`
}

// PartitionReport is the verification of one partition's chain.
type PartitionReport struct {
	Partition   string `json:"partition"`
	OK          bool   `json:"ok"`
	First       int64  `json:"first"` // first position present (1 unless retention deleted some)
	Last        int64  `json:"last"`  // last position verified
	Events      int64  `json:"events"`
	Completions int64  `json:"completions"`
	Markers     int64  `json:"markers"`
	// Retained: positions below First were deleted by retention, as its latest record says.
	Retention      *RetentionRecord `json:"retention,omitempty"`
	Checkpoints    int              `json:"checkpoints"` // checkpoints whose signature and head matched
	Unsigned       int              `json:"unsigned_checkpoints"`
	Keys           []string         `json:"keys"`                      // ids of the keys that signed
	LastCheckpoint *Checkpoint      `json:"last_checkpoint,omitempty"` // the newest checkpoint
	// Uncovered entries come after the last checkpoint (all of them, without one): they are
	// hash-chained, but no signature covers them, so cutting them off could not be told from a log
	// that ended there (and someone who recomputes the chain could rewrite them). A log closed
	// cleanly has none; CheckpointEvery and CheckpointEntries bound them otherwise.
	Uncovered int64    `json:"uncovered"`
	Problem   *Problem `json:"problem,omitempty"` // the first break; verification of the partition stops there
}

// Problem is the first entry (or checkpoint) where a chain breaks.
type Problem struct {
	Pos        int64  `json:"pos"`
	Kind       string `json:"kind"` // event, completion, retention, checkpoint
	DecisionID string `json:"decision_id,omitempty"`
	Seq        int64  `json:"seq,omitempty"` // an event's seq, as `lushctl audit query` shows it
	Reason     string `json:"reason"`
}

func (p *Problem) String() string {
	s := fmt.Sprintf("position %d (%s", p.Pos, p.Kind)
	if p.DecisionID != "" {
		s += " " + p.DecisionID
	}
	if p.Seq != 0 {
		s += fmt.Sprintf(", seq %d", p.Seq)
	}
	return s + "): " + p.Reason
}

// Verify checks every partition's chain: positions contiguous from the first kept one, every
// hash recomputed from the entry and its predecessor, every event's query columns equal to its
// document, and every checkpoint's signature valid and its head present with the hash it signed.
// What it vouches for is the chain up to each partition's last checkpoint: complete and
// unaltered. The entries after it are counted (Uncovered), not vouched for.
// Verify reads one consistent snapshot; the log may be written meanwhile. The error is for
// failures to read; what is broken is in the report.
func (r *Reader) Verify(ctx context.Context, opts VerifyOptions) (*VerifyReport, error) {
	tx, err := r.db.BeginTx(ctx, &r.d.verifyTx)
	if err != nil {
		return nil, fmt.Errorf("verify decision log %s: %w", r.path, err)
	}
	defer tx.Rollback()
	parts, err := partitions(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("verify decision log %s: %w", r.path, err)
	}
	if opts.Partition != "" {
		if !slices.Contains(parts, opts.Partition) {
			return nil, fmt.Errorf("verify decision log %s: no partition %q (there are %q)", r.path, opts.Partition, parts)
		}
		parts = []string{opts.Partition}
	}
	rep := &VerifyReport{OK: true}
	for _, p := range parts {
		pr, err := verifyPartition(ctx, tx, r.d, p, &opts)
		if err != nil {
			return nil, fmt.Errorf("verify decision log %s: partition %s: %w", r.path, p, err)
		}
		rep.OK = rep.OK && pr.OK
		rep.Uncovered += pr.Uncovered
		rep.Partitions = append(rep.Partitions, *pr)
	}
	return rep, nil
}

func partitions(ctx context.Context, tx *sql.Tx) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT part FROM partitions UNION SELECT DISTINCT part FROM events
	UNION SELECT DISTINCT part FROM completions UNION SELECT DISTINCT part FROM markers
	UNION SELECT DISTINCT part FROM checkpoints ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// chainSelect streams a partition's entries from a position on, in chain order, each table's rows in the same
// column shape: pos, kind (0 event, 1 completion, 2 marker), key (decision_id or marker kind),
// ts, body (event document or marker body), hash, seq, the completion's columns, and the event's
// query columns.
const chainSelect = `SELECT pos, 0, decision_id, ts, event, hash, seq, NULL, NULL, NULL, NULL, NULL, NULL,
	revision, point, principal, agent, action, tool, tool_name, access, risk, outcome, latency_ns, trace_id
FROM events WHERE part = ?1 AND pos >= ?2
UNION ALL
SELECT pos, 1, decision_id, ts, NULL, hash, NULL, status, latency_ns, response, error, tokens_input, tokens_output,
	NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM completions WHERE part = ?1 AND pos >= ?2
UNION ALL
SELECT pos, 2, kind, ts, body, hash, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM markers WHERE part = ?1 AND pos >= ?2
ORDER BY 1`

func verifyPartition(ctx context.Context, tx *sql.Tx, d *dialect, part string, opts *VerifyOptions) (*PartitionReport, error) {
	pr := &PartitionReport{Partition: part, OK: true, First: 1, Keys: []string{}}
	broken := func(p *Problem) {
		if pr.Problem == nil {
			pr.Problem, pr.OK = p, false
		}
	}
	// Retention: the newest record says where the kept chain starts and what precedes it.
	prev := genesis
	var retained []RetentionRecord
	rows, err := tx.QueryContext(ctx, d.q("SELECT pos, body FROM markers WHERE part = ? AND kind = ? ORDER BY pos"), part, KindRetention)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var pos int64
		var body string
		if err := rows.Scan(&pos, &body); err != nil {
			rows.Close()
			return nil, err
		}
		var rec RetentionRecord
		if err := json.Unmarshal([]byte(body), &rec); err != nil || rec.Below < 1 || rec.Below > pos {
			broken(&Problem{Pos: pos, Kind: KindRetention, Reason: "the retention record is malformed"})
			continue
		}
		retained = append(retained, rec)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	if len(retained) > 0 {
		rec := slices.MaxFunc(retained, func(a, b RetentionRecord) int { return int(a.Below - b.Below) })
		pr.Retention, pr.First = &rec, rec.Below
		if prev, err = hex.DecodeString(rec.PrevHash); err != nil || len(prev) != hashSize {
			broken(&Problem{Pos: rec.Below - 1, Kind: KindRetention, Reason: "the retention record's prev_hash is not a SHA-256 in hex"})
		}
	}
	cps, err := checkpoints(ctx, tx, d, part)
	if err != nil {
		return nil, err
	}
	for i := range cps {
		if p := checkSignature(&cps[i].Checkpoint, opts.PublicKeys, pr); p != nil {
			broken(p)
		}
	}
	if len(cps) > 0 {
		pr.LastCheckpoint = &cps[len(cps)-1].Checkpoint
	}
	// A checkpoint at the retention boundary signed the hash the retention record carries on.
	next := 0 // the next checkpoint to match against the chain
	for next < len(cps) && cps[next].Pos < pr.First {
		if cps[next].Pos == pr.First-1 && !bytes.Equal(cps[next].hash, prev) {
			broken(&Problem{Pos: cps[next].Pos, Kind: "checkpoint", Reason: "the retention record's prev_hash differs from the hash the checkpoint signed"})
		}
		next++
	}

	// Rows below the first position kept are being deleted by retention (in chunks).
	rows, err = tx.QueryContext(ctx, d.q(chainSelect), part, pr.First)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	want := pr.First
	for rows.Next() && pr.Problem == nil {
		var (
			e                      chainRow
			seq, lat, tin, tout    sql.NullInt64
			body, status, resp, em sql.NullString
			cols                   [12]sql.NullString
			latency                sql.NullInt64
		)
		if err := rows.Scan(&e.pos, &e.kind, &e.key, &e.ts, &body, &e.hash, &seq, &status, &lat, &resp, &em, &tin, &tout,
			&cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5], &cols[6], &cols[7], &cols[8], &cols[9], &latency, &cols[11]); err != nil {
			return nil, err
		}
		kind := [...]string{KindEvent, KindCompletion, KindRetention}[e.kind]
		prob := func(reason string) *Problem {
			p := &Problem{Pos: e.pos, Kind: kind, Reason: reason}
			switch e.kind {
			case 0:
				p.DecisionID, p.Seq = e.key, seq.Int64
			case 1:
				p.DecisionID = e.key
			case 2:
				p.Kind = e.key
			}
			return p
		}
		if e.pos != want {
			if e.pos < want {
				broken(prob(fmt.Sprintf("position %d appears twice", e.pos)))
			} else {
				broken(prob(fmt.Sprintf("positions %d to %d are missing: deleted without a retention record", want, e.pos-1)))
			}
			break
		}
		var enc []byte
		switch e.kind {
		case 0:
			pr.Events++
			enc = eventEntry(part, e.pos, e.key, e.ts, body.String)
			if reason := checkColumns(&e, body.String, cols, latency); reason != "" {
				broken(prob(reason))
			}
		case 1:
			pr.Completions++
			c := completionRow{id: e.key, ts: e.ts, status: status.String, latency: lat.Int64, response: resp, err: em, tokensIn: tin, tokensOut: tout}
			enc = c.entry(part, e.pos)
		case 2:
			pr.Markers++
			enc = markerEntry(part, e.pos, e.key, e.ts, body.String)
		}
		h := chainHash(prev, enc)
		if !bytes.Equal(h, e.hash) {
			broken(prob("the entry or its stored hash was altered (the hash recomputed from it and its predecessor differs)"))
			break
		}
		for next < len(cps) && cps[next].Pos == e.pos {
			if !bytes.Equal(cps[next].hash, h) {
				broken(&Problem{Pos: e.pos, Kind: "checkpoint", Reason: fmt.Sprintf("the chain up to here differs from the checkpoint signed at %s: it was rewritten",
					cps[next].Timestamp.Format(time.RFC3339))})
			}
			next++
		}
		prev, pr.Last, want = h, e.pos, e.pos+1
		if opts.Progress != nil && e.pos%100000 == 0 {
			opts.Progress(part, e.pos)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if pr.Problem != nil {
		return pr, nil
	}
	if next < len(cps) {
		c := cps[next]
		broken(&Problem{Pos: c.Pos, Kind: "checkpoint", Reason: fmt.Sprintf("the chain ends at position %d but a checkpoint signed at %s covers position %d: entries were cut off the end",
			pr.Last, c.Timestamp.Format(time.RFC3339), c.Pos)})
		return pr, nil
	}
	if pr.LastCheckpoint != nil {
		pr.Uncovered = pr.Last - pr.LastCheckpoint.Pos
	} else {
		pr.Uncovered = pr.Last - pr.First + 1
	}
	return pr, nil
}

// chainRow is one entry as chainSelect reads it.
type chainRow struct {
	pos, ts int64
	kind    int
	key     string
	hash    []byte
}

// checkColumns compares an event's query columns with its document; it returns why they differ.
func checkColumns(e *chainRow, body string, cols [12]sql.NullString, latency sql.NullInt64) string {
	var ev Event
	if err := json.Unmarshal([]byte(body), &ev); err != nil {
		return "the event document is not valid JSON"
	}
	want := eventColumns(&ev, body)
	got := []any{e.key, e.ts, cols[0].String, cols[1].String, cols[2].String, cols[3].String, cols[4].String,
		cols[5].String, cols[6].String, cols[7].String, cols[8].String, cols[9].String, latency.Int64, cols[11].String, body}
	for i := range want {
		if want[i] != got[i] {
			return fmt.Sprintf("column %s differs from the event document (queries on it would mislead)", eventColumnNames[i])
		}
	}
	return ""
}

// storedCheckpoint is a checkpoint with its raw hash.
type storedCheckpoint struct {
	Checkpoint
	hash []byte
}

func checkpoints(ctx context.Context, tx *sql.Tx, d *dialect, part string) ([]storedCheckpoint, error) {
	rows, err := tx.QueryContext(ctx, d.q("SELECT pos, hash, ts, key_id, public_key, signature FROM checkpoints WHERE part = ? ORDER BY pos"), part)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []storedCheckpoint
	for rows.Next() {
		c := storedCheckpoint{Checkpoint: Checkpoint{Partition: part}}
		var ts int64
		if err := rows.Scan(&c.Pos, &c.hash, &ts, &c.KeyID, &c.PublicKey, &c.Signature); err != nil {
			return nil, err
		}
		c.Timestamp, c.Hash = time.Unix(0, ts).UTC(), hex.EncodeToString(c.hash)
		out = append(out, c)
	}
	return out, rows.Err()
}

// checkSignature checks c's signature against the pinned keys (or, with none, the key c
// carries) and counts it in pr.
func checkSignature(c *Checkpoint, pinned []ed25519.PublicKey, pr *PartitionReport) *Problem {
	bad := func(reason string) *Problem { return &Problem{Pos: c.Pos, Kind: "checkpoint", Reason: reason} }
	if c.Signature == "" {
		if len(pinned) > 0 {
			return bad("the checkpoint is unsigned, and --public-key requires signed checkpoints")
		}
		pr.Unsigned++
		return nil
	}
	sig, err := hex.DecodeString(c.Signature)
	if err != nil {
		return bad("the checkpoint's signature is not hex")
	}
	keys := pinned
	if len(keys) == 0 {
		pub, err := ParsePublicKey([]byte(c.PublicKey))
		if err != nil {
			return bad("the checkpoint's public key is malformed")
		}
		keys = []ed25519.PublicKey{pub}
	}
	for _, k := range keys {
		if ed25519.Verify(k, c.SignedMessage(), sig) {
			pr.Checkpoints++
			if id := KeyID(k); !slices.Contains(pr.Keys, id) {
				pr.Keys = append(pr.Keys, id)
			}
			return nil
		}
	}
	if len(pinned) > 0 {
		return bad("the checkpoint's signature does not verify with any pinned public key")
	}
	return bad("the checkpoint's signature does not verify: the checkpoint was altered")
}
