package test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/test/pgtest"
)

// bundleDir serves a directory as a bundle server does: GET of a file with a content ETag,
// 304 Not Modified when the client's If-None-Match names it (OPA's bundle protocol). lushctl
// deploy --to writes into the directory with a rename, so a GET reads a whole bundle.
type bundleDir struct {
	dir  string
	mu   sync.Mutex
	gets map[string]int // status → count, for the test's log
}

func (b *bundleDir) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rel := filepath.FromSlash(strings.TrimPrefix(r.URL.Path, "/"))
	if r.Method != http.MethodGet || !filepath.IsLocal(rel) {
		http.Error(w, "GET of a file only", http.StatusBadRequest)
		return
	}
	data, err := os.ReadFile(filepath.Join(b.dir, rel))
	if err != nil {
		b.count("404")
		http.NotFound(w, r)
		return
	}
	sum := sha256.Sum256(data)
	w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:12])+`"`)
	w.Header().Set("Content-Type", "application/gzip")
	if r.Header.Get("If-None-Match") == w.Header().Get("ETag") {
		b.count("304")
	} else {
		b.count("200")
	}
	http.ServeContent(w, r, rel, time.Time{}, strings.NewReader(string(data))) // answers 304 itself
}

func (b *bundleDir) count(status string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gets[status]++
}

// rolloutProject is a project whose one agent may call tools/hello (a local tool that says
// hello); policy decides what build B changes: A allows alice's calls, B denies them (rule
// rollout.flip), C (signed with another key) denies everything else too.
func rolloutProject(t *testing.T) string {
	t.Helper()
	dir := writeProject(t, map[string]string{
		"lush.yaml": "project: rollout\ntool_grants:\n  - tool: tools/hello\n    grants:\n      - {principal: group:eng, access: read}\n",
		"agents/assistant/spec.yaml": "name: assistant\nmodel: gemini-2.5-flash\ndescription: Says hello.\ntools:\n  - name: tools/hello\n    access: read\n" +
			"acl:\n  - principal: group:eng\n    role: execute\n",
		"tools/hello/tool.yaml":  "description: Says hello.\ncommand: ./run\naccess: read\n",
		"tools/hello/run":        "#!/bin/sh\necho hello\n",
		"scripts/assistant.yaml": "turns:\n  - text: \"nothing to do\"\n",
		"policies/flip.rego":     flipPolicy("never-called"),
		"gateway.yaml":           "auth:\n  api_keys:\n    - {name: alice, sha256: " + sha256hex(rolloutKey) + ", principal: user:alice, groups: [group:eng]}\n",
	})
	if err := os.Chmod(filepath.Join(dir, "tools/hello/run"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

const rolloutKey = "alice-key-rollout-0123456789"

// flipPolicy denies calls of tool (a tool reference) with rule rollout.flip.
func flipPolicy(tool string) string {
	return `package lush.policies.flip

# METADATA
# custom:
#   id: rollout.flip
deny contains {"rule": rego.metadata.rule().custom.id, "message": "build B says no"} if {
	input.action == "tools/call"
	input.tool.ref == "` + tool + `"
}
`
}

// buildSigned builds dir signed with the HS256 secret in key and returns the hash.
func buildSigned(t *testing.T, dir, key string) string {
	t.Helper()
	hash := strings.TrimSpace(runLushctl(t, "build", "-q", "--offline", "--signing-key", key, "--signing-alg", "HS256", dir))
	if len(hash) != 64 {
		t.Fatalf("lushctl build -q printed %q, not a hash", hash)
	}
	return hash
}

// replicaHealth is what a replica's /health says.
type replicaHealth struct {
	Code      int
	Status    string `json:"status"`
	Ready     bool   `json:"ready"`
	Revision  string `json:"revision"`
	LastError *struct {
		Build  string `json:"build"`
		Reason string `json:"reason"`
		Error  string `json:"error"`
	} `json:"last_error"`
}

func getHealth(base string) (replicaHealth, error) {
	var h replicaHealth
	resp, err := http.Get(base + "/health")
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	h.Code = resp.StatusCode
	return h, json.NewDecoder(resp.Body).Decode(&h)
}

func getMetrics(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// statusOf runs lushctl status --replicas and returns its exit code and output.
func statusOf(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(lushctlBin, append([]string{"status"}, args...)...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatalf("lushctl status: %v", err)
	}
	return 0, string(out)
}

// callHello calls tools/hello once and classifies the answer: "allow" (the tool said hello),
// "deny" (build B's rule), or "failed: ..." (anything else: a transport error, another answer).
func callHello(ctx context.Context, c *client.Client) string {
	res, err := c.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "hello"}})
	if err != nil {
		return "failed: " + err.Error()
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	got := strings.Join(text, "\n")
	switch {
	case !res.IsError && strings.Contains(got, "hello"):
		return "allow"
	case res.IsError && strings.Contains(got, "build B says no"):
		return "deny"
	}
	return fmt.Sprintf("failed: is_error=%v %q", res.IsError, got)
}

// TestRolloutThreeReplicas: three `lushctl serve` replicas share one PostgreSQL decision log and
// poll one bundle server (OPA's protocol, ETags). Not ready before anything is published; build
// A published with `lushctl deploy --to` → all three serve A (`lushctl status --replicas` exit
// 0). While clients keep calling a tool on every replica, build B (a policy change that denies
// the call) is published → all switch to B; no call failed, each replica's answers switch once
// from A's to B's, every logged decision names one revision and has that revision's outcome,
// and the log holds one build/switch event per replica. A bundle signed with another key is
// refused on all three (lush_bundle_refused_total{reason="signature"}, /health), B keeps
// deciding; publishing A again rolls all three back.
func TestRolloutThreeReplicas(t *testing.T) {
	began := time.Now()
	pg := pgtest.Start(t)
	dsn := pg.CreateDatabase(t, "rollout")
	dir := rolloutProject(t)
	keys := t.TempDir()
	key, otherKey := filepath.Join(keys, "bundle.key"), filepath.Join(keys, "other.key")
	os.WriteFile(key, []byte("the-project-signing-secret-0123456789"), 0o600)
	os.WriteFile(otherKey, []byte("a-key-the-replicas-do-not-trust-0123"), 0o600)

	hashA := buildSigned(t, dir, key)
	os.WriteFile(filepath.Join(dir, "policies/flip.rego"), []byte(flipPolicy("tools/hello")), 0o644)
	hashB := buildSigned(t, dir, key)
	os.WriteFile(filepath.Join(dir, "policies/flip.rego"), []byte(flipPolicy("tools/hello")+"\n# C\n"), 0o644)
	hashC := buildSigned(t, dir, otherKey)
	if hashA == hashB || hashB == hashC {
		t.Fatalf("the builds are not distinct: A %s B %s C %s", hashA, hashB, hashC)
	}

	pub := t.TempDir()
	server := httptest.NewServer(&bundleDir{dir: pub, gets: map[string]int{}})
	t.Cleanup(server.Close)
	const resource = "bundles/rollout.tar.gz"
	publish := func(hash string) {
		t.Helper()
		cmd := exec.Command(lushctlBin, "deploy", hash[:12], dir, "--to", pub, "--resource", resource, "-o", "json")
		out, err := cmd.Output() // the JSON document; the progress goes to stderr
		if err != nil {
			t.Fatalf("lushctl deploy --to: %v", err)
		}
		var res struct {
			Hash, Path string
		}
		if err := json.Unmarshal(out, &res); err != nil || res.Hash != hash || res.Path != filepath.Join(pub, resource) {
			t.Fatalf("lushctl deploy --to -o json: %v\n%s", err, out)
		}
	}

	// Three replicas, nothing published yet.
	var bases []string
	var procs []*proc
	for i := range 3 {
		port := freePort(t)
		env := []string{fmt.Sprintf("PORT=%d", port), "LUSH_LISTEN_HOST=127.0.0.1", "LUSH_PROJECT=" + dir,
			"LUSH_CONFIG=" + filepath.Join(dir, "gateway.yaml"), "LUSH_MODEL_PROVIDER=scripted", "LUSH_SCRIPTS=" + filepath.Join(dir, "scripts"),
			"TRACE_BACKEND=none", "LUSH_DECISION_LOG=" + dsn, "LUSH_SCHEDULER_DB=off", "LOG_LEVEL=info", "LUSH_BUILD=",
			"LUSH_INSTANCE=" + fmt.Sprintf("replica-%d", i),
			"LUSH_BUNDLE_SERVICE=" + server.URL, "LUSH_BUNDLE_RESOURCE=" + resource,
			"LUSH_BUNDLE_VERIFY_KEY=" + key, "LUSH_BUNDLE_VERIFY_ALG=HS256",
			"LUSH_BUNDLE_POLL_MIN=1s", "LUSH_BUNDLE_POLL_MAX=2s"}
		procs = append(procs, startProc(t, env, lushctlBin, "serve"))
		bases = append(bases, fmt.Sprintf("http://127.0.0.1:%d", port))
	}
	replicas := strings.Join(bases, ",")
	// Not ready, with the reason, and every call denied until a good bundle arrives.
	for i, base := range bases {
		eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
			h, err := getHealth(base)
			if err != nil {
				return false, fmt.Sprintf("replica %d: %v", i, err)
			}
			return h.LastError != nil, fmt.Sprintf("replica %d has not polled yet: %+v", i, h)
		})
		h, _ := getHealth(base)
		if h.Code != http.StatusServiceUnavailable || h.Ready || !strings.Contains(h.Status, "404") || h.LastError.Reason != "download" {
			t.Errorf("replica %d before anything is published: %+v, want 503, not ready, the 404 as reason", i, h)
		}
	}
	// ... and MCP clients are turned away (nothing is decided without a build).
	req, _ := http.NewRequest(http.MethodPost, bases[0]+"/gateway/agents/assistant/mcp",
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hello"}}`))
	req.Header.Set("X-API-Key", rolloutKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "no build is deployed") {
			t.Errorf("a call before any build: %s %s, want 503", resp.Status, body)
		}
	}
	if code, out := statusOf(t, "--replicas", replicas); code != 1 || !strings.Contains(out, "3 not ready") {
		t.Errorf("lushctl status before anything is published: exit %d, want 1:\n%s", code, out)
	}

	publish(hashA)
	if code, out := statusOf(t, "--replicas", replicas, "--expect", hashA[:12], "--watch", "--timeout", "60s", "--interval", "200ms"); code != 0 ||
		!strings.Contains(out, "3/3 on "+hashA[:12]) {
		t.Fatalf("lushctl status --watch for A: exit %d:\n%s", code, out)
	}
	for _, p := range procs {
		waitFor(t, p, "lush: build "+hashA[:12], 30*time.Second)
	}

	// Clients on every replica call the tool in a loop while B is published.
	ctx := context.Background()
	calls := &callLog{results: make([][]string, len(bases))}
	stop := make(chan struct{})
	var loops sync.WaitGroup
	for i, base := range bases {
		c := goClient(t, base+"/gateway/agents/assistant/mcp", transport.WithHTTPHeaders(map[string]string{"X-API-Key": rolloutKey}))
		loops.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				calls.add(i, callHello(ctx, c))
			}
		})
	}
	var stopOnce sync.Once
	stopLoops := func() { stopOnce.Do(func() { close(stop); loops.Wait() }) }
	t.Cleanup(stopLoops)

	// Let every client see A first.
	eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		for i := range bases {
			if countOf(calls.of(i), "allow") == 0 {
				return false, fmt.Sprintf("replica %d has not answered a call yet", i)
			}
		}
		return true, ""
	})
	published := time.Now()
	publish(hashB)
	code, out := statusOf(t, "--replicas", replicas, "--expect", hashB[:12], "--watch", "--timeout", "30s", "--interval", "200ms")
	if code != 0 || !strings.Contains(out, "3/3 on "+hashB[:12]) {
		t.Fatalf("lushctl status --watch for B: exit %d:\n%s", code, out)
	}
	t.Logf("all three on B %s after the publish (polls every 1-2s); lushctl status:\n%s", time.Since(published).Round(time.Millisecond), out)
	// Every client sees B's answer before the loops stop.
	eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		for i := range bases {
			if rs := calls.of(i); countOf(rs, "deny") == 0 {
				return false, fmt.Sprintf("replica %d's client has not seen build B yet; its last answer: %s", i, rs[len(rs)-1])
			}
		}
		return true, ""
	})
	stopLoops()
	total := 0
	for i := range bases {
		rs := calls.of(i)
		total += len(rs)
		switches := 0
		for j, r := range rs {
			if strings.HasPrefix(r, "failed") {
				t.Errorf("replica %d call %d failed: %s", i, j, r)
			}
			if j > 0 && r != rs[j-1] {
				switches++
			}
		}
		if switches != 1 || rs[0] != "allow" || rs[len(rs)-1] != "deny" {
			t.Errorf("replica %d's answers change %d times (first %s, last %s), want once from A's allow to B's deny", i, switches, rs[0], rs[len(rs)-1])
		}
		t.Logf("replica %d: %d calls, %d allowed (A), %d denied (B)", i, len(rs), countOf(rs, "allow"), countOf(rs, "deny"))
	}

	// The decision log: each decision names one revision and has its outcome; the calls the
	// clients counted are all there; one switch event per replica, A to B.
	want := map[string]string{hashA: authz.OutcomeAllow, hashB: authz.OutcomeDeny}
	recs := queryLog(t, dsn, decisionlog.Filter{Principal: "user:alice", Action: authz.ActionToolsCall})
	perRevision := map[string]int{}
	for _, r := range recs {
		e := r.Event
		if len(e.Bundles) != 1 || e.Bundles["lush"].Revision != e.Revision {
			t.Errorf("decision %s names revisions %v and %s: not exactly one", e.DecisionID, e.Bundles, e.Revision)
		}
		if want[e.Revision] != e.Outcome {
			t.Errorf("decision %s by %s (%s): outcome %s, want %s", e.DecisionID, e.Revision[:12], e.Labels["id"], e.Outcome, want[e.Revision])
		}
		perRevision[e.Revision[:12]]++
	}
	if len(recs) != total {
		t.Errorf("the log holds %d tools/call decisions of alice, the clients made %d calls", len(recs), total)
	}
	t.Logf("decisions by revision: %v", perRevision)
	checkSwitches(t, dsn, map[string]int{hashA + ">" + hashB: 1})

	// A bundle signed with a key the replicas do not trust: refused on all three, B keeps serving.
	publish(hashC)
	for i, base := range bases {
		eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
			h, err := getHealth(base)
			if err != nil || h.LastError == nil || h.LastError.Build != hashC {
				return false, fmt.Sprintf("replica %d has not refused C yet: %+v %v", i, h, err)
			}
			return true, ""
		})
		h, _ := getHealth(base)
		if h.Code != http.StatusOK || !h.Ready || h.Revision != hashB || h.LastError.Reason != "signature" {
			t.Errorf("replica %d after the badly signed bundle: %+v, want ready on B, last error signature", i, h)
		}
		if m := getMetrics(t, base); !strings.Contains(m, `lush_bundle_refused_total{reason="signature"} 1`) ||
			!strings.Contains(m, `lush_build_info{revision="`+hashB+`"} 1`) {
			t.Errorf("replica %d's metrics lack the refusal or B's build info:\n%s", i, grepLines(m, "lush_bundle_refused_total", "lush_build_info"))
		}
		c := goClient(t, base+"/gateway/agents/assistant/mcp", transport.WithHTTPHeaders(map[string]string{"X-API-Key": rolloutKey}))
		if got := callHello(ctx, c); got != "deny" {
			t.Errorf("replica %d after the refusal answers %s, want B's deny", i, got)
		}
		if !strings.Contains(procs[i].out.String(), "reason=signature") {
			t.Errorf("replica %d did not log the refusal with its reason", i)
		}
	}
	if code, out := statusOf(t, "--replicas", replicas, "-o", "json"); code != 0 || !strings.Contains(out, `"reason": "signature"`) {
		t.Errorf("lushctl status -o json after the refusal: exit %d, want 0 with the refusal shown:\n%s", code, out)
	}

	// Rollback by hash: A again.
	publish(hashA)
	if code, out := statusOf(t, "--replicas", replicas, "--expect", hashA[:12], "--watch", "--timeout", "30s", "--interval", "200ms"); code != 0 {
		t.Fatalf("lushctl status --watch for the rollback: exit %d:\n%s", code, out)
	}
	for i, base := range bases {
		c := goClient(t, base+"/gateway/agents/assistant/mcp", transport.WithHTTPHeaders(map[string]string{"X-API-Key": rolloutKey}))
		if got := callHello(ctx, c); got != "allow" {
			t.Errorf("replica %d after the rollback answers %s, want A's allow", i, got)
		}
	}
	checkSwitches(t, dsn, map[string]int{hashA + ">" + hashB: 1, hashB + ">" + hashA: 1})
	// lushctl audit query shows the switches, as an operator reads them.
	out = runLushctl(t, "audit", "query", "--log", dsn, "--action", enforce.ActionBuildSwitch, "-o", "json")
	if n := strings.Count(out, `"action":"build/switch"`); n != 6 {
		t.Errorf("lushctl audit query --action build/switch shows %d events, want 6:\n%s", n, out)
	}
	t.Logf("rollout test took %s", time.Since(began).Round(time.Millisecond))
}

// callLog is what each replica's client loop answered, in order.
type callLog struct {
	mu      sync.Mutex
	results [][]string // per replica
}

func (l *callLog) add(i int, r string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.results[i] = append(l.results[i], r)
}

// of returns a copy of replica i's results so far.
func (l *callLog) of(i int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.results[i]...)
}

func countOf(rs []string, outcome string) int {
	n := 0
	for _, r := range rs {
		if r == outcome {
			n++
		}
	}
	return n
}

// queryLog reads decisions from the shared PostgreSQL log, oldest first.
func queryLog(t *testing.T, dsn string, f decisionlog.Filter) []decisionlog.Record {
	t.Helper()
	r, err := decisionlog.OpenReader(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f.Limit, f.Oldest = decisionlog.MaxLimit, true
	recs, err := r.Query(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == decisionlog.MaxLimit {
		t.Fatalf("the log holds %d or more decisions: raise the limit", len(recs))
	}
	return recs
}

// checkSwitches checks that every replica logged exactly the build/switch events want counts
// ("from>to" → count).
func checkSwitches(t *testing.T, dsn string, want map[string]int) {
	t.Helper()
	got := map[string]map[string]int{}
	for _, r := range queryLog(t, dsn, decisionlog.Filter{Action: enforce.ActionBuildSwitch}) {
		var in struct{ From, To string }
		json.Unmarshal(r.Event.Input, &in)
		id := r.Event.Labels["id"]
		if got[id] == nil {
			got[id] = map[string]int{}
		}
		got[id][in.From+">"+in.To]++
		if r.Event.Revision != in.To {
			t.Errorf("switch event %s: revision %s, to %s", r.Event.DecisionID, r.Event.Revision, in.To)
		}
	}
	for i := range 3 {
		id := fmt.Sprintf("replica-%d", i)
		if fmt.Sprint(got[id]) != fmt.Sprint(want) {
			t.Errorf("%s's build/switch events: %v, want %v", id, got[id], want)
		}
	}
}

func grepLines(s string, prefixes ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestRolloutOCI: a lushctl serve replica with its builds in an OCI registry on loopback
// (LUSH_BUNDLE_SERVICE=oci+http://…, a bearer token) starts on the build lushctl deploy --to
// oci+http:// pushed, refuses a badly signed one pushed over it (the last good build keeps
// serving), and switches to the next good one.
func TestRolloutOCI(t *testing.T) {
	began := time.Now()
	dir := rolloutProject(t)
	keys := t.TempDir()
	key, otherKey, token := filepath.Join(keys, "bundle.key"), filepath.Join(keys, "other.key"), filepath.Join(keys, "token")
	os.WriteFile(key, []byte("the-project-signing-secret-0123456789"), 0o600)
	os.WriteFile(otherKey, []byte("a-key-the-replicas-do-not-trust-0123"), 0o600)
	os.WriteFile(token, []byte("registry-token\n"), 0o600)
	hashA := buildSigned(t, dir, key)
	os.WriteFile(filepath.Join(dir, "policies/flip.rego"), []byte(flipPolicy("tools/hello")), 0o644)
	hashB := buildSigned(t, dir, key)
	os.WriteFile(filepath.Join(dir, "policies/flip.rego"), []byte(flipPolicy("tools/hello")+"\n# C\n"), 0o644)
	hashC := buildSigned(t, dir, otherKey)

	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	want := "Bearer " + base64.StdEncoding.EncodeToString([]byte("registry-token"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != want {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"no"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	publish := func(hash string) {
		t.Helper()
		out, err := exec.Command(lushctlBin, "deploy", hash[:12], dir, "--to", "oci+http://"+host+"/lush/rollout:prod", "--token-file", token, "-o", "json").Output()
		var res struct{ Hash, Digest string }
		if err != nil || json.Unmarshal(out, &res) != nil || res.Hash != hash || !strings.HasPrefix(res.Digest, "sha256:") {
			t.Fatalf("lushctl deploy --to oci+http://: %v\n%s", err, out)
		}
	}
	publish(hashA)

	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := startProc(t, []string{fmt.Sprintf("PORT=%d", port), "LUSH_LISTEN_HOST=127.0.0.1", "LUSH_PROJECT=" + dir,
		"LUSH_CONFIG=" + filepath.Join(dir, "gateway.yaml"), "LUSH_MODEL_PROVIDER=scripted", "LUSH_SCRIPTS=" + filepath.Join(dir, "scripts"),
		"TRACE_BACKEND=none", "LUSH_SCHEDULER_DB=off", "LOG_LEVEL=info", "LUSH_BUILD=", "LUSH_INSTANCE=oci-replica",
		"LUSH_BUNDLE_SERVICE=oci+http://" + host, "LUSH_BUNDLE_RESOURCE=lush/rollout:prod", "LUSH_BUNDLE_TOKEN_FILE=" + token,
		"LUSH_BUNDLE_VERIFY_KEY=" + key, "LUSH_BUNDLE_VERIFY_ALG=HS256", "LUSH_BUNDLE_POLL_MIN=1s", "LUSH_BUNDLE_POLL_MAX=1s"},
		lushctlBin, "serve")
	waitFor(t, p, "builds: from oci+http://"+host+"/lush/rollout:prod", 30*time.Second)
	health := func(cond func(replicaHealth) bool, what string) {
		t.Helper()
		eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
			h, err := getHealth(base)
			return err == nil && cond(h), fmt.Sprintf("%s: %+v %v\n%s", what, h, err, p.out.String())
		})
	}
	health(func(h replicaHealth) bool { return h.Ready && h.Revision == hashA }, "ready on A")

	publish(hashC) // signed by a key the replica does not trust
	health(func(h replicaHealth) bool { return h.LastError != nil && h.LastError.Build == hashC }, "C refused")
	if h, _ := getHealth(base); !h.Ready || h.Revision != hashA || h.LastError.Reason != "signature" {
		t.Errorf("after the badly signed bundle: %+v, want ready on A, last error signature", h)
	}
	if m := getMetrics(t, base); !strings.Contains(m, `lush_bundle_refused_total{reason="signature"} 1`) {
		t.Errorf("lush_bundle_refused_total{reason=signature} is not 1:\n%s", grepLines(m, "lush_bundle_"))
	}
	if strings.Contains(p.out.String(), "registry-token") {
		t.Error("the registry token is in the replica's log")
	}

	publish(hashB)
	health(func(h replicaHealth) bool { return h.Ready && h.Revision == hashB }, "ready on B")
	t.Logf("OCI rollout A → refused C → B in %s", time.Since(began).Round(time.Millisecond))
}
