package perf

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/policies/authz"
)

// config is what one run measures, and for how long.
type config struct {
	duration         time.Duration // each closed-loop measurement
	clients          []int         // the closed-loop client counts
	rate             int           // ext_authz requests a second
	authzDuration    time.Duration // each ext_authz measurement
	decisionDuration time.Duration // each decision measurement
	opaBench         bool          // also run the pinned opa CLI's `opa bench` (about 10 s each)
	decisionTimeout  string        // the gateways' limits.decision_timeout; "" for the default
}

// configFromEnv reads LUSH_PERF_DURATION, LUSH_PERF_CLIENTS (comma-separated), LUSH_PERF_RATE,
// LUSH_PERF_AUTHZ_DURATION and LUSH_PERF_DECISION_DURATION over the defaults.
func configFromEnv(t testing.TB) config {
	t.Helper()
	c := config{duration: 5 * time.Second, clients: []int{1, 64}, rate: 2000, authzDuration: 5 * time.Second, decisionDuration: 2 * time.Second}
	// LUSH_PERF_OPA_BENCH=0 leaves out `opa bench`.
	dur := func(name string, into *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				t.Fatalf("%s=%q: want a positive duration such as 5s", name, v)
			}
			*into = d
		}
	}
	dur("LUSH_PERF_DURATION", &c.duration)
	dur("LUSH_PERF_AUTHZ_DURATION", &c.authzDuration)
	dur("LUSH_PERF_DECISION_DURATION", &c.decisionDuration)
	c.opaBench = os.Getenv("LUSH_PERF_OPA_BENCH") != "0"
	if v := os.Getenv("LUSH_PERF_CLIENTS"); v != "" {
		c.clients = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 1024 {
				t.Fatalf("LUSH_PERF_CLIENTS=%q: want client counts from 1 to 1024, comma-separated, such as 1,64", v)
			}
			c.clients = append(c.clients, n)
		}
	}
	if v := os.Getenv("LUSH_PERF_RATE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100000 {
			t.Fatalf("LUSH_PERF_RATE=%q: want requests a second from 1 to 100000, such as 2000", v)
		}
		c.rate = n
	}
	return c
}

// Names of the targets, as the report prints them.
const (
	direct  = "direct"
	bare    = "bare proxy"
	gw      = "gateway"
	gwArgs  = "gateway+arg-policy"
	noopSrv = "no-op ext_authz"
	lushEA  = "lush ext_authz"
	lushEAA = "lush ext_authz+arg-policy"
)

// report is everything one run measured.
type report struct {
	cfg       config
	load      map[int]map[string]result // clients → target → result
	authz     map[string]result
	bundle    [2]decisionCost // allowed read, denied write
	rbac      [2]decisionCost
	opa       string          // the opa CLI that ran opa bench; "" when it did not run
	opaLush   [2]decisionCost // opa bench: the bundle, allowed read and denied write
	opaRBAC   [2]decisionCost // opa bench: the RBAC policy
	loadavg   string
	startedAt time.Time
}

// run measures the hot path side by side: it starts the echo server, the bare proxy and the
// no-op ext_authz server (helper processes), two `lushctl gateway` processes (the plain
// project, and the project whose policy reads the arguments), then drives them all.
func run(t testing.TB, cfg config) *report {
	ctx := context.Background()
	rep := &report{cfg: cfg, load: map[int]map[string]result{}, authz: map[string]result{}, startedAt: time.Now(), loadavg: loadavg()}

	// One decision: the compiled bundle and the RBAC peer, in-process, before any server runs.
	pq, bundleData := prepareBundle(ctx, t)
	rbac := prepareRBAC(ctx, t)
	for i, c := range []struct {
		in   authz.Input
		want bool
	}{{allowedRead, true}, {deniedWrite, false}} {
		in := parsedInput(t, c.in)
		rep.bundle[i] = measureDecision(ctx, t, pq, in, c.want, cfg.decisionDuration)
		rep.rbac[i] = measureDecision(ctx, t, rbac, in, c.want, cfg.decisionDuration)
	}

	if cfg.opaBench {
		if rep.opa = opaBinary(); rep.opa == "" {
			t.Log("no opa CLI (make opa-tool, or LUSH_OPA): opa bench left out")
		} else {
			rep.opaLush, rep.opaRBAC = opaBench(ctx, t, rep.opa, bundleData)
		}
	}

	lushctl := buildLushctl(t)
	echo, echoAddr := startHelper(t, roleEcho, "")
	proxy, proxyAddr := startHelper(t, roleProxy, "http://"+echoAddr)
	noopP, noopAddr := startHelper(t, roleNoop, "")
	upstream := "http://" + echoAddr + "/mcp"
	plain := startGateway(t, lushctl, writeProject(t, upstream, false, cfg.decisionTimeout), profileDir(t, "gateway"))
	args := startGateway(t, lushctl, writeProject(t, upstream, true, cfg.decisionTimeout), profileDir(t, "gateway+arg-policy"))
	headers := map[string]string{"X-API-Key": apiKey}
	targets := []target{
		{name: direct, endpoint: upstream, tool: "echo"},
		{name: bare, endpoint: "http://" + proxyAddr + "/mcp", tool: "echo", pid: proxy.pid()},
		{name: gw, endpoint: plain.url + "/agents/bench/mcp", headers: headers, pid: plain.pid()},
		{name: gwArgs, endpoint: args.url + "/agents/bench/mcp", headers: headers, pid: args.pid()},
	}
	for i := range targets {
		targets[i].echoPid = echo.pid()
		if targets[i].tool == "" {
			targets[i].tool = echoTool(ctx, t, targets[i])
		}
	}
	checkArgPolicy(ctx, t, targets[2], targets[3], plain.extAuthz, args.extAuthz)
	for _, n := range cfg.clients {
		rep.load[n] = map[string]result{}
		for _, tg := range targets {
			rep.load[n][tg.name] = closedLoop(ctx, t, tg, n, cfg.duration)
		}
	}
	rep.authz[noopSrv] = openLoop(ctx, t, authzTarget{noopSrv, noopAddr, noopP.pid()}, cfg.rate, cfg.authzDuration)
	for _, g := range []struct {
		name string
		gw   *gatewayProc
	}{{lushEA, plain}, {lushEAA, args}} {
		tg := authzTarget{g.name, g.gw.extAuthz, g.gw.pid()}
		// With LUSH_PERF_PROFILE, the gateway's CPU profile covers exactly its ext_authz run.
		rep.authz[g.name] = profiling(t, g.gw.proc, g.gw.profile, 1, func() result { return openLoop(ctx, t, tg, cfg.rate, cfg.authzDuration) })
	}
	return rep
}

// echoTool finds the echo tool's name at tg (the gateway prefixes it with its server's name).
func echoTool(ctx context.Context, t testing.TB, tg target) string {
	t.Helper()
	c, err := connect(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("%s: tools/list: %v", tg.name, err)
	}
	for _, tool := range res.Tools {
		if tool.Name == "echo" || strings.HasSuffix(tool.Name, "__echo") {
			return tool.Name
		}
	}
	t.Fatalf("%s lists no echo tool: %v", tg.name, res.Tools)
	return ""
}

// checkArgPolicy proves that the second gateway runs the argument-reading policy and the first
// does not: echoing a path under /etc/ is refused by the one and answered by the other, through
// MCP and through ext_authz alike.
func checkArgPolicy(ctx context.Context, t testing.TB, plain, args target, plainEA, argsEA string) {
	t.Helper()
	call := func(tg target) error {
		c, err := connect(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = tg.tool, map[string]any{"text": "/etc/passwd"}
		res, err := c.CallTool(ctx, req)
		if err == nil && res.IsError {
			err = fmt.Errorf("the tool answered an error: %v", res.Content)
		}
		return err
	}
	if err := call(plain); err != nil {
		t.Fatalf("%s refused an echo of /etc/passwd, which no policy of its project denies: %v", plain.name, err)
	}
	if err := call(args); err == nil {
		t.Fatalf("%s let an echo of /etc/passwd through: its project's argument policy is not in force", args.name)
	} else if !strings.Contains(err.Error(), argPolicyMessage) {
		t.Fatalf("%s refused an echo of /etc/passwd, but not for the argument policy's reason (%q): %v", args.name, argPolicyMessage, err)
	}
	check := func(addr string) (bool, string) {
		req := checkRequest(0)
		req.Attributes.Request.Http.RawBody = []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"/etc/passwd"}}}`)
		req.Attributes.Request.Http.Headers["content-length"] = fmt.Sprint(len(req.Attributes.Request.Http.RawBody))
		req.Attributes.Request.Http.Size = int64(len(req.Attributes.Request.Http.RawBody))
		resp, err := authzClient(t, addr).Check(ctx, req)
		if err != nil {
			t.Fatalf("ext_authz %s: Check: %v", addr, err)
		}
		return resp.GetOkResponse() != nil, resp.GetDeniedResponse().GetBody()
	}
	if ok, body := check(plainEA); !ok {
		t.Fatalf("the ext_authz of %s refused an echo of /etc/passwd, which no policy of its project denies: %s", plain.name, body)
	}
	if ok, body := check(argsEA); ok {
		t.Fatalf("the ext_authz of %s let an echo of /etc/passwd through: its project's argument policy is not in force", args.name)
	} else if !strings.Contains(body, argPolicyMessage) {
		t.Fatalf("the ext_authz of %s refused an echo of /etc/passwd, but not for the argument policy's reason (%q): %s", args.name, argPolicyMessage, body)
	}
}

func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func us(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f×", float64(a)/float64(b))
}

func share(r, of result) string {
	if of.perSecond() == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", 100*r.perSecond()/of.perSecond())
}

// write prints the report: issue 21's rows ("today" and the peer in the same run), then every
// figure behind them.
func (r *report) write(w io.Writer, command string) {
	fmt.Fprintf(w, "\n## Issue 21's rows, measured side by side in one run\n\n")
	fmt.Fprintf(w, "command: %s\n", command)
	fmt.Fprintf(w, "machine: %d CPUs (GOMAXPROCS %d), load average at start %s, %s, started %s\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), r.loadavg, runtime.Version(), r.startedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "each closed-loop run %s, each ext_authz run %s at %d requests/s, each decision %s\n\n",
		r.cfg.duration, r.cfg.authzDuration, r.cfg.rate, r.cfg.decisionDuration)
	if f := strings.Fields(r.loadavg); len(f) > 0 {
		if l, err := strconv.ParseFloat(f[0], 64); err == nil && l > float64(runtime.NumCPU()) {
			fmt.Fprintf(w, "NOTE: the machine was busy with other work when the run started (load %.1f on %d CPUs): every figure is pessimistic, the ratios less so.\n", l, runtime.NumCPU())
		}
	}
	fmt.Fprintln(w, "The load generators and the OPA evaluations run in the test process; the echo server, the bare proxy, the no-op ext_authz server and each lushctl gateway are processes of their own, all on loopback and on the same CPUs.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| what | today | peer in the same run |")
	fmt.Fprintln(w, "|---|---|---|")
	for i, name := range []string{"allowed read", "denied write"} {
		b, p := r.bundle[i], r.rbac[i]
		fmt.Fprintf(w, "| one decision (OPA rego package, prepared query), %s: mean, p99 | %s, p99 %s | a plain RBAC policy of the same intent: %s, p99 %s (%s, p99 %s) |\n",
			name, us(b.mean), us(b.p99), us(p.mean), us(p.p99), ratio(b.mean, p.mean), ratio(b.p99, p.p99))
		if r.opa != "" {
			b, p := r.opaLush[i], r.opaRBAC[i]
			fmt.Fprintf(w, "| one decision, `opa bench`, %s: ns/op, p99 | %s, p99 %s | a plain RBAC policy of the same intent: %s, p99 %s (%s, p99 %s) |\n",
				name, us(b.mean), us(b.p99), us(p.mean), us(p.p99), ratio(b.mean, p.mean), ratio(b.p99, p.p99))
		}
	}
	hi, lo := r.cfg.clients[len(r.cfg.clients)-1], r.cfg.clients[0]
	if l := r.load[hi]; l != nil {
		fmt.Fprintf(w, "| gateway CPU per call, %d clients, decision cached | %s | bare httputil reverse proxy: %s (%s) |\n",
			hi, us(l[gw].cpuPerCall()), us(l[bare].cpuPerCall()), ratio(l[gw].cpuPerCall(), l[bare].cpuPerCall()))
		fmt.Fprintf(w, "| gateway throughput, %d clients | %s of direct | bare proxy: %s of direct |\n", hi, share(l[gw], l[direct]), share(l[bare], l[direct]))
		fmt.Fprintf(w, "| same, with a project policy that reads the arguments (every call a cache miss) | %s of direct, p99 %s, CPU per call %s | — |\n",
			share(l[gwArgs], l[direct]), us(quantile(l[gwArgs].lat, 0.99)), us(l[gwArgs].cpuPerCall()))
	}
	if l := r.load[lo]; l != nil {
		d := quantile(l[direct].lat, 0.5)
		fmt.Fprintf(w, "| added p50 at %d client(s) | +%s (with the argument policy +%s) | bare proxy +%s |\n", lo,
			us(quantile(l[gw].lat, 0.5)-d), us(quantile(l[gwArgs].lat, 0.5)-d), us(quantile(l[bare].lat, 0.5)-d))
	}
	noopP99 := quantile(r.authz[noopSrv].lat, 0.99)
	notAllowed := func(res result) string {
		if res.failed == 0 {
			return ""
		}
		return fmt.Sprintf("; %d of %d Checks not allowed", res.failed, res.failed+res.calls)
	}
	fmt.Fprintf(w, "| ext_authz at %d req/s, p99 | %s (%s the no-op's%s) | no-op ext_authz server: %s |\n",
		r.cfg.rate, us(quantile(r.authz[lushEA].lat, 0.99)), ratio(quantile(r.authz[lushEA].lat, 0.99), noopP99), notAllowed(r.authz[lushEA]), us(noopP99))
	fmt.Fprintf(w, "| ext_authz with an argument-reading policy, p99 | %s (%s the no-op's%s) | no-op ext_authz server: %s |\n",
		us(quantile(r.authz[lushEAA].lat, 0.99)), ratio(quantile(r.authz[lushEAA].lat, 0.99), noopP99), notAllowed(r.authz[lushEAA]), us(noopP99))

	fmt.Fprintf(w, "\n### Closed loop: mcp-go clients calling echo (each client its own session)\n\n")
	fmt.Fprintln(w, "| clients | path | calls/s | share of direct | p50 | p99 | CPU per call of the hop's process | of the echo server | failed |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, n := range r.cfg.clients {
		for _, name := range []string{direct, bare, gw, gwArgs} {
			res := r.load[n][name]
			cpu := us(res.cpuPerCall())
			if name == direct {
				cpu = "—"
			}
			echoCPU := "—"
			if res.calls > 0 {
				echoCPU = us(res.echoCPU / time.Duration(res.calls))
			}
			fmt.Fprintf(w, "| %d | %s | %.0f | %s | %s | %s | %s | %s | %d |\n", n, name, res.perSecond(), share(res, r.load[n][direct]),
				us(quantile(res.lat, 0.5)), us(quantile(res.lat, 0.99)), cpu, echoCPU, res.failed)
		}
	}
	fmt.Fprintf(w, "\n### ext_authz: gRPC Check, open loop at %d requests/s, one connection\n\n", r.cfg.rate)
	fmt.Fprintln(w, "| server | Checks allowed | not allowed | p50 | p99 | p99.9 | CPU per Check of the server's process | CPUs the server kept busy |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, name := range []string{noopSrv, lushEA, lushEAA} {
		res := r.authz[name]
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %s | %.2f |\n", name, res.calls, res.failed, us(quantile(res.lat, 0.5)), us(quantile(res.lat, 0.99)),
			us(quantile(res.lat, 0.999)), us(res.cpuPerCall()), res.cpu.Seconds()/res.elapsed.Seconds())
	}
	fmt.Fprintln(w, "\nLatency percentiles are over the calls and Checks that were allowed; CPU per call divides the process's CPU by them.")
	for _, name := range []string{noopSrv, lushEA, lushEAA} {
		if res := r.authz[name]; res.failed > 0 {
			fmt.Fprintf(w, "%s: %d Checks not allowed (fail closed); the first: %s\n", name, res.failed, res.first)
		}
	}
	for _, n := range r.cfg.clients {
		for _, name := range []string{direct, bare, gw, gwArgs} {
			if res := r.load[n][name]; res.failed > 0 {
				fmt.Fprintf(w, "%s, %d clients: %d calls failed; the first: %s\n", name, n, res.failed, res.first)
			}
		}
	}
	fmt.Fprintf(w, "\n### One decision: OPA's rego package (prepared query, input parsed once) and the opa CLI's `opa bench`\n\n")
	if r.opa != "" {
		fmt.Fprintf(w, "opa CLI: %s\n\n", r.opa)
	}
	fmt.Fprintln(w, "| input | policy | evaluations | mean | p50 | p99 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for i, name := range []string{"allowed read", "denied write"} {
		for _, p := range []struct {
			name string
			c    decisionCost
		}{{"quickstart bundle (data.lush.authz.decision)", r.bundle[i]}, {"plain RBAC (data.rbac.decision)", r.rbac[i]},
			{"`opa bench`, quickstart bundle", r.opaLush[i]}, {"`opa bench`, plain RBAC", r.opaRBAC[i]}} {
			if p.c.evals == 0 {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s |\n", name, p.name, p.c.evals, us(p.c.mean), us(p.c.p50), us(p.c.p99))
		}
	}
}
