package decisionlog

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// chainFixture writes n events (every second one completed), checkpoints, writes two more
// events and closes the log (which checkpoints again); it returns the log's path and the key.
func chainFixture(t *testing.T, n int) (string, ed25519.PrivateKey) {
	t.Helper()
	ctx := context.Background()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	path := filepath.Join(t.TempDir(), "decisions.db")
	l, err := Open(ctx, path, SigningKey(key), CheckpointEvery(0))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		e := sampleEvent(fmt.Sprintf("d-%03d", i))
		e.Principal = fmt.Sprintf("user:u%d", i%3)
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := l.Complete(ctx, &Completion{DecisionID: e.DecisionID, Status: StatusOK, Response: []byte(`{"ok":true}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if c, err := l.Checkpoint(ctx); err != nil || c == nil {
		t.Fatalf("checkpoint: %v %v", c, err)
	}
	for _, id := range []string{"late-1", "late-2"} {
		if err := l.Record(ctx, sampleEvent(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path, key
}

func verify(t *testing.T, path string, opts VerifyOptions) *VerifyReport {
	t.Helper()
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err := r.Verify(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Partitions) == 0 {
		t.Fatal("no partitions")
	}
	return rep
}

func TestVerifyIntactChain(t *testing.T) {
	path, key := chainFixture(t, 10)
	rep := verify(t, path, VerifyOptions{PublicKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}})
	p := rep.Partitions[0]
	if !rep.OK || p.Problem != nil {
		t.Fatalf("intact log: %+v", p.Problem)
	}
	// 12 events, 5 completions; Close checkpointed the head.
	if p.Partition != DefaultPartition || p.Events != 12 || p.Completions != 5 || p.First != 1 || p.Last != 17 ||
		p.Checkpoints != 2 || p.Uncovered != 0 || len(p.Keys) != 1 || p.Keys[0] != KeyID(key.Public().(ed25519.PublicKey)) {
		t.Errorf("report %+v", p)
	}
}

// TestVerifyVouchesUpToTheLastCheckpoint: Verify counts the entries after the last checkpoint
// (Uncovered), which it cannot vouch for: a log closed cleanly has none; one whose writer was
// killed after its last checkpoint has some, and cutting some of them off is not a break but
// leaves them counted. Cutting all of them off cannot be told from a log that ended there.
func TestVerifyVouchesUpToTheLastCheckpoint(t *testing.T) {
	// chainFixture: positions 1..15 checkpointed, 16 and 17 written after, and the checkpoint of
	// Close at 17. A kill would have left no checkpoint at 17.
	const killed = "DROP TRIGGER checkpoints_no_delete; DELETE FROM checkpoints WHERE pos = 17;"
	const cut = "DROP TRIGGER events_no_delete; "
	for _, tc := range []struct {
		name            string
		tamper          string
		last, uncovered int64 // the last position, and how many after the last checkpoint
		checkpoint      int64 // the last checkpoint's position
	}{
		{"closed cleanly", "", 17, 0, 17},
		{"killed after a checkpoint", killed, 17, 2, 15},
		{"killed, then the newest entry cut off", killed + cut + "DELETE FROM events WHERE pos = 17", 16, 1, 15},
		{"killed, then cut back to the checkpoint (cannot be told)", killed + cut + "DELETE FROM events WHERE pos >= 16", 15, 0, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, _ := chainFixture(t, 10)
			if tc.tamper != "" {
				execRaw(t, path, tc.tamper)
			}
			rep := verify(t, path, VerifyOptions{})
			p := rep.Partitions[0]
			if !rep.OK || p.Problem != nil {
				t.Fatalf("a break: %s", p.Problem)
			}
			if p.Last != tc.last || p.Uncovered != tc.uncovered || rep.Uncovered != tc.uncovered || p.LastCheckpoint == nil || p.LastCheckpoint.Pos != tc.checkpoint {
				t.Errorf("last %d, uncovered %d (report %d), last checkpoint %+v; want %d, %d, %d", p.Last, p.Uncovered, rep.Uncovered, p.LastCheckpoint,
					tc.last, tc.uncovered, tc.checkpoint)
			}
		})
	}
}

// TestCheckpointEntries: the transaction that takes the chain CheckpointEntries past the last
// checkpoint signs its head, so a writer that is killed leaves fewer than that many entries
// uncovered, however fast it writes; Close covers the rest.
func TestCheckpointEntries(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		writers int // each records per events, all at once
		per     int
		check   func(t *testing.T, p PartitionReport)
	}{
		{"one at a time", 1, 25, func(t *testing.T, p PartitionReport) {
			if p.Checkpoints != 2 || p.LastCheckpoint == nil || p.LastCheckpoint.Pos != 20 || p.Uncovered != 5 {
				t.Errorf("%d checkpoints, the last %+v, %d uncovered; want 2, at 20, 5", p.Checkpoints, p.LastCheckpoint, p.Uncovered)
			}
		}},
		{"many at once", 8, 40, func(t *testing.T, p PartitionReport) {
			if p.Uncovered >= 10 || p.Checkpoints == 0 {
				t.Errorf("%d checkpoints, %d uncovered; want fewer than 10 uncovered", p.Checkpoints, p.Uncovered)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, key, _ := ed25519.GenerateKey(rand.Reader)
			path := filepath.Join(t.TempDir(), "decisions.db")
			l, err := Open(ctx, path, SigningKey(key), CheckpointEvery(0), CheckpointEntries(10))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var wg sync.WaitGroup
			for w := range tc.writers {
				wg.Go(func() {
					for i := range tc.per {
						if err := l.Record(ctx, sampleEvent(fmt.Sprintf("w%d-%03d", w, i))); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			// As a process killed now would leave it.
			rep := verify(t, path, VerifyOptions{PublicKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}})
			if p := rep.Partitions[0]; !rep.OK || p.Last != int64(tc.writers*tc.per) {
				t.Fatalf("verify: %+v", p)
			}
			tc.check(t, rep.Partitions[0])
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if p := verify(t, path, VerifyOptions{}).Partitions[0]; p.Uncovered != 0 {
				t.Errorf("%d entries uncovered after Close", p.Uncovered)
			}
		})
	}
}

// TestVerifyFindsTampering: each way of changing the log behind the writer's back is found,
// and the report names the first broken entry.
func TestVerifyFindsTampering(t *testing.T) {
	const unlock = "DROP TRIGGER events_no_update; DROP TRIGGER events_no_delete; DROP TRIGGER completions_no_update; " +
		"DROP TRIGGER completions_no_delete; DROP TRIGGER checkpoints_no_update; DROP TRIGGER checkpoints_no_delete;"
	for _, tc := range []struct {
		name    string
		tamper  string                                 // SQL run on the closed log
		rewrite func(t *testing.T, db *sql.DB)         // or Go
		pos     int64                                  // the first broken position
		kind    string                                 // and its kind
		reason  string                                 // part of the reason
		pinned  bool                                   // verify with the key pinned
		check   func(t *testing.T, p *PartitionReport) // extra checks
	}{
		{name: "event document edited", tamper: `UPDATE events SET event = replace(event, 'data/q3.md', 'data/q4.md') WHERE decision_id = 'd-004'`,
			pos: 7, kind: KindEvent, reason: "altered"},
		{name: "query column edited", tamper: `UPDATE events SET principal = 'user:nobody' WHERE decision_id = 'd-003'`,
			pos: 6, kind: KindEvent, reason: "column principal differs"},
		{name: "completion response edited", tamper: `UPDATE completions SET response = '{"ok":false}' WHERE decision_id = 'd-002'`,
			pos: 5, kind: KindCompletion, reason: "altered"},
		{name: "event deleted", tamper: `DELETE FROM events WHERE decision_id = 'd-005'`,
			pos: 10, kind: KindEvent, reason: "positions 9 to 9 are missing"},
		{name: "two entries swapped", tamper: `UPDATE events SET pos = -1 WHERE pos = 3; UPDATE events SET pos = 3 WHERE pos = 6; UPDATE events SET pos = 6 WHERE pos = -1`,
			pos: 3, kind: KindEvent, reason: "altered"},
		{name: "tail cut below a checkpoint", tamper: `DELETE FROM events WHERE pos >= 15; DELETE FROM completions WHERE pos >= 15`,
			pos: 15, kind: "checkpoint", reason: "entries were cut off the end"},
		{name: "checkpoint forged", tamper: `UPDATE checkpoints SET ts = ts + 1 WHERE pos = 15`,
			pos: 15, kind: "checkpoint", reason: "signature does not verify"},
		{name: "checkpoint unsigned while pinned", tamper: `UPDATE checkpoints SET signature = '', key_id = '', public_key = '' WHERE pos = 15`,
			pos: 15, kind: "checkpoint", reason: "unsigned", pinned: true},
		{name: "whole chain rewritten without the key", rewrite: rewriteChain, pos: 15, kind: "checkpoint", reason: "rewritten"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, key := chainFixture(t, 10)
			if tc.tamper != "" {
				execRaw(t, path, unlock+tc.tamper)
			}
			if tc.rewrite != nil {
				db, err := openDB(path, nil)
				if err != nil {
					t.Fatal(err)
				}
				execRaw(t, path, unlock)
				tc.rewrite(t, db)
				db.Close()
			}
			opts := VerifyOptions{}
			if tc.pinned {
				opts.PublicKeys = []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
			}
			rep := verify(t, path, opts)
			p := rep.Partitions[0].Problem
			if rep.OK || p == nil {
				t.Fatal("tampering not found")
			}
			if p.Pos != tc.pos || p.Kind != tc.kind || !strings.Contains(p.Reason, tc.reason) {
				t.Errorf("problem %s; want position %d (%s) with %q", p, tc.pos, tc.kind, tc.reason)
			}
			if p.Kind == KindEvent && (p.DecisionID == "" || p.Seq == 0) {
				t.Errorf("the broken event is not named: %+v", p)
			}
		})
	}
}

// rewriteChain edits an event and recomputes every hash after it, as someone who knows the
// algorithm but not the checkpoint key would: only the signed checkpoint shows it.
func rewriteChain(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Exec(`UPDATE events SET event = replace(event, 'user:alice', 'user:mallory'), principal = 'user:mallory' WHERE decision_id = 'late-1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE events SET event = replace(event, 'data/q3.md', 'data/x.md') WHERE decision_id = 'd-000'`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tx.QueryContext(ctx, chainSelect, DefaultPartition, 1)
	if err != nil {
		t.Fatal(err)
	}
	type upd struct {
		table string
		pos   int64
		hash  []byte
	}
	var ups []upd
	prev := genesis
	for rows.Next() {
		var e chainRow
		var seq, lat, tin, tout, latency sql.NullInt64
		var body, status, resp, em sql.NullString
		var cols [12]sql.NullString
		if err := rows.Scan(&e.pos, &e.kind, &e.key, &e.ts, &body, &e.hash, &seq, &status, &lat, &resp, &em, &tin, &tout,
			&cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5], &cols[6], &cols[7], &cols[8], &cols[9], &latency, &cols[11]); err != nil {
			t.Fatal(err)
		}
		if e.kind == 0 {
			prev = chainHash(prev, eventEntry(DefaultPartition, e.pos, e.key, e.ts, body.String))
			ups = append(ups, upd{"events", e.pos, prev})
		} else {
			c := completionRow{id: e.key, ts: e.ts, status: status.String, latency: lat.Int64, response: resp, err: em, tokensIn: tin, tokensOut: tout}
			prev = chainHash(prev, c.entry(DefaultPartition, e.pos))
			ups = append(ups, upd{"completions", e.pos, prev})
		}
	}
	rows.Close()
	for _, u := range ups {
		if _, err := tx.Exec("UPDATE "+u.table+" SET hash = ? WHERE pos = ?", u.hash, u.pos); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestRetentionDeletesWholeSegmentsAndVerifies(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	path := filepath.Join(t.TempDir(), "decisions.db")
	l, err := Open(ctx, path, Clock(clock), SigningKey(key), CheckpointEvery(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	record := func(id string) {
		t.Helper()
		e := sampleEvent(id)
		e.Timestamp = time.Time{}
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// Segment 1 (day 1): old-1, old-2 and its completion; segment 2 (day 10): new-1 (whose
	// completion lands in segment 3), then new-2.
	record("old-1")
	record("old-2")
	if err := l.Complete(ctx, &Completion{DecisionID: "old-2", Status: StatusOK}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	advance(9 * 24 * time.Hour)
	record("new-1")
	if _, err := l.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	advance(time.Hour)
	if err := l.Complete(ctx, &Completion{DecisionID: "new-1", Status: StatusOK}); err != nil {
		t.Fatal(err)
	}
	record("new-2")

	// A 7-day retention deletes segment 1 only: segment 2 closed an hour ago.
	rec, err := l.Retain(ctx, now.Add(-7*24*time.Hour))
	if err != nil || rec == nil {
		t.Fatalf("retain: %+v %v", rec, err)
	}
	if rec.Below != 4 || rec.Events != 2 || rec.Completions != 1 {
		t.Errorf("retention record %+v", rec)
	}
	recs, err := l.Query(ctx, Filter{Oldest: true})
	if err != nil || len(recs) != 2 || recs[0].Event.DecisionID != "new-1" || recs[0].Completion == nil {
		t.Fatalf("after retention: %+v %v", recs, err)
	}
	// Nothing more has expired.
	if again, err := l.Retain(ctx, now.Add(-7*24*time.Hour)); err != nil || again != nil {
		t.Errorf("second pass: %+v %v", again, err)
	}
	if _, err := l.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	rep := verify(t, path, VerifyOptions{PublicKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}})
	p := rep.Partitions[0]
	if !rep.OK || p.First != 4 || p.Retention == nil || p.Markers != 1 || p.Events != 2 {
		t.Fatalf("verify after retention: %+v problem %v", p, p.Problem)
	}

	// Deleting anything else is refused by the triggers, and found by Verify when forced.
	if err := execRawErr(path, "DELETE FROM events WHERE decision_id = 'new-1'"); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("delete above the floor: %v", err)
	}
	execRaw(t, path, "DROP TRIGGER events_no_delete; DELETE FROM events WHERE decision_id = 'new-1'")
	rep = verify(t, path, VerifyOptions{})
	if p := rep.Partitions[0].Problem; rep.OK || p == nil || p.Pos != 5 || !strings.Contains(p.Reason, "positions 4 to 4 are missing") {
		t.Errorf("deleting the first kept event: %v", p)
	}
}

func TestRetentionRunsOnItsOwn(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	var mu sync.Mutex
	offset := time.Duration(0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return start.Add(offset) }
	path := filepath.Join(t.TempDir(), "decisions.db")
	l, err := Open(ctx, path, Clock(clock), CheckpointEvery(5*time.Millisecond), RetentionPeriod(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Record(ctx, sampleEvent("a")); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	count := func(q string) (n int) {
		_ = r.db.QueryRow(q).Scan(&n)
		return n
	}
	waitFor(t, "a checkpoint", func() bool { return count("SELECT count(*) FROM checkpoints") == 1 })
	mu.Lock()
	offset = 2 * time.Hour
	mu.Unlock()
	waitFor(t, "retention", func() bool { return count("SELECT count(*) FROM events") == 0 })
	if err := l.Record(ctx, sampleEvent("b")); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if rep, err := r.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// TestTwoWritersOneChain: two logs on one file (a gateway and `lushctl audit prune`, say)
// extend one chain, since each transaction reads the head it extends.
func TestTwoWritersOneChain(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "decisions.db")
	a, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w, l := range []*Log{a, b} {
		wg.Go(func() {
			for i := range 50 {
				if err := l.Record(ctx, sampleEvent(fmt.Sprintf("w%d-%d", w, i))); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := errorsJoin(a.Close(), b.Close()); err != nil {
		t.Fatal(err)
	}
	rep := verify(t, path, VerifyOptions{})
	if p := rep.Partitions[0]; !rep.OK || p.Events != 100 || p.Last != 100 {
		t.Fatalf("two writers: %+v %v", p, p.Problem)
	}
}

// TestWritersTakingTurnsOneChain: the writer extends the head its last commit left without
// reading it while no other connection has committed; two logs on one file that write strictly
// in turn (every transaction follows one of the other's), completions, checkpoints and a
// retention pass by the other among them, must still extend one chain.
func TestWritersTakingTurnsOneChain(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	path := filepath.Join(t.TempDir(), "decisions.db")
	var logs [2]*Log
	for i := range logs {
		l, err := Open(ctx, path, Clock(clock), CheckpointEvery(0))
		if err != nil {
			t.Fatal(err)
		}
		logs[i] = l
	}
	for i := range 40 {
		l, other := logs[i%2], logs[(i+1)%2]
		e := sampleEvent(fmt.Sprintf("turn-%02d", i))
		e.Timestamp = time.Time{}
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 { // the other completes it
			if err := other.Complete(ctx, &Completion{DecisionID: e.DecisionID, Status: StatusOK}); err != nil {
				t.Fatal(err)
			}
		}
		switch i {
		case 9, 19:
			if _, err := other.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
			advance(24 * time.Hour)
		case 29: // the other deletes the first segment: its floor moves
			if rec, err := other.Retain(ctx, clock().Add(-36*time.Hour)); err != nil || rec == nil {
				t.Fatalf("retention: %+v %v", rec, err)
			}
		}
	}
	if err := errorsJoin(logs[0].Close(), logs[1].Close()); err != nil {
		t.Fatal(err)
	}
	rep := verify(t, path, VerifyOptions{})
	if p := rep.Partitions[0]; !rep.OK || p.Problem != nil {
		t.Fatalf("writers taking turns: %+v %v", p, p.Problem)
	}
	// And a writer that reopens the file after the other wrote extends the chain too.
	l, err := Open(ctx, path, Clock(clock), CheckpointEvery(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, sampleEvent("after")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if rep := verify(t, path, VerifyOptions{}); !rep.OK {
		t.Fatalf("after reopening: %+v", rep.Partitions[0])
	}
}

func errorsJoin(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestPartitionsChainSeparately: each partition is its own chain, and Verify reports each.
func TestPartitionsChainSeparately(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "decisions.db")
	for _, part := range []string{"gw-1", "gw-2"} {
		l, err := Open(ctx, path, Partition(part))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := l.Record(ctx, sampleEvent(fmt.Sprintf("%s-%d", part, i))); err != nil {
				t.Fatal(err)
			}
		}
		l.Close()
	}
	rep := verify(t, path, VerifyOptions{})
	if !rep.OK || len(rep.Partitions) != 2 || rep.Partitions[1].Partition != "gw-2" || rep.Partitions[1].Last != 3 {
		t.Fatalf("%+v", rep)
	}
	execRaw(t, path, "DROP TRIGGER events_no_delete; DELETE FROM events WHERE decision_id = 'gw-2-0'")
	rep = verify(t, path, VerifyOptions{})
	if rep.OK || rep.Partitions[0].Problem != nil || rep.Partitions[1].Problem == nil {
		t.Fatalf("only gw-2 is broken: %+v", rep)
	}
}

func TestMigrationChainsExistingEntries(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v2.db")
	db, err := openDB(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, migrations[0]+";"+migrations[1]+"; PRAGMA user_version = 2"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := db.ExecContext(ctx, `INSERT INTO events (decision_id, ts, revision, point, principal, agent, action, tool, tool_name, access, risk, outcome, latency_ns, trace_id, event)
			VALUES (?, ?, 'r', 'mcp-gateway', 'user:a', '', 'tools/call', '', '', '', '', 'allow', 1, '', ?)`,
			fmt.Sprint(i), i, fmt.Sprintf(`{"decision_id":"%d","path":"","input":null,"result":null,"timestamp":"1970-01-01T00:00:00.00000000%dZ","labels":null,"bundles":null,"metrics":null,"revision":"r","enforcement_point":"mcp-gateway","principal":"user:a","groups":null,"action":"tools/call","outcome":"allow","rules":null,"latency_ns":1}`, i, i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO completions (decision_id, ts, status, latency_ns) VALUES ('1', 5, 'ok', 2)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	l, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, sampleEvent("after")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	rep := verify(t, path, VerifyOptions{})
	if p := rep.Partitions[0]; !rep.OK || p.Events != 4 || p.Completions != 1 || p.Last != 5 {
		t.Fatalf("migrated log: %+v %v", p, p.Problem)
	}
}

func TestSigningKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "checkpoint.key")
	key, err := LoadOrCreateSigningKey(path)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreateSigningKey(path)
	if err != nil || !again.Equal(key) {
		t.Fatalf("reload: %v", err)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v", info.Mode().Perm())
	}
	pubPEM, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(pubPEM)
	if err != nil || !pub.Equal(key.Public()) {
		t.Fatalf("public key: %v", err)
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateSigningKey(path); err == nil || !strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), "garbage") {
		t.Errorf("bad key file: %v", err)
	}
}

// TestSigningKeyFileCreatedOnce: replicas that start together on one key path all get the one
// key whoever created it, never a half-written file.
func TestSigningKeyFileCreatedOnce(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), "checkpoint.key")
		keys := make([]ed25519.PrivateKey, 8)
		errs := make([]error, len(keys))
		var wg sync.WaitGroup
		for i := range keys {
			wg.Go(func() { keys[i], errs[i] = LoadOrCreateSigningKey(path) })
		}
		wg.Wait()
		for i := range keys {
			if errs[i] != nil {
				t.Fatalf("round %d, replica %d: %v", round, i, errs[i])
			}
			if !keys[i].Equal(keys[0]) {
				t.Fatalf("round %d: replicas got different keys", round)
			}
		}
		if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 2 {
			t.Fatalf("round %d: %d files beside the key, want the key and its .pub", round, len(entries))
		}
	}
}

// TestRetentionDeletesInChunks: a large expired segment is deleted over several transactions;
// between them the log verifies (rows below the floor are ignored) and takes writes.
func TestRetentionDeletesInChunks(t *testing.T) {
	ctx := context.Background()
	chunk := func(c *config) error { c.retentionChunk = 4; return nil }
	path := filepath.Join(t.TempDir(), "decisions.db")
	l, err := Open(ctx, path, chunk, CheckpointEvery(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 10 {
		if err := l.Record(ctx, sampleEvent(fmt.Sprintf("e-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	// One pass: the record, the floor and the first chunk.
	r := &request{kind: kindRetention, args: []any{time.Now().Add(time.Hour)}, done: make(chan error, 1)}
	if err := l.submit(ctx, r); err != nil {
		t.Fatal(err)
	}
	res := r.out.(retentionResult)
	if res.rec == nil || res.rec.Events != 10 || !res.more {
		t.Fatalf("first pass: %+v", res)
	}
	if err := l.Record(ctx, sampleEvent("between")); err != nil {
		t.Fatal(err)
	}
	rep := verify(t, path, VerifyOptions{})
	if p := rep.Partitions[0]; !rep.OK || p.First != 11 || p.Events != 1 || p.Markers != 1 {
		t.Fatalf("between passes: %+v %v", p, p.Problem)
	}
	// Retain finishes the deletion (and finds nothing new to record).
	rec, err := l.Retain(ctx, time.Now().Add(-time.Hour))
	if err != nil || rec != nil {
		t.Fatalf("sweep: %+v %v", rec, err)
	}
	var left int
	if err := l.reader.db.QueryRow("SELECT count(*) FROM events WHERE pos < 11").Scan(&left); err != nil || left != 0 {
		t.Errorf("%d expired events left (%v)", left, err)
	}
}
