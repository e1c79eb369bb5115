package decisionlog

// The decision log at scale (docs/benchmarks.md, "Decision log at 1,000,000 decisions"): queries
// over a log of 1,000,000 decisions, and sustained write throughput.
//
// The query benchmarks share one fixture, built once per test process through the real writer
// (Log.Record and Log.Complete from concurrent goroutines); building it takes a few minutes. Set
// LUSH_BENCH_LOG=/path/to/decisions-1m.db to keep it between runs: it is built there if the
// file is absent and reused if it holds the expected 1,000,000 events at the current schema
// version (a file that does not is an error, never overwritten). Without it the fixture lives in
// a temporary directory that TestMain removes. The benchmarks run only when -bench selects them;
// -short skips them.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lush-agents/lush/policies/authz"
)

// The fixture's shape.
const (
	scaleEvents     = 1_000_000
	scaleDays       = 10
	scalePrincipals = 1000 // each in 1-3 of scaleGroupNames; ~100 events per principal and day
	scaleWriters    = 64   // concurrent Record callers while building
	scaleTickets    = 10000
	scaleSustained  = 200_000 // events per sustained-write run, at least
)

var (
	scaleStart = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC) // the first day; the log spans scaleDays days
	scaleSpan  = scaleDays * 24 * time.Hour

	scaleGroupNames = []string{"engineering", "platform", "sre", "security", "data", "ml", "design", "product", "sales",
		"marketing", "support", "success", "finance", "legal", "hr", "it", "research", "operations", "partners", "executives"}
	scaleAgentNames = []string{"researcher", "coder", "reviewer", "planner", "triage", "support", "analyst", "writer",
		"sre", "release", "billing", "sales", "security", "data", "qa", "docs", "recruiter", "legal", "finance", "digest"}
	scaleServers = []struct{ ref, noun string }{
		{"mcp://npx/@modelcontextprotocol/server-filesystem", "file"}, {"mcp://npx/@modelcontextprotocol/server-github", "issue"},
		{"mcp://uvx/mcp-server-postgres", "row"}, {"mcp://npx/@modelcontextprotocol/server-slack", "message"},
		{"mcp://https/jira.example.com/mcp", "ticket"}, {"mcp://https/search.example.com/mcp", "result"},
		{"mcp://npx/@modelcontextprotocol/server-gdrive", "doc"}, {"mcp://uvx/mcp-server-fetch", "page"},
		{"tools/billing", "invoice"}, {"tools/crm", "contact"},
	}
	// Five tools per server (50 in all): three reads and two writes; reads are called three times
	// as often as writes.
	scaleVerbs = []struct {
		verb, access string
		weight       int
	}{{"search", "read", 3}, {"get", "read", 3}, {"list", "read", 3}, {"create", "write", 1}, {"update", "write", 1}}
	scaleWords = []string{"quarterly", "revenue", "latency", "incident", "roadmap", "invoice", "customer", "deploy", "budget",
		"migration", "postgres", "kubernetes", "onboarding", "contract", "renewal", "outage", "forecast", "pipeline", "hiring",
		"security", "audit", "release", "pricing", "churn", "backlog", "sprint", "design", "review", "metrics", "dashboard",
		"billing", "refund", "escalation", "compliance", "vendor", "license", "capacity", "latency", "schema", "index",
		"report", "summary", "draft", "meeting", "agenda", "retro", "launch", "feedback", "survey", "benchmark"}
)

func scalePrincipal(k int) string {
	if k >= scalePrincipals-50 {
		return fmt.Sprintf("serviceaccount:bot-%02d", k-(scalePrincipals-50))
	}
	return fmt.Sprintf("user:u%04d", k)
}

// scaleGroups returns principal k's groups (1 to 3, always the same for k).
func scaleGroups(k int) []string {
	rnd := rand.New(rand.NewPCG(uint64(k), 0x67726f757073))
	perm := rnd.Perm(len(scaleGroupNames))[:1+rnd.IntN(3)]
	slices.Sort(perm)
	out := make([]string, len(perm))
	for i, g := range perm {
		out[i] = "group:" + scaleGroupNames[g]
	}
	return out
}

func scaleRevision(day int) string {
	return fmt.Sprintf("%016x", rand.New(rand.NewPCG(uint64(day), 0x726576)).Uint64())
}

// scaleUUIDv7 returns a UUIDv7 for time t (as uuid.NewV7 would have made it at t).
func scaleUUIDv7(t time.Time, rnd *rand.Rand) string {
	var u uuid.UUID
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	binary.BigEndian.PutUint16(u[6:], uint16(rnd.Uint32()))
	binary.BigEndian.PutUint64(u[8:], rnd.Uint64())
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u.String()
}

// JSON shapes of authz.Input and authz.Decision, as the enforcer logs them.
type (
	scaleInput struct {
		Action    string `json:"action"`
		Principal struct {
			ID     string   `json:"id"`
			Groups []string `json:"groups"`
		} `json:"principal"`
		Agent       string         `json:"agent,omitempty"`
		Chain       []string       `json:"chain,omitempty"`
		Depth       int            `json:"depth,omitempty"`
		Tool        scaleToolRef   `json:"tool"`
		Arguments   map[string]any `json:"arguments,omitempty"`
		LiveWrites  bool           `json:"live_writes"`
		Environment string         `json:"environment,omitempty"`
	}
	scaleToolRef struct {
		Ref    string `json:"ref"`
		Name   string `json:"name,omitempty"`
		Access string `json:"access,omitempty"`
	}
	scaleReason struct {
		Rule    string `json:"rule"`
		Message string `json:"message"`
	}
	scaleResult struct {
		Allow            bool          `json:"allow"`
		Outcome          string        `json:"outcome"`
		Stub             bool          `json:"stub"`
		ApprovalRequired bool          `json:"approval_required"`
		Access           string        `json:"access"`
		Risk             string        `json:"risk"`
		Reasons          []scaleReason `json:"reasons"`
		Approvals        []scaleReason `json:"approvals"`
		Rules            []string      `json:"rules"`
		Revision         string        `json:"revision"`
		Error            string        `json:"error,omitempty"`
	}
)

// scaleEvent returns the fixture's event i (0 <= i < scaleEvents) and its completion (nil for
// decisions that do not run: denials, errors, approvals). Everything but the commit order follows
// from i. Events are spread evenly over scaleSpan in the order of i, with up to 0.5 s of jitter.
func scaleEvent(i int64) (*Event, *Completion) {
	rnd := rand.New(rand.NewPCG(uint64(i), 0x6c757368))
	ts := scaleStart.Add(time.Duration(i)*(scaleSpan/scaleEvents) + time.Duration(rnd.IntN(500))*time.Millisecond)
	day := int(ts.Sub(scaleStart) / (24 * time.Hour))
	k := rnd.IntN(scalePrincipals)
	agent := scaleAgentNames[rnd.IntN(len(scaleAgentNames))]
	chain := []string{agent}
	if rnd.IntN(3) == 0 {
		chain = []string{"orchestrator", agent}
	}
	server := scaleServers[rnd.IntN(len(scaleServers))]
	pick := rnd.IntN(11) // the sum of scaleVerbs' weights
	v := scaleVerbs[0]
	for _, v = range scaleVerbs {
		if pick < v.weight {
			break
		}
		pick -= v.weight
	}
	toolName := v.verb + "_" + server.noun
	word := func() string { return scaleWords[rnd.IntN(len(scaleWords))] }
	args := map[string]any{}
	switch v.verb {
	case "search":
		args["query"] = word() + " " + word() + " " + word()
		args["limit"] = 10 * (1 + rnd.IntN(5))
	case "get":
		args["id"] = fmt.Sprintf("%s-%d", server.noun, rnd.IntN(100000))
	case "list":
		args["path"] = fmt.Sprintf("%s/%s/%d", word(), word(), 2020+rnd.IntN(7))
		args["page"] = rnd.IntN(5)
	case "create", "update":
		args["title"] = word() + " " + word()
		args["body"] = fmt.Sprintf("%s %s %s for %s, see ticket-%d", word(), word(), word(), word(), rnd.IntN(scaleTickets))
	}
	if rnd.IntN(10) == 0 {
		args["ref"] = fmt.Sprintf("ticket-%d", rnd.IntN(scaleTickets))
	}

	outcome, risk := authz.OutcomeAllow, v.access
	rules := []string{"lush.acl.agent_execute", "lush.capability.allowlist", "lush.privilege.tool_grant"}
	var reasons []scaleReason
	var errText string
	switch r := rnd.IntN(100); {
	case v.access == "write" && r < 25:
		outcome = authz.OutcomeStub
		rules = append(rules, "lush.writes.stub")
	case v.access == "write" && r < 28:
		outcome = authz.OutcomeApproval
		rules = append(rules, "lush.approvals.required")
	case r >= 98:
		outcome, errText = authz.OutcomeError, "policy evaluation: eval_conflict_error: functions must not produce multiple outputs"
	case r >= 90:
		outcome = authz.OutcomeDeny
		rules = []string{"lush.privilege.tool_grant"}
		reasons = []scaleReason{{Rule: "lush.privilege.tool_grant",
			Message: fmt.Sprintf("%s has no grant for %s on %s", scalePrincipal(k), toolName, server.ref)}}
	}
	input := scaleInput{Action: "tools/call", Agent: agent, Chain: chain, Depth: len(chain),
		Tool: scaleToolRef{Ref: server.ref, Name: toolName, Access: v.access}, Arguments: args, Environment: "prod"}
	input.Principal.ID, input.Principal.Groups = scalePrincipal(k), scaleGroups(k)
	rev := scaleRevision(day)
	result := scaleResult{Allow: outcome == authz.OutcomeAllow || outcome == authz.OutcomeStub, Outcome: outcome, Stub: outcome == authz.OutcomeStub,
		ApprovalRequired: outcome == authz.OutcomeApproval, Access: v.access, Risk: risk, Reasons: reasons, Approvals: []scaleReason{},
		Rules: rules, Revision: rev, Error: errText}
	if result.Reasons == nil {
		result.Reasons = []scaleReason{}
	}
	inJSON, _ := json.Marshal(input)
	resJSON, _ := json.Marshal(result)
	lat := int64(30_000 + rnd.IntN(400_000))
	e := &Event{
		DecisionID: scaleUUIDv7(ts, rnd),
		Path:       DefaultPath,
		Input:      inJSON,
		Result:     resJSON,
		Timestamp:  ts,
		Labels:     map[string]string{"id": fmt.Sprintf("gw-%d", 1+rnd.IntN(3)), "version": "0.1.0", "environment": "prod"},
		Bundles:    map[string]Bundle{"lush": {Revision: rev}},
		Metrics:    map[string]int64{"timer_lush_decision_ns": lat},
		Revision:   rev,
		Point:      "mcp-gateway",
		Principal:  scalePrincipal(k),
		Groups:     input.Principal.Groups,
		Agent:      agent,
		Chain:      chain,
		Action:     "tools/call",
		Tool:       server.ref,
		ToolName:   toolName,
		Access:     v.access,
		Risk:       risk,
		Outcome:    outcome,
		Rules:      rules,
		LatencyNS:  lat,
		TraceID:    fmt.Sprintf("%016x%016x", rnd.Uint64(), rnd.Uint64()),
		SpanID:     fmt.Sprintf("%016x", rnd.Uint64()),
		Error:      errText,

		Environment: "prod",
	}
	if v.access == "write" {
		e.Masked = []string{"/input/arguments/api_token"}
	}
	var c *Completion
	upstream := time.Duration(5+rnd.IntN(800)) * time.Millisecond
	switch outcome {
	case authz.OutcomeStub:
		c = &Completion{Status: StatusStubbed, Response: json.RawMessage(`{"content":[{"type":"text","text":"stubbed: not executed"}],"isError":false}`)}
	case authz.OutcomeAllow:
		c = &Completion{Status: StatusOK, LatencyNS: upstream.Nanoseconds()}
		switch r := rnd.IntN(100); {
		case r < 3:
			c.Status, c.Error = StatusError, "upstream returned an error: 502 Bad Gateway"
		case r < 5:
			c.Status, c.Error = StatusTimeout, "upstream did not answer within 30s"
		}
		if v.access == "write" && c.Status == StatusOK {
			c.Response = json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":"created %s-%d"}],"isError":false}`, server.noun, rnd.IntN(100000)))
		}
	}
	if c != nil {
		c.DecisionID, c.Timestamp = e.DecisionID, ts.Add(upstream)
	}
	return e, c
}

// scaleLog is the 1,000,000-decision fixture.
type scaleLog struct {
	path   string
	ids    []string  // decision ids of 1,000 random events
	note   string    // how it was made, for the first benchmark that uses it to log
	logged sync.Once // the note
}

// logNote logs how the fixture was made, once per process (the log of a benchmark that has
// sub-benchmarks is not printed, so the first sub-benchmark logs it).
func (fx *scaleLog) logNote(b *testing.B) {
	fx.logged.Do(func() { b.Log(fx.note) })
}

var (
	scaleOnce    sync.Once
	scaleFixture *scaleLog
	scaleErr     error
	scaleTempDir string // made by scaleWorkDir; TestMain removes it
)

func TestMain(m *testing.M) {
	code := m.Run()
	if scaleTempDir != "" {
		os.RemoveAll(scaleTempDir)
	}
	os.Exit(code)
}

// scaleWorkDir returns the temporary directory for fixtures, which TestMain removes (called from
// benchmarks, which run one at a time).
func scaleWorkDir() (string, error) {
	if scaleTempDir == "" {
		dir, err := os.MkdirTemp("", "lush-scale-")
		if err != nil {
			return "", err
		}
		scaleTempDir = dir
	}
	return scaleTempDir, nil
}

// scaleFixtureLog returns the fixture, building it the first time.
func scaleFixtureLog(b *testing.B) *scaleLog {
	b.Helper()
	if testing.Short() {
		b.Skip("-short: the 1,000,000-decision fixture takes minutes to build")
	}
	scaleOnce.Do(func() { scaleFixture, scaleErr = loadScaleLog() })
	if scaleErr != nil {
		b.Fatal(scaleErr)
	}
	return scaleFixture
}

func loadScaleLog() (*scaleLog, error) {
	path := os.Getenv("LUSH_BENCH_LOG")
	if path == "" {
		dir, err := scaleWorkDir()
		if err != nil {
			return nil, err
		}
		path = filepath.Join(dir, "decisions-1m.db")
	}
	var how string
	var took time.Duration
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		start := time.Now()
		if err := buildScaleLog(path); err != nil {
			return nil, fmt.Errorf("build the 1,000,000-decision fixture at %s: %w", path, err)
		}
		took = time.Since(start)
		how = fmt.Sprintf("built in %s", took.Round(time.Second))
	} else if err != nil {
		return nil, err
	} else {
		how = "reused (LUSH_BENCH_LOG)"
	}
	r, err := OpenReader(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var version, n, completions int64
	if err := r.db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		return nil, err
	}
	if err := r.db.QueryRow("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM completions)").Scan(&n, &completions); err != nil {
		return nil, err
	}
	if version != schemaVersion || n != scaleEvents {
		return nil, fmt.Errorf("%s holds %d events at schema version %d, not %d at version %d: remove it to rebuild the fixture",
			path, n, version, scaleEvents, schemaVersion)
	}
	fx := &scaleLog{path: path}
	rnd := rand.New(rand.NewPCG(7, 7))
	for range 1000 {
		var id string
		if err := r.db.QueryRow("SELECT decision_id FROM events WHERE seq = ?", 1+rnd.IntN(scaleEvents)).Scan(&id); err != nil {
			return nil, err
		}
		fx.ids = append(fx.ids, id)
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	fx.note = fmt.Sprintf("fixture %s: %d events, %d completions, %.0f MiB; %s", path, n, completions, float64(info.Size())/(1<<20), how)
	if took > 0 {
		fx.note += fmt.Sprintf(" (%.0f events/s with their completions)", float64(n)/took.Seconds())
	}
	return fx, nil
}

// buildScaleLog writes the fixture through the real writer: scaleWriters goroutines each take
// the next event, Record it and Complete it (when it has a completion), as enforcement points
// do. It builds into path + ".building" and renames that to path once it is complete, as a
// single file (journal_mode DELETE), so that an interrupted build is never reused.
func buildScaleLog(path string) error {
	ctx := context.Background()
	tmp := path + ".building"
	for _, p := range []string{tmp, tmp + "-wal", tmp + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	l, err := Open(ctx, tmp)
	if err != nil {
		return err
	}
	var (
		next    atomic.Int64
		errOnce sync.Once
		werr    error
		wg      sync.WaitGroup
	)
	fail := func(err error) { errOnce.Do(func() { werr = err }); next.Store(scaleEvents) }
	for range scaleWriters {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= scaleEvents {
					return
				}
				e, c := scaleEvent(i)
				if err := l.Record(ctx, e); err != nil {
					fail(err)
					return
				}
				if c != nil {
					if err := l.Complete(ctx, c); err != nil {
						fail(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(werr, l.Close()); err != nil {
		return err
	}
	db, err := openDB(tmp, url.Values{})
	if err != nil {
		return err
	}
	_, err = db.Exec("PRAGMA journal_mode = DELETE")
	if err := errors.Join(err, db.Close()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// scaleReader opens the fixture for queries, warmed.
func scaleReader(b *testing.B) *Reader {
	fx := scaleFixtureLog(b)
	return scaleOpenWarm(b, fx.path)
}

// scaleOpenWarm reads the database at path once (so that the queries measured find it in the
// OS page cache, as a log that is being written and queried is, rather than on whatever pages
// the kernel kept since the last benchmark) and opens it.
func scaleOpenWarm(b *testing.B, path string) *Reader {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	_, err = io.Copy(io.Discard, f)
	if err := errors.Join(err, f.Close()); err != nil {
		b.Fatal(err)
	}
	r, err := OpenReader(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}

// benchQueries runs b.N queries, next making each one's filter, and reports the latency
// percentiles and the rows each query returned on average.
func benchQueries(b *testing.B, r *Reader, next func(rnd *rand.Rand) Filter) {
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2))
	scaleFixture.logNote(b)
	logPlan(b, r, next(rand.New(rand.NewPCG(1, 2))))
	lat := make([]time.Duration, 0, b.N)
	rows := 0
	b.ResetTimer()
	for range b.N {
		f := next(rnd)
		t0 := time.Now()
		recs, err := r.Query(ctx, f)
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		rows += len(recs)
	}
	b.StopTimer()
	reportPercentiles(b, lat, time.Millisecond, "ms")
	b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
}

// logPlan logs SQLite's plan for f's query.
func logPlan(b *testing.B, r *Reader, f Filter) {
	q, args, err := f.sql(sqliteDialect)
	if err != nil {
		b.Fatal(err)
	}
	rows, err := r.db.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var steps []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			b.Fatal(err)
		}
		steps = append(steps, detail)
	}
	b.Logf("plan: %s", strings.Join(steps, "; "))
}

func reportPercentiles(b *testing.B, lat []time.Duration, unit time.Duration, name string) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / float64(unit)
	}
	b.ReportMetric(at(0.50), "p50-"+name)
	b.ReportMetric(at(0.99), "p99-"+name)
}

// scaleDay returns a random day of the fixture: its start and end.
func scaleDay(rnd *rand.Rand) (time.Time, time.Time) {
	start := scaleStart.AddDate(0, 0, rnd.IntN(scaleDays))
	return start, start.AddDate(0, 0, 1)
}

// scaleKeyTS turns the principal and agent indexes into (principal, ts) and (agent, ts): each
// key's decisions in time order, for queries that pair a key with a time window. It replaces
// the single-column indexes rather than adding to them: an index that each commit updates at one
// place per principal costs write throughput (BenchmarkScaleSustainedWrite/.../index=key_ts
// measures the replacement; docs/benchmarks.md has both).
const scaleKeyTS = `DROP INDEX events_principal;
DROP INDEX events_agent;
CREATE INDEX events_principal_ts ON events(principal, ts);
CREATE INDEX events_agent_ts ON events(agent, ts);`

// scaleIndexes runs a query benchmark on the schema's indexes and on a copy of the fixture
// changed by scaleKeyTS.
func scaleIndexes(b *testing.B, pick func(rnd *rand.Rand) Filter) {
	r := scaleReader(b)
	b.Run("index=schema", func(b *testing.B) { benchQueries(b, r, pick) })
	b.Run("index=key_ts", func(b *testing.B) { benchQueries(b, scaleIndexedReader(b), pick) })
}

// BenchmarkScaleQueryPrincipalDay: one principal's decisions over one day (about 100 of the
// principal's about 1,000), as `lushctl audit query --principal P --since D --until D+1d -n 1000`
// asks for them.
func BenchmarkScaleQueryPrincipalDay(b *testing.B) {
	scaleIndexes(b, func(rnd *rand.Rand) Filter {
		since, until := scaleDay(rnd)
		return Filter{Principal: scalePrincipal(rnd.IntN(scalePrincipals)), Since: since, Until: until, Limit: 1000}
	})
}

// BenchmarkScaleQueryPrincipalNewest: one principal's newest 100 decisions (no time window):
// the query that index=key_ts slows down unless Reader.Query changes with it (docs/benchmarks.md).
func BenchmarkScaleQueryPrincipalNewest(b *testing.B) {
	scaleIndexes(b, func(rnd *rand.Rand) Filter { return Filter{Principal: scalePrincipal(rnd.IntN(scalePrincipals))} })
}

// BenchmarkScaleQueryAgentDay: one agent's decisions over one day, the newest 1,000 of about
// 5,000: the query shape of BenchmarkScaleQueryPrincipalDay on a key with 50 times the events
// (about 50,000 per agent in the log), as a busy service account would have.
func BenchmarkScaleQueryAgentDay(b *testing.B) {
	scaleIndexes(b, func(rnd *rand.Rand) Filter {
		since, until := scaleDay(rnd)
		return Filter{Agent: scaleAgentNames[rnd.IntN(len(scaleAgentNames))], Since: since, Until: until, Limit: 1000}
	})
}

var (
	scaleIndexedOnce sync.Once
	scaleIndexedPath string
	scaleIndexedErr  error
)

// scaleIndexedReader opens a copy of the fixture changed by scaleKeyTS (made once per process,
// in a temporary directory).
func scaleIndexedReader(b *testing.B) *Reader {
	fx := scaleFixtureLog(b)
	scaleIndexedOnce.Do(func() {
		start := time.Now()
		scaleIndexedPath, scaleIndexedErr = scaleCopyWithIndex(fx.path, scaleKeyTS)
		b.Logf("copied the fixture and made its key_ts indexes in %s", time.Since(start).Round(time.Second))
	})
	if scaleIndexedErr != nil {
		b.Fatal(scaleIndexedErr)
	}
	return scaleOpenWarm(b, scaleIndexedPath)
}

func scaleCopyWithIndex(src, index string) (string, error) {
	dir, err := scaleWorkDir()
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "decisions-1m-indexed.db")
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", err
	}
	if err := out.Close(); err != nil {
		return "", err
	}
	return dst, scaleExec(dst, index)
}

// scaleExec runs stmt on the database at path (not through a Log: schema changes for
// comparisons).
func scaleExec(path, stmt string) error {
	db, err := openDB(path, url.Values{})
	if err != nil {
		return err
	}
	_, err = db.Exec(stmt)
	return errors.Join(err, db.Close())
}

// BenchmarkScaleQueryDecisionID: one decision by its full id, and by the first 8 characters of
// its id (`lushctl audit query --decision-id 0195a3c4`, default limit).
func BenchmarkScaleQueryDecisionID(b *testing.B) {
	r := scaleReader(b)
	ids := scaleFixture.ids
	b.Run("exact", func(b *testing.B) {
		benchQueries(b, r, func(rnd *rand.Rand) Filter { return Filter{DecisionID: ids[rnd.IntN(len(ids))]} })
	})
	b.Run("prefix=8", func(b *testing.B) {
		benchQueries(b, r, func(rnd *rand.Rand) Filter { return Filter{DecisionID: ids[rnd.IntN(len(ids))][:8]} })
	})
}

// BenchmarkScaleQueryGroup: the decisions about the members of one group (about 10% of all),
// over one day (up to 1,000 of its about 10,000), and the newest 100 overall.
func BenchmarkScaleQueryGroup(b *testing.B) {
	r := scaleReader(b)
	group := func(rnd *rand.Rand) string { return "group:" + scaleGroupNames[rnd.IntN(len(scaleGroupNames))] }
	b.Run("day", func(b *testing.B) {
		benchQueries(b, r, func(rnd *rand.Rand) Filter {
			since, until := scaleDay(rnd)
			return Filter{Group: group(rnd), Since: since, Until: until, Limit: 1000}
		})
	})
	b.Run("newest", func(b *testing.B) {
		benchQueries(b, r, func(rnd *rand.Rand) Filter { return Filter{Group: group(rnd)} })
	})
}

// BenchmarkScaleQueryText: text in the logged arguments: a common word over one day (up to
// 1,000 matches), and a four-digit ticket number (about 30 matches in the whole log, default
// limit), which reads every event.
func BenchmarkScaleQueryText(b *testing.B) {
	r := scaleReader(b)
	b.Run("word/day", func(b *testing.B) {
		benchQueries(b, r, func(rnd *rand.Rand) Filter {
			since, until := scaleDay(rnd)
			return Filter{Text: scaleWords[rnd.IntN(len(scaleWords))], Since: since, Until: until, Limit: 1000}
		})
	})
	b.Run("ticket/all", func(b *testing.B) {
		benchQueries(b, r, func(rnd *rand.Rand) Filter {
			return Filter{Text: fmt.Sprintf("ticket-%d", 1000+rnd.IntN(scaleTickets-1000))}
		})
	})
}

// scaleTemplates returns events (with their completion, if any) to copy for the write
// benchmarks: the fixture's first 4,096.
var scaleTemplates = sync.OnceValue(func() []scaleTemplate {
	out := make([]scaleTemplate, 4096)
	for i := range out {
		out[i].event, out[i].completion = scaleEvent(int64(i) * 233)
	}
	return out
})

type scaleTemplate struct {
	event      *Event
	completion *Completion
}

// BenchmarkScaleSustainedWrite: writers push fixture-like events through Record as fast as the
// log takes them, at least scaleSustained events (or b.N) in one run, into a new log. With
// completions, every event is followed by its completion through CompleteAsync, as the gateway
// logs them. It fails if any write was refused (ErrBackpressure: dropped) or failed, or if the
// log does not hold exactly what was acknowledged.
func BenchmarkScaleSustainedWrite(b *testing.B) {
	if testing.Short() {
		b.Skip("-short: a run writes 200,000 events")
	}
	for _, tc := range []struct {
		writers     int
		completions bool
		reopen      bool   // write into a log that was opened and closed before, as after a restart
		index       string // with reopen: a change to the schema's indexes in between, to see what it costs writes
	}{{16, false, false, ""}, {64, false, false, ""}, {16, true, false, ""}, {64, true, false, ""},
		{64, false, true, ""}, {64, false, true, scaleKeyTS}} {
		name := fmt.Sprintf("writers=%d", tc.writers)
		if tc.completions {
			name += "/completions"
		}
		if tc.reopen {
			name += "/reopened"
		}
		if tc.index != "" {
			name += "/index=key_ts"
		}
		b.Run(name, func(b *testing.B) { sustainedWrite(b, tc.writers, tc.completions, tc.reopen, tc.index) })
	}
}

func sustainedWrite(b *testing.B, writers int, completions, reopen bool, index string) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "decisions.db")
	if reopen {
		l, err := Open(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		if index != "" {
			if err := scaleExec(path, index); err != nil {
				b.Fatal(err)
			}
		}
	}
	l, err := Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	templates := scaleTemplates()
	if completions {
		templates = slices.DeleteFunc(slices.Clone(templates), func(t scaleTemplate) bool { return t.completion == nil })
	}
	total := int64(max(scaleSustained, b.N))
	var (
		next                                atomic.Int64
		recorded, dropped, failed           atomic.Int64
		completed, cDropped, cFailed, cSent atomic.Int64
	)
	lat := make([][]time.Duration, writers)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			mine := make([]time.Duration, 0, total/int64(writers)+1)
			defer func() { lat[w] = mine }()
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				t := templates[int(i)%len(templates)]
				e := *t.event
				e.DecisionID, e.Timestamp = uuid.Must(uuid.NewV7()).String(), time.Time{}
				t0 := time.Now()
				err := l.Record(ctx, &e)
				d := time.Since(t0)
				switch {
				case errors.Is(err, ErrBackpressure):
					dropped.Add(1)
					continue
				case err != nil:
					failed.Add(1)
					continue
				}
				recorded.Add(1)
				mine = append(mine, d)
				if completions {
					c := *t.completion
					c.DecisionID, c.Timestamp = e.DecisionID, time.Time{}
					err := l.CompleteAsync(&c, func(err error) {
						if err != nil {
							cFailed.Add(1)
						} else {
							completed.Add(1)
						}
					})
					switch {
					case errors.Is(err, ErrBackpressure):
						cDropped.Add(1)
					case err != nil:
						cFailed.Add(1)
					default:
						cSent.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := l.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	st := l.Stats()
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(recorded.Load())/elapsed.Seconds(), "events/s")
	reportPercentiles(b, slices.Concat(lat...), time.Microsecond, "µs")
	b.ReportMetric(float64(dropped.Load()+cDropped.Load()), "dropped")
	b.ReportMetric(0, "ns/op") // per b.N it means nothing: a run writes at least scaleSustained events

	events, comps := scaleCount(b, path)
	switch {
	case dropped.Load() != 0 || cDropped.Load() != 0:
		b.Fatalf("%d events and %d completions refused with ErrBackpressure (dropped)", dropped.Load(), cDropped.Load())
	case failed.Load() != 0 || cFailed.Load() != 0:
		b.Fatalf("%d events and %d completions failed", failed.Load(), cFailed.Load())
	case st.Failed != 0 || st.Rejected != 0:
		b.Fatalf("stats %+v", st)
	case recorded.Load() != total || events != total:
		b.Fatalf("%d events acknowledged, %d in the log, %d written", recorded.Load(), events, total)
	case completions && (completed.Load() != cSent.Load() || comps != completed.Load() || comps != total):
		b.Fatalf("%d completions queued, %d acknowledged, %d in the log", cSent.Load(), completed.Load(), comps)
	case st.Written != events+comps:
		b.Fatalf("stats %+v, %d events and %d completions in the log", st, events, comps)
	}
}

// scaleCount counts the events and completions in the log at path.
func scaleCount(b *testing.B, path string) (events, completions int64) {
	r, err := OpenReader(path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if err := r.db.QueryRow("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM completions)").Scan(&events, &completions); err != nil {
		b.Fatal(err)
	}
	return events, completions
}

// BenchmarkScaleVerify: Reader.Verify over the whole fixture (every entry's hash recomputed,
// every event's columns checked against its document); events/s counts the fixture's events,
// entries/s its events and completions.
func BenchmarkScaleVerify(b *testing.B) {
	r := scaleReader(b)
	scaleFixture.logNote(b)
	ctx := context.Background()
	var events, entries int64
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		rep, err := r.Verify(ctx, VerifyOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if !rep.OK {
			b.Fatalf("the fixture does not verify: %+v", rep.Partitions)
		}
		var n int64
		for _, p := range rep.Partitions {
			n += p.Events
			entries += p.Events + p.Completions + p.Markers
		}
		if n != scaleEvents {
			b.Fatalf("verified %d events, not %d", n, scaleEvents)
		}
		events += n
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(entries)/elapsed.Seconds(), "entries/s")
	b.ReportMetric(elapsed.Seconds()/float64(b.N), "s/op")
	b.ReportMetric(0, "ns/op")
}
