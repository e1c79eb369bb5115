package perf

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSessionMemory is the memory measurement of issue 21 (`make bench-memory`): what an idle
// streamable-HTTP session and an open GET stream cost the real `lushctl gateway` process. It
// opens LUSH_PERF_SESSIONS idle sessions (default 10,000: initialize and
// notifications/initialized, then nothing, connections closed), then a GET stream on each of
// LUSH_PERF_STREAMS of them (default 10,000), and reads the process's RSS (/proc), Go heap and
// goroutines (its /metrics) at each step. Streams beyond the gateway's sessions.max_streams
// (10,000) are refused with 503 and counted: LUSH_PERF_STREAMS=12000 shows the bound hold. It
// runs only with LUSH_PERF=1; LUSH_PERF_OUT names a file that receives the report too.
func TestSessionMemory(t *testing.T) {
	if os.Getenv("LUSH_PERF") != "1" {
		t.Skip("a measurement, not a test: run it with make bench-memory (LUSH_PERF=1)")
	}
	count := func(name string, def int) int {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 100000 {
			t.Fatalf("%s=%q: want a count from 0 to 100000", name, v)
		}
		return n
	}
	sessions := count("LUSH_PERF_SESSIONS", 10000)
	streams := min(count("LUSH_PERF_STREAMS", 10000), sessions)
	rep := measureMemory(t, steps(sessions), steps(streams))
	var out io.Writer = os.Stdout
	if path := os.Getenv("LUSH_PERF_OUT"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		out = io.MultiWriter(os.Stdout, f)
	}
	rep.write(out)
}

// TestMemorySmoke runs the memory measurement with a few sessions and streams so that it cannot
// rot. It asserts nothing about memory, only that every step was measured.
func TestMemorySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lushctl and starts two processes")
	}
	rep := measureMemory(t, []int{10, 20}, []int{5, 10})
	if len(rep.rows) != 5 {
		t.Fatalf("%d rows, want 5 (baseline, 2 session steps, 2 stream steps)", len(rep.rows))
	}
	var b strings.Builder
	rep.write(&b)
	for _, want := range []string{"per idle session", "per open GET stream", "goroutines"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report has no %q:\n%s", want, b.String())
		}
	}
	t.Log(b.String())
}

// steps are the counts measured on the way to n: a tenth of it, then n.
func steps(n int) []int {
	if n == 0 {
		return nil
	}
	if n/10 == 0 {
		return []int{n}
	}
	return []int{n / 10, n}
}

// memSample is what the gateway process holds at one step.
type memSample struct {
	label      string
	sessions   int
	streams    int
	rss        int64 // bytes, /proc/<pid>/status VmRSS
	heapInuse  int64 // go_memstats_heap_inuse_bytes
	heapAlloc  int64 // go_memstats_alloc_bytes
	stacks     int64 // go_memstats_stack_inuse_bytes
	goroutines int64 // go_goroutines
}

type memReport struct {
	rows    []memSample
	started time.Time
	loadavg string
}

// measureMemory starts the echo server and a gateway, then opens idle sessions up to each count
// of sessionSteps and GET streams up to each count of streamSteps (on sessions already open),
// sampling the gateway after each step.
func measureMemory(t testing.TB, sessionSteps, streamSteps []int) *memReport {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rep := &memReport{started: time.Now(), loadavg: loadavg()}
	lushctl := buildLushctl(t)
	_, echoAddr := startHelper(t, roleEcho, "")
	gw := startGateway(t, lushctl, writeProject(t, "http://"+echoAddr+"/mcp", false, ""), "")
	endpoint := gw.url + "/agents/bench/mcp"
	// Sessions are opened over a few keep-alive connections that are then closed: an idle session
	// holds no connection. Each stream holds a connection of its own.
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	defer tr.CloseIdleConnections()

	// Warm up: one session and one tools/list, so that the baseline has the build, the catalog
	// and the upstream connection.
	warm, err := openSession(ctx, hc, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if err := post(ctx, hc, endpoint, warm, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, http.StatusOK); err != nil {
		t.Fatal(err)
	}
	sample := func(label string, sessions, streams int) {
		tr.CloseIdleConnections()
		settle(t, gw)
		s := readMem(t, gw)
		s.label, s.sessions, s.streams = label, sessions, streams
		rep.rows = append(rep.rows, s)
		t.Logf("%s: RSS %s, heap in use %s, goroutines %d", label, mib(s.rss), mib(s.heapInuse), s.goroutines)
	}
	sample("baseline", 0, 0)

	var ids []string
	for _, n := range sessionSteps {
		more, err := openSessions(ctx, hc, endpoint, n-len(ids))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, more...)
		sample(fmt.Sprintf("%d idle sessions", n), n, 0)
	}
	total := len(ids)
	streamTr := &http.Transport{MaxIdleConnsPerHost: -1}
	defer streamTr.CloseIdleConnections()
	var open []io.Closer
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	asked, refused := 0, 0
	for _, n := range streamSteps {
		for ; asked < n; asked++ {
			body, err := openStream(ctx, streamTr, endpoint, ids[asked])
			switch {
			case errors.Is(err, errRefused): // beyond sessions.max_streams
				refused++
			case err != nil:
				t.Fatalf("GET stream %d: %v", asked+1, err)
			default:
				open = append(open, body)
			}
		}
		label := fmt.Sprintf("%d sessions, %d GET streams", total, len(open))
		if refused > 0 {
			label += fmt.Sprintf(" (%d more refused: 503)", refused)
		}
		sample(label, total, len(open))
	}
	return rep
}

// settle waits until the gateway has let go of the connections the client closed: until its
// goroutine count stops falling (at most 10 s).
func settle(t testing.TB, gw *gatewayProc) {
	t.Helper()
	last := readMem(t, gw).goroutines
	for range 20 {
		time.Sleep(500 * time.Millisecond)
		g := readMem(t, gw).goroutines
		if g >= last {
			return
		}
		last = g
	}
}

const mcpAccept = "application/json, text/event-stream"

func mcpRequest(ctx context.Context, method, endpoint, session, body string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, endpoint, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Accept", mcpAccept)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	return req, nil
}

func post(ctx context.Context, hc *http.Client, endpoint, session, body string, want int) error {
	req, err := mcpRequest(ctx, http.MethodPost, endpoint, session, body)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("POST %.40s: %s, want %d: %s", body, resp.Status, want, data)
	}
	return nil
}

// openSession initializes a session and sends notifications/initialized: a client that then
// goes idle.
func openSession(ctx context.Context, hc *http.Client, endpoint string) (string, error) {
	req, err := mcpRequest(ctx, http.MethodPost, endpoint, "",
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"lush-perf-memory","version":"1"}}}`)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		return "", fmt.Errorf("initialize: %s, session %q: %s", resp.Status, id, data)
	}
	return id, post(ctx, hc, endpoint, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, http.StatusAccepted)
}

// openSessions opens n idle sessions with 8 clients at a time.
func openSessions(ctx context.Context, hc *http.Client, endpoint string, n int) ([]string, error) {
	ids := make([]string, n)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if ids[i], errs[w] = openSession(ctx, hc, endpoint); errs[w] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// errRefused is a stream the gateway refused with 503: it holds the most streams it may.
var errRefused = errors.New("refused: 503")

// openStream opens a GET stream for a session and returns its body, to close when done; it
// returns once the gateway has answered 200 with an event stream.
func openStream(ctx context.Context, tr *http.Transport, endpoint, session string) (io.Closer, error) {
	req, err := mcpRequest(ctx, http.MethodGet, endpoint, session, "")
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
			return nil, errRefused
		}
		return nil, fmt.Errorf("%s: %s", resp.Status, data)
	}
	return resp.Body, nil
}

// readMem reads the gateway's RSS from /proc and its Go heap and goroutines from /metrics.
func readMem(t testing.TB, gw *gatewayProc) memSample {
	t.Helper()
	var s memSample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", gw.pid()))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			s.rss = kb << 10
		}
	}
	resp, err := http.Get(gw.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s: %.200s", resp.Status, data)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		into := map[string]*int64{"go_memstats_heap_inuse_bytes": &s.heapInuse, "go_memstats_alloc_bytes": &s.heapAlloc,
			"go_memstats_stack_inuse_bytes": &s.stacks, "go_goroutines": &s.goroutines}[name]
		if into != nil {
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("/metrics %s %q: %v", name, value, err)
			}
			*into = int64(f)
		}
	}
	if s.rss == 0 || s.heapInuse == 0 || s.goroutines == 0 {
		t.Fatalf("could not read the gateway's memory: %+v", s)
	}
	return s
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// write prints the samples and the cost per session and per stream: the slope between the last
// two steps of each kind (the first step pays for warming the maps and pools).
func (r *memReport) write(w io.Writer) {
	fmt.Fprintf(w, "lushctl gateway memory, %s, load average at start %s\n\n", r.started.UTC().Format(time.RFC3339), r.loadavg)
	fmt.Fprintln(w, "| step | RSS | Go heap in use | Go heap allocated | goroutine stacks | goroutines |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, s := range r.rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d |\n", s.label, mib(s.rss), mib(s.heapInuse), mib(s.heapAlloc), mib(s.stacks), s.goroutines)
	}
	fmt.Fprintln(w)
	var sess, strm []memSample
	for _, s := range r.rows {
		switch {
		case s.streams > 0:
			strm = append(strm, s)
		case s.sessions > 0:
			sess = append(sess, s)
		}
	}
	slope := func(name string, rows []memSample, base memSample, n func(memSample) int) {
		if len(rows) == 0 {
			return
		}
		a, b := base, rows[len(rows)-1]
		if len(rows) > 1 {
			a = rows[len(rows)-2]
		}
		d := float64(n(b) - n(a))
		if d <= 0 {
			return
		}
		fmt.Fprintf(w, "%s (from %d to %d): RSS %.0f B, heap in use %.0f B, heap allocated %.0f B, stacks %.0f B, goroutines %.2f each\n", name, n(a), n(b),
			float64(b.rss-a.rss)/d, float64(b.heapInuse-a.heapInuse)/d, float64(b.heapAlloc-a.heapAlloc)/d, float64(b.stacks-a.stacks)/d,
			float64(b.goroutines-a.goroutines)/d)
	}
	base := r.rows[0]
	slope("per idle session", sess, base, func(s memSample) int { return s.sessions })
	if len(sess) > 0 {
		base = sess[len(sess)-1]
	}
	slope("per open GET stream", strm, base, func(s memSample) int { return s.streams })
	fmt.Fprintln(w, "\n(RSS only grows: the Go runtime returns freed memory to the kernel lazily. Heap figures include garbage not yet collected.)")
}
