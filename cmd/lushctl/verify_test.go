package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/test/pgtest"
)

// chainedLog writes five decisions to a log whose checkpoints are signed with a key beside it.
func chainedLog(t *testing.T) (logPath, pubKey string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	logPath = filepath.Join(dir, "decisions.db")
	key, err := decisionlog.LoadOrCreateSigningKey(filepath.Join(dir, "checkpoint.key"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := decisionlog.Open(ctx, logPath, decisionlog.SigningKey(key))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		e := &decisionlog.Event{DecisionID: fmt.Sprintf("dec-%d", i), Principal: "user:alice", Action: "tools/call", Outcome: authz.OutcomeAllow,
			Input: json.RawMessage(`{"arguments":{"path":"q3.md"}}`)}
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return logPath, filepath.Join(dir, "checkpoint.key.pub")
}

func TestAuditVerify(t *testing.T) {
	logPath, pub := chainedLog(t)
	r := lushctl(t, "", "audit", "verify", "--log", logPath, "--public-key", pub)
	if r.code != 0 || !strings.Contains(r.stdout, "verified: complete and unaltered") || !strings.Contains(r.stdout, "(pinned)") {
		t.Fatalf("intact log: %d %s %s", r.code, r.stdout, r.stderr)
	}
	db, err := sql.Open("sqlite", logPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DROP TRIGGER events_no_update; UPDATE events SET event = replace(event, 'q3.md', 'q4.md') WHERE decision_id = 'dec-2'`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	r = lushctl(t, "", "audit", "verify", "--log", logPath, "-o", "json")
	var rep decisionlog.VerifyReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != exitFailed {
		t.Fatalf("tampered log: %d %v %s %s", r.code, err, r.stdout, r.stderr)
	}
	if p := rep.Partitions[0].Problem; rep.OK || p == nil || p.DecisionID != "dec-2" || p.Pos != 3 {
		t.Errorf("problem %+v", p)
	}
	r = lushctl(t, "", "audit", "verify", "--log", logPath)
	if r.code != exitFailed || !strings.Contains(r.stdout, "first broken entry: position 3 (event dec-2, seq 3)") {
		t.Errorf("text: %d %s", r.code, r.stdout)
	}
	for _, args := range [][]string{
		{"--public-key", filepath.Join(t.TempDir(), "missing.pub")},
		{"-o", "yaml"},
	} {
		if r := lushctl(t, "", append([]string{"audit", "verify", "--log", logPath}, args...)...); r.code != exitUsage {
			t.Errorf("%v: %d %s", args, r.code, r.stderr)
		}
	}
	if r := lushctl(t, "", "audit", "verify", "--log", filepath.Join(t.TempDir(), "none.db")); r.code != exitRuntime || !strings.Contains(r.stderr, "no decision log at") {
		t.Errorf("missing log: %d %s", r.code, r.stderr)
	}
}

// TestAuditVerifyUnprotectedTail: verify vouches for the entries up to the last checkpoint and
// says how many come after it: none for a log closed cleanly; some for one whose gateway was
// killed between checkpoints, even after the newest of them were cut off. --strict fails then.
func TestAuditVerifyUnprotectedTail(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "decisions.db")
	key, err := decisionlog.LoadOrCreateSigningKey(filepath.Join(dir, "checkpoint.key"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := decisionlog.Open(ctx, logPath, decisionlog.SigningKey(key), decisionlog.CheckpointEvery(0))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := l.Record(ctx, &decisionlog.Event{DecisionID: fmt.Sprintf("dec-%d", i), Principal: "user:alice", Action: "tools/call", Outcome: authz.OutcomeAllow}); err != nil {
			t.Fatal(err)
		}
		if i == 4 {
			if _, err := l.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Close(); err != nil { // it signs position 8
		t.Fatal(err)
	}
	pub := filepath.Join(dir, "checkpoint.key.pub")
	r := lushctl(t, "", "audit", "verify", "--log", logPath, "--public-key", pub, "--strict")
	if r.code != 0 || !strings.Contains(r.stdout, "verified: complete and unaltered up to the last checkpoint, and nothing comes after it") ||
		!strings.Contains(r.stdout, "last checkpoint: position 8 at ") || !strings.Contains(r.stdout, "; nothing after it") {
		t.Fatalf("a log closed cleanly: %d %s %s", r.code, r.stdout, r.stderr)
	}

	// A kill leaves no checkpoint at 8; then someone deletes the newest entry.
	db, err := sql.Open("sqlite", logPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DROP TRIGGER checkpoints_no_delete; DELETE FROM checkpoints WHERE pos = 8;
DROP TRIGGER events_no_delete; DELETE FROM events WHERE pos = 8`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	r = lushctl(t, "", "audit", "verify", "--log", logPath, "--public-key", pub)
	if r.code != 0 || !strings.Contains(r.stdout, "verified: complete and unaltered up to the last checkpoint; 2 entries after it cannot be vouched for (hash-chained, but they could have been cut off)") ||
		!strings.Contains(r.stdout, "last checkpoint: position 5 at ") || !strings.Contains(r.stdout, "; 2 entries after it (positions 6..7) cannot be vouched for") {
		t.Errorf("the tail after the last checkpoint: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = lushctl(t, "", "audit", "verify", "--log", logPath, "--strict")
	if r.code != exitFailed || !strings.Contains(r.stderr, "--strict: 2 entries after the last checkpoint cannot be vouched for") {
		t.Errorf("--strict: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = lushctl(t, "", "audit", "verify", "--log", logPath, "--strict", "-o", "json")
	var rep decisionlog.VerifyReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != exitFailed || !rep.OK || rep.Uncovered != 2 || rep.Partitions[0].Uncovered != 2 {
		t.Errorf("--strict -o json: %d %v %s", r.code, err, r.stdout)
	}
}

func TestAuditRetain(t *testing.T) {
	logPath, pub := chainedLog(t)
	time.Sleep(20 * time.Millisecond) // the segment closed (at Close) before now - 10ms
	r := lushctl(t, "", "audit", "retain", "--log", logPath, "--older-than", "10ms", "-o", "json")
	var out struct{ Retention *decisionlog.RetentionRecord }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 || out.Retention == nil || out.Retention.Events != 5 {
		t.Fatalf("retain: %d %v %s %s", r.code, err, r.stdout, r.stderr)
	}
	r = lushctl(t, "", "audit", "verify", "--log", logPath, "--public-key", pub)
	if r.code != 0 || !strings.Contains(r.stdout, "retention deleted positions below 6") {
		t.Errorf("verify after retain: %d %s", r.code, r.stdout)
	}
	if r := lushctl(t, "", "audit", "retain", "--log", logPath, "--older-than", "1h"); r.code != 0 || !strings.Contains(r.stdout, "nothing to delete") {
		t.Errorf("second retain: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := lushctl(t, "", "audit", "retain", "--log", logPath); r.code != exitUsage {
		t.Errorf("no --older-than: %d", r.code)
	}
}

// TestAuditOnPostgres: the audit commands read a PostgreSQL log given as a URL, and never print
// the URL's password.
func TestAuditOnPostgres(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.Start(t)
	u, err := url.Parse(cluster.CreateDatabase(t, "audit"))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("postgres", "hunter2-secret") // the cluster trusts loopback: any password works
	dsn := u.String()
	l, err := decisionlog.Open(ctx, dsn, decisionlog.Partition("gw-1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		e := &decisionlog.Event{DecisionID: fmt.Sprintf("pg-%d", i), Principal: "user:alice", Action: "tools/call", Outcome: authz.OutcomeDeny}
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "verify", "--log", dsn}, "partition gw-1: positions 1..3: 3 events"},
		{[]string{"audit", "query", "--log", dsn, "--outcome", "deny"}, "pg-2"},
		{[]string{"audit", "verify", "--log", dsn, "--partition", "nope"}, ""},
	} {
		r := lushctl(t, "", tc.args...)
		if strings.Contains(r.stdout+r.stderr, "hunter2") {
			t.Errorf("%v printed the password:\n%s%s", tc.args[:2], r.stdout, r.stderr)
		}
		if tc.want == "" {
			if r.code == 0 {
				t.Errorf("%v: exit 0", tc.args)
			}
			continue
		}
		if r.code != 0 || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%v: %d %s %s", tc.args[:2], r.code, r.stdout, r.stderr)
		}
	}
}

// TestBuildsShow: a kept build with its roles, rate limits and access review, as text and JSON.
func TestBuildsShow(t *testing.T) {
	dir := quickstartCopy(t)
	p := filepath.Join(dir, "lush.yaml")
	data, _ := os.ReadFile(p)
	os.WriteFile(p, append(data, []byte("\nrate_limits:\n  - principal: group:engineering\n    rate: 5/s\n    burst: 10\n"+
		"budgets:\n  - {name: notes-credits, principal: group:engineering, credits: 50, per: week, costs: {mcp://notes.example.com/mcp: 5}}\n")...), 0o644)
	r := lushctl(t, "", "build", "-q", "--offline", dir)
	if r.code != 0 {
		t.Fatalf("build: %s", r.stderr)
	}
	hash := strings.TrimSpace(r.stdout)
	r = lushctl(t, "", "builds", "show", hash[:10], dir)
	for _, want := range []string{"build " + hash, "role audit: group:security", "rate limits: group:engineering 5/s burst 10",
		"budget notes-credits: each of group:engineering, 50 credits per week (costs: mcp://notes.example.com/mcp 5)",
		"the decision log (audit/read)", "SUBJECT"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("text lacks %q: %d %s %s", want, r.code, r.stdout, r.stderr)
		}
	}
	auditRow := false
	for _, line := range strings.Split(r.stdout, "\n") {
		f := strings.Fields(line)
		auditRow = auditRow || len(f) > 2 && f[0] == "group:security" && f[1] == "-" && strings.Contains(line, "audit/read")
	}
	if !auditRow {
		t.Error("no row says group:security may read the decision log")
	}
	r = lushctl(t, "", "builds", "show", hash, dir, "-o", "json")
	var shown buildShown
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || r.code != 0 {
		t.Fatalf("json: %d %v %s", r.code, err, r.stderr)
	}
	if shown.Hash != hash || len(shown.Access.Rows) == 0 || len(shown.Limits) != 1 || len(shown.Budgets) != 1 || len(shown.Roles["audit"]) != 1 {
		t.Errorf("%+v", shown)
	}
	if r := lushctl(t, "", "builds", "show", "ffffffffff", dir); r.code != exitUsage {
		t.Errorf("unknown build: %d %s", r.code, r.stderr)
	}
}
