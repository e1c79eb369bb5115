package test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, to read the PostgreSQL store
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver, to read the SQLite store

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/scheduler"
	"github.com/lush-agents/lush/test/pgtest"
)

// These tests run the scheduler as operators do: `lushctl serve` processes, killed with SIGKILL
// or stopped with SIGTERM, real time, the stores and decision logs read afterwards.

// schedKey is the API key of user:ops (group:ops), who may trigger and read the loops.
const schedKey = "ops-key-0123456789abcdef"

// schedGateway is the gateway config of the scheduler projects: one API key.
func schedGateway() string {
	return "auth:\n  api_keys:\n    - {name: ops, sha256: " + sha256hex(schedKey) + ", principal: user:ops, groups: [group:ops]}\n"
}

// writeProject writes files into a new temporary directory and returns it.
func writeProject(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// buildAndDeploy keeps a build of dir (lushctl build) and makes it the deployed one (lushctl
// deploy), which serve follows; it returns the build's hash.
func buildAndDeploy(t *testing.T, dir string) string {
	t.Helper()
	hash := strings.TrimSpace(runLushctl(t, "build", "-q", "--offline", dir))
	if len(hash) != 64 {
		t.Fatalf("lushctl build -q printed %q, not a hash", hash)
	}
	runLushctl(t, "deploy", hash, dir)
	return hash
}

// serveEnv is the environment of `lushctl serve` for dir: the scripted model replaying
// dir/scripts, no traces, the given port, decision log and scheduler store, plus extra.
func serveEnv(dir string, port int, decisionLog, store string, extra ...string) []string {
	return append([]string{
		fmt.Sprintf("PORT=%d", port), "LUSH_LISTEN_HOST=127.0.0.1", "LUSH_PROJECT=" + dir, "LUSH_CONFIG=" + filepath.Join(dir, "gateway.yaml"),
		"LUSH_MODEL_PROVIDER=scripted", "LUSH_SCRIPTS=" + filepath.Join(dir, "scripts"), "TRACE_BACKEND=none",
		"LUSH_DECISION_LOG=" + decisionLog, "LUSH_SCHEDULER_DB=" + store, "LOG_LEVEL=info",
		"LUSH_BUILD=", "LUSH_TOKEN=", "LUSH_URL=", // not inherited from the developer's shell
	}, extra...)
}

// kill9 kills p's process group with SIGKILL (no graceful stop) and waits for it.
func kill9(t *testing.T, p *proc) {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("process %d did not die on SIGKILL", p.cmd.Process.Pid)
	}
}

// firingRow is a row of lush_loop_firings, read from the store itself.
type firingRow struct {
	Loop        string
	At          int64 // scheduled_at, unix µs
	Trigger     string
	Status      string
	Attempts    int
	Owner       string
	LeaseUntil  int64
	StartedAt   int64
	FinishedAt  int64
	DecisionID  string
	Error       string
	ScheduledAt time.Time
}

func (r firingRow) String() string {
	return fmt.Sprintf("%s@%s trigger=%s status=%s attempts=%d owner=%q decision=%s error=%q", r.Loop,
		r.ScheduledAt.Format("15:04:05.000000"), r.Trigger, r.Status, r.Attempts, r.Owner, r.DecisionID, r.Error)
}

// readFirings reads every firing of the store, by loop and then scheduled time.
func readFirings(t *testing.T, db *sql.DB) []firingRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT loop_name, scheduled_at, trigger_kind, status, attempts, owner, lease_until,
		started_at, finished_at, decision_id, error FROM lush_loop_firings ORDER BY loop_name, scheduled_at`)
	if err != nil {
		t.Fatalf("read the scheduler store: %v", err)
	}
	defer rows.Close()
	var out []firingRow
	for rows.Next() {
		var r firingRow
		if err := rows.Scan(&r.Loop, &r.At, &r.Trigger, &r.Status, &r.Attempts, &r.Owner, &r.LeaseUntil, &r.StartedAt,
			&r.FinishedAt, &r.DecisionID, &r.Error); err != nil {
			t.Fatalf("read the scheduler store: %v", err)
		}
		r.ScheduledAt = time.UnixMicro(r.At).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read the scheduler store: %v", err)
	}
	return out
}

// openSQLiteStore opens a SQLite scheduler store read-only (serve may be writing it).
func openSQLiteStore(t *testing.T, path string) *sql.DB {
	t.Helper()
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(5000)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// sqliteFirings reads every firing of a SQLite store, opening and closing it around the read.
func sqliteFirings(t *testing.T, path string) []firingRow {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	db := openSQLiteStore(t, path)
	defer db.Close()
	return readFirings(t, db)
}

// invokeDecisions reads the agent/invoke decisions of principal from a decision log, oldest first
// (nil while the log does not exist yet).
func invokeDecisions(t *testing.T, path, principal string) []decisionlog.Record {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	r, err := decisionlog.OpenReader(path)
	if err != nil {
		t.Fatalf("open decision log: %v", err)
	}
	defer r.Close()
	recs, err := r.Query(context.Background(), decisionlog.Filter{Principal: principal, Action: authz.ActionAgentInvoke,
		Limit: decisionlog.MaxLimit, Oldest: true})
	if err != nil {
		t.Fatalf("query decision log %s: %v", path, err)
	}
	if len(recs) == decisionlog.MaxLimit {
		t.Fatalf("decision log %s holds %d or more decisions of %s: raise the query's limit", path, len(recs), principal)
	}
	return recs
}

// eventually polls cond every interval until it reports true, failing with its last message
// after d.
func eventually(t *testing.T, d, interval time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, msg)
		}
		time.Sleep(interval)
	}
}

// ownedBy reports whether a scheduler instance name (host-pid-random) is that of process pid.
func ownedBy(owner string, pid int) bool {
	i := strings.LastIndexByte(owner, '-')
	return i > 0 && strings.HasSuffix(owner[:i], fmt.Sprintf("-%d", pid))
}

// The kill-9 project: one loop on an agent whose only model turn takes 3 s. The loop's schedule
// is @yearly, so nothing but the manual trigger fires during the test.
func killProject() map[string]string {
	return map[string]string{
		"lush.yaml": "project: sched-kill\nservice_accounts:\n  - name: loop-bot\n",
		"agents/sleeper/spec.yaml": "name: sleeper\nmodel: gemini-2.5-flash\ndescription: Takes its time.\n" +
			"acl:\n  - {principal: serviceaccount:loop-bot, role: execute}\n",
		"loops/slow.yaml": "name: slow\nschedule: \"@yearly\"\nagent: sleeper\nrun_as: serviceaccount:loop-bot\n" +
			"instruction: Think it over.\ntimeout: 1m\nacl:\n  - {principal: group:ops, role: execute}\n",
		"scripts/sleeper.yaml": "turns:\n  - text: \"Thought it over.\"\n    sleep: 3s\n",
		"gateway.yaml":         schedGateway(),
	}
}

// TestSchedulerKill9MidRunCompletesOnce: `lushctl serve` is killed with SIGKILL while a firing
// runs; a new serve on the same store and decision log takes the firing over once its lease
// expires, and it completes exactly once: one row, succeeded, attempts 2, shown once by `lushctl
// loop history`, with the two agent/invoke decisions (the interrupted one and the finished one)
// in the decision log.
func TestSchedulerKill9MidRunCompletesOnce(t *testing.T) {
	began := time.Now()
	const principal = "serviceaccount:loop-bot"
	dir := writeProject(t, killProject())
	hash := buildAndDeploy(t, dir)
	state := t.TempDir()
	storePath := filepath.Join(state, "scheduler.db")
	logPath := filepath.Join(state, "decisions.db")
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	env := serveEnv(dir, port, logPath, storePath, "LUSH_SCHEDULER_LEASE=2s", "LUSH_SCHEDULER_POLL=200ms")
	// On failure, the store's rows help more than the process logs alone.
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range sqliteFirings(t, storePath) {
				t.Logf("store row: %s", r)
			}
		}
	})

	first := startProc(t, env, lushctlBin, "serve")
	waitFor(t, first, "lush: build "+hash[:12], 60*time.Second)

	out := runLushctl(t, "loop", "trigger", "slow", "--detach", "-o", "json", "--url", base, "--token", schedKey)
	var trig struct {
		DecisionID string           `json:"decision_id"`
		Firing     scheduler.Firing `json:"firing"`
	}
	if err := json.Unmarshal([]byte(out), &trig); err != nil {
		t.Fatalf("lushctl loop trigger -o json: %v\n%s", err, out)
	}
	if trig.Firing.Loop != "slow" || trig.Firing.Trigger != scheduler.TriggerManual || trig.DecisionID == "" {
		t.Fatalf("lushctl loop trigger: %s", out)
	}
	key := trig.Firing.ScheduledAt.UnixMicro()
	findKey := func(rows []firingRow) (firingRow, int) {
		var found firingRow
		n := 0
		for _, r := range rows {
			if r.Loop == "slow" && r.At == key {
				found, n = r, n+1
			}
		}
		return found, n
	}

	// Wait until the firing runs in the first process and its agent/invoke decision is logged:
	// the model's turn then sleeps 3 s, and the process dies in the middle of it.
	var before firingRow
	eventually(t, 20*time.Second, 25*time.Millisecond, func() (bool, string) {
		r, n := findKey(sqliteFirings(t, storePath))
		if n != 1 || r.Status != string(scheduler.StatusRunning) {
			return false, fmt.Sprintf("the firing is not running yet: %d row(s) %s", n, r)
		}
		if d := invokeDecisions(t, logPath, principal); len(d) != 1 {
			return false, fmt.Sprintf("%d agent/invoke decisions of %s, want 1", len(d), principal)
		}
		before = r
		return true, ""
	})
	kill9(t, first)
	killedAt := time.Now()
	if before.Attempts != 1 || !ownedBy(before.Owner, first.cmd.Process.Pid) {
		t.Fatalf("before the kill: %s, want attempt 1 owned by pid %d", before, first.cmd.Process.Pid)
	}
	if r, _ := findKey(sqliteFirings(t, storePath)); r.Status != string(scheduler.StatusRunning) || r.FinishedAt != 0 {
		t.Fatalf("the firing ended before the kill, so nothing was interrupted: %s\n%s", r, first.out.String())
	}
	if strings.Contains(first.out.String(), "loop firing finished") {
		t.Fatalf("the first process finished the firing before it was killed:\n%s", first.out.String())
	}

	// A new serve on the same port, store and decision log.
	second := startProc(t, env, lushctlBin, "serve")
	waitFor(t, second, "lush: build "+hash[:12], 60*time.Second)
	var after firingRow
	eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		r, n := findKey(sqliteFirings(t, storePath))
		after = r
		return n == 1 && scheduler.Status(r.Status).Final(), fmt.Sprintf("the firing is not final: %d row(s) %s", n, r)
	})
	tookOver := time.Since(killedAt)

	// The store: one row for the loop (the key is its primary key), succeeded on the second
	// attempt, claimed again only once the first attempt's lease had expired.
	rows := sqliteFirings(t, storePath)
	if len(rows) != 1 {
		t.Errorf("the store holds %d firings, want exactly the triggered one: %v", len(rows), rows)
	}
	if after.Status != string(scheduler.StatusSucceeded) || after.Attempts != 2 || after.DecisionID == "" || after.Owner != "" {
		t.Errorf("after the restart: %s, want succeeded after 2 attempts with a decision id and no owner", after)
	}
	if after.StartedAt < before.LeaseUntil {
		t.Errorf("the second attempt started at %s, before the first attempt's lease ended (%s)",
			time.UnixMicro(after.StartedAt).UTC().Format(time.RFC3339Nano), time.UnixMicro(before.LeaseUntil).UTC().Format(time.RFC3339Nano))
	}
	if !strings.Contains(second.out.String(), "attempt=2") {
		t.Errorf("the second process did not log the second attempt:\n%s", second.out.String())
	}

	// `lushctl loop history`, as an operator reads it: the firing once, succeeded, attempts 2.
	out = runLushctl(t, "loop", "history", "slow", "--limit", "100", "-o", "json", "--url", base, "--token", schedKey)
	var hist struct {
		Firings []scheduler.Firing `json:"firings"`
	}
	if err := json.Unmarshal([]byte(out), &hist); err != nil {
		t.Fatalf("lushctl loop history -o json: %v\n%s", err, out)
	}
	var shown []scheduler.Firing
	for _, f := range hist.Firings {
		if f.ScheduledAt.UnixMicro() == key {
			shown = append(shown, f)
		}
	}
	if len(shown) != 1 || len(hist.Firings) != 1 {
		t.Errorf("lushctl loop history shows the firing %d times among %d firings, want once among 1:\n%s", len(shown), len(hist.Firings), out)
	} else if f := shown[0]; f.Status != scheduler.StatusSucceeded || f.Attempts != 2 || f.DecisionID != after.DecisionID || f.Trigger != scheduler.TriggerManual {
		t.Errorf("lushctl loop history: %+v, want succeeded, attempts 2, decision %s", f, after.DecisionID)
	}
	text := runLushctl(t, "loop", "history", "slow", "--url", base, "--token", schedKey)
	if !strings.Contains(text, "succeeded") || strings.Count(text, "\n") != 2 {
		t.Errorf("lushctl loop history (text) should show one succeeded firing:\n%s", text)
	}

	if code := second.stop(t); code != 0 {
		t.Errorf("serve exited %d on SIGTERM", code)
	}

	// The decision log of both processes: exactly two agent/invoke decisions of the loop's
	// account, both allowed: the interrupted one (no successful completion: the process died) and
	// the one the history names, which completed ok.
	decs := invokeDecisions(t, logPath, principal)
	if len(decs) != 2 {
		t.Fatalf("%d agent/invoke decisions of %s, want 2 (interrupted, finished): %+v", len(decs), principal, decs)
	}
	interrupted, finished := decs[0], decs[1]
	for _, d := range decs {
		if d.Event.Outcome != authz.OutcomeAllow || d.Event.Agent != "sleeper" {
			t.Errorf("decision %s: outcome %s, agent %s; want allow, sleeper", d.Event.DecisionID, d.Event.Outcome, d.Event.Agent)
		}
	}
	if finished.Event.DecisionID != after.DecisionID {
		t.Errorf("the finished decision is %s, the history names %s", finished.Event.DecisionID, after.DecisionID)
	}
	if c := finished.Completion; c == nil || c.Status != decisionlog.StatusOK {
		t.Errorf("the finished decision's completion: %+v, want ok", c)
	}
	if c := interrupted.Completion; c != nil && c.Status == decisionlog.StatusOK {
		t.Errorf("the interrupted decision completed ok: %+v", c)
	}
	if !interrupted.Event.Timestamp.Before(killedAt) || interrupted.Event.Timestamp.Before(before.ScheduledAt) {
		t.Errorf("the interrupted decision is at %s, not between the trigger (%s) and the kill (%s)",
			interrupted.Event.Timestamp, before.ScheduledAt, killedAt)
	}
	if finished.Event.Timestamp.Before(killedAt) {
		t.Errorf("the finished decision is at %s, before the kill (%s)", finished.Event.Timestamp, killedAt)
	}
	t.Logf("firing %s: attempt 1 killed, attempt 2 succeeded %s after the kill (lease 2s); test took %s",
		before.ScheduledAt.Format(time.RFC3339Nano), tookOver.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// The replicas project: three loops firing every second, each on its own agent (so decisions map
// to loops by agent), all as one service account; each model turn takes 300 ms. overlap: queue,
// so that the firings held by a killed replica's leases wait instead of being skipped.
var replicaLoops = map[string]string{"tick-a": "alpha", "tick-b": "bravo", "tick-c": "charlie"} // loop → agent

func replicasProject() map[string]string {
	files := map[string]string{
		"lush.yaml":    "project: sched-replicas\nservice_accounts:\n  - name: tick-bot\n",
		"gateway.yaml": schedGateway(),
	}
	for loop, agent := range replicaLoops {
		files["agents/"+agent+"/spec.yaml"] = "name: " + agent + "\nmodel: gemini-2.5-flash\ndescription: Answers at once.\n" +
			"acl:\n  - {principal: serviceaccount:tick-bot, role: execute}\n"
		files["scripts/"+agent+".yaml"] = "turns:\n  - text: \"" + agent + " ticked.\"\n    sleep: 300ms\n"
		files["loops/"+loop+".yaml"] = "name: " + loop + "\nschedule: \"@every 1s\"\nagent: " + agent +
			"\nrun_as: serviceaccount:tick-bot\ninstruction: Tick.\noverlap: queue\ntimeout: 30s\n" +
			"acl:\n  - {principal: group:ops, role: execute}\n"
	}
	return files
}

// TestSchedulerThreeReplicasOnePostgres: three `lushctl serve` replicas share one PostgreSQL store
// and run three loops firing every second for about 40 s; one replica is killed with SIGKILL in
// the middle of a run. Then every firing scheduled before the stop ran and succeeded (no gap),
// none ran twice (each history row's decision is in exactly one replica's decision log, and the
// only other decisions are the killed replica's interrupted attempts), and the work was spread
// over the replicas.
func TestSchedulerThreeReplicasOnePostgres(t *testing.T) {
	began := time.Now()
	const (
		principal = "serviceaccount:tick-bot"
		before    = 15 * time.Second // running before the kill
		after     = 22 * time.Second // running after the kill, before the stop
		victimIdx = 1                // the replica killed with SIGKILL
	)
	pg := pgtest.Start(t)
	dsn := pg.CreateDatabase(t, "lush_scheduler")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	dir := writeProject(t, replicasProject())
	hash := buildAndDeploy(t, dir)
	state := t.TempDir()

	type replica struct {
		name string
		log  string
		p    *proc
	}
	replicas := make([]*replica, 3)
	for i := range replicas {
		r := &replica{name: fmt.Sprintf("replica-%d", i), log: filepath.Join(state, fmt.Sprintf("decisions-%d.db", i))}
		r.p = startProc(t, serveEnv(dir, freePort(t), r.log, dsn, "LUSH_SCHEDULER_LEASE=2s", "LUSH_SCHEDULER_POLL=200ms"), lushctlBin, "serve")
		replicas[i] = r
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, r := range readFirings(t, db) {
			if r.Status != string(scheduler.StatusSucceeded) || r.Attempts != 1 {
				t.Logf("store row: %s", r)
			}
		}
		for _, r := range replicas {
			t.Logf("%s is pid %d", r.name, r.p.cmd.Process.Pid)
		}
	})
	for _, r := range replicas {
		waitFor(t, r.p, "lush: build "+hash[:12], 60*time.Second)
	}
	ready := time.Now()
	eventually(t, 10*time.Second, 100*time.Millisecond, func() (bool, string) {
		n := len(readFirings(t, db))
		return n > 0, "no firing recorded yet"
	})

	// Midway, kill one replica with SIGKILL while it runs a firing whose agent/invoke decision it
	// has logged (a run interrupted in the middle of the model's turn).
	victim := replicas[victimIdx]
	time.Sleep(time.Until(ready.Add(before)))
	var interrupted *firingRow
	deadline := time.Now().Add(20 * time.Second)
	for interrupted == nil && time.Now().Before(deadline) {
		for _, r := range readFirings(t, db) {
			if r.Status != string(scheduler.StatusRunning) || !ownedBy(r.Owner, victim.p.cmd.Process.Pid) {
				continue
			}
			for _, d := range invokeDecisions(t, victim.log, principal) {
				// A decision of this run (the loop's only one: concurrency 1), made less than half
				// of the model's 300 ms turn ago, so the kill lands in the middle of the run.
				if d.Event.Agent == replicaLoops[r.Loop] && d.Completion == nil && !d.Event.Timestamp.Before(time.UnixMicro(r.StartedAt)) &&
					time.Since(d.Event.Timestamp) < 150*time.Millisecond {
					interrupted = &r
					break
				}
			}
			if interrupted != nil {
				break
			}
		}
		if interrupted == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	kill9(t, victim.p)
	killedAt := time.Now()
	if interrupted != nil {
		// The run may still have ended just before the kill landed: then nothing was interrupted.
		for _, r := range readFirings(t, db) {
			if r.Loop == interrupted.Loop && r.At == interrupted.At && r.Status != string(scheduler.StatusRunning) {
				t.Logf("%s finished before the kill landed: %s", victim.name, r)
				interrupted = nil
				break
			}
		}
	}
	if interrupted == nil {
		t.Logf("%s ran no firing with a logged decision within 20s; killed it anyway", victim.name)
	} else {
		t.Logf("killed %s (pid %d) while it ran %s", victim.name, victim.p.cmd.Process.Pid, interrupted)
	}

	// The two others go on, then stop gracefully: they stop planning and finish their runs.
	time.Sleep(time.Until(killedAt.Add(after)))
	stopAt := time.Now()
	for _, r := range replicas {
		if r == victim {
			continue
		}
		t0 := time.Now()
		if code := r.p.stop(t); code != 0 {
			t.Errorf("%s exited %d on SIGTERM", r.name, code)
		}
		t.Logf("%s stopped %s after SIGTERM", r.name, time.Since(t0).Round(time.Millisecond))
	}
	stopped := time.Now()
	for _, r := range replicas {
		for line := range strings.Lines(r.p.out.String()) {
			if strings.Contains(line, "level=ERROR") {
				t.Errorf("%s logged an error: %s", r.name, line)
			}
		}
	}

	// Decisions of the three logs, by id; no id twice.
	type decision struct {
		rec     decisionlog.Record
		replica int
	}
	decisions := map[string]decision{}
	for i, r := range replicas {
		for _, d := range invokeDecisions(t, r.log, principal) {
			if prev, dup := decisions[d.Event.DecisionID]; dup {
				t.Errorf("decision %s is in the logs of %s and %s", d.Event.DecisionID, replicas[prev.replica].name, r.name)
			}
			if d.Event.Outcome != authz.OutcomeAllow {
				t.Errorf("%s: decision %s of agent %s: outcome %s, want allow", r.name, d.Event.DecisionID, d.Event.Agent, d.Event.Outcome)
			}
			decisions[d.Event.DecisionID] = decision{rec: d, replica: i}
		}
	}

	// The store: per loop, the firings scheduled before the stop are contiguous at 1 s from the
	// first to the last instant before the stop, all succeeded; later ones (planned while the
	// replicas stopped one after the other) succeeded or were left pending, never running.
	rows := readFirings(t, db)
	byLoop := map[string][]firingRow{}
	for _, r := range rows {
		byLoop[r.Loop] = append(byLoop[r.Loop], r)
	}
	used := map[string]bool{}
	ranBy := make([]int, len(replicas))
	retried := 0
	lastBeforeStop := stopAt.Truncate(time.Second).UnixMicro() // @every 1s instants are whole seconds
	if lastBeforeStop == stopAt.UnixMicro() {
		lastBeforeStop -= time.Second.Microseconds()
	}
	for loop, agent := range replicaLoops {
		lr := byLoop[loop]
		var window []firingRow
		for _, r := range lr {
			if r.At < stopAt.UnixMicro() {
				window = append(window, r)
			} else if r.Status != string(scheduler.StatusSucceeded) && r.Status != string(scheduler.StatusPending) {
				t.Errorf("%s: a firing planned during the stop is %s, want succeeded or pending", r, r.Status)
			}
		}
		if len(window) < 30 {
			t.Errorf("loop %s: %d firings before the stop, want at least 30 over %s", loop, len(window), stopAt.Sub(ready).Round(time.Second))
			continue
		}
		first, last := window[0], window[len(window)-1]
		if first.ScheduledAt.After(ready.Add(3 * time.Second)) {
			t.Errorf("loop %s: first firing at %s, more than 3s after the replicas were ready (%s)", loop, first.ScheduledAt, ready)
		}
		if last.At != lastBeforeStop {
			t.Errorf("loop %s: last firing before the stop at %s, want %s", loop, last.ScheduledAt, time.UnixMicro(lastBeforeStop).UTC())
		}
		for i, r := range window {
			if i > 0 && r.At-window[i-1].At != time.Second.Microseconds() {
				t.Errorf("loop %s: gap between %s and %s", loop, window[i-1].ScheduledAt.Format(time.RFC3339Nano), r.ScheduledAt.Format(time.RFC3339Nano))
			}
			if r.Status != string(scheduler.StatusSucceeded) || r.DecisionID == "" || r.Owner != "" || r.Trigger == scheduler.TriggerManual {
				t.Errorf("%s: want succeeded (scheduled), with a decision id and no owner", r)
			}
			if r.Attempts != 1 && r.Attempts != 2 {
				t.Errorf("%s: %d attempts, want 1 (or 2 after the kill)", r, r.Attempts)
			}
		}
		for _, r := range lr {
			if r.Attempts > 1 {
				retried++
				if r.StartedAt < killedAt.UnixMicro() {
					t.Errorf("%s: retried, but its last attempt started at %s, not after the kill at %s", r,
						time.UnixMicro(r.StartedAt).UTC().Format(time.RFC3339Nano), killedAt.UTC().Format(time.RFC3339Nano))
				}
			}
			if r.Status != string(scheduler.StatusSucceeded) {
				continue
			}
			// The row's decision: in exactly one log (checked above), this loop's agent, ok.
			d, ok := decisions[r.DecisionID]
			if !ok {
				t.Errorf("%s: its decision is in none of the three decision logs", r)
				continue
			}
			if used[r.DecisionID] {
				t.Errorf("%s: decision %s is the decision of another firing too", r, r.DecisionID)
			}
			used[r.DecisionID] = true
			ranBy[d.replica]++
			if d.rec.Event.Agent != agent || d.rec.Completion == nil || d.rec.Completion.Status != decisionlog.StatusOK {
				t.Errorf("%s: its decision is of agent %s with completion %+v, want %s, ok", r, d.rec.Event.Agent, d.rec.Completion, agent)
			}
			if d.replica == victimIdx && time.UnixMicro(r.FinishedAt).After(killedAt) {
				t.Errorf("%s: finished at %s by the killed replica, after it was killed", r, time.UnixMicro(r.FinishedAt).UTC())
			}
		}
	}

	// Every other decision is an attempt the killed replica did not finish: in its log, made before
	// the kill, for a firing of the decision's agent's loop that was due then and retried after the
	// kill (at most attempts-1 such decisions per firing).
	extra := 0
	extraOf := map[firingRow]int{}
	for id, d := range decisions {
		if used[id] {
			continue
		}
		extra++
		var of *firingRow
		if d.replica == victimIdx && d.rec.Event.Timestamp.Before(killedAt) {
			for loop, agent := range replicaLoops {
				if agent != d.rec.Event.Agent {
					continue
				}
				for _, r := range byLoop[loop] {
					if r.Attempts >= 2 && !d.rec.Event.Timestamp.Before(r.ScheduledAt) && (of == nil || r.At > of.At) {
						of = &r
					}
				}
			}
		}
		if of != nil {
			extraOf[*of]++
		}
		if of == nil || extraOf[*of] > of.Attempts-1 {
			t.Errorf("decision %s (agent %s, %s, in the log of %s, completion %+v) is of no firing: a firing ran twice, or ran unrecorded",
				id, d.rec.Event.Agent, d.rec.Event.Timestamp.Format(time.RFC3339Nano), replicas[d.replica].name, d.rec.Completion)
		}
	}
	if extra > retried {
		t.Errorf("%d decisions of interrupted attempts, but only %d firings were retried", extra, retried)
	}
	if interrupted != nil {
		var final *firingRow
		for _, r := range byLoop[interrupted.Loop] {
			if r.At == interrupted.At {
				final = &r
			}
		}
		switch {
		case final == nil:
			t.Errorf("the interrupted firing %s is gone from the store", interrupted)
		case final.Status != string(scheduler.StatusSucceeded) || final.Attempts != 2:
			t.Errorf("the interrupted firing ended %s, want succeeded after 2 attempts", final)
		case decisions[final.DecisionID].replica == victimIdx:
			t.Errorf("the interrupted firing %s was finished by the killed replica", final)
		}
		if extra == 0 {
			t.Errorf("the interrupted attempt's decision is not in the killed replica's log")
		}
	}
	busy := 0
	for _, n := range ranBy {
		if n > 0 {
			busy++
		}
	}
	if busy < 2 {
		t.Errorf("firings per replica %v: want at least 2 replicas that ran firings", ranBy)
	}
	t.Logf("%d firings, %d retried after the kill, %d interrupted decisions; firings finished per replica %v; stop took %s; test took %s",
		len(rows), retried, extra, ranBy, stopped.Sub(stopAt).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}
