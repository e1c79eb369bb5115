package authz_test

import (
	"context"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/test/gen"
)

// BenchmarkDecide measures the one decision function, Engine.Decide, over compiled bundles: the
// quickstart and generated projects with 100 and 1,000 agents (1,000 and 10,000 grants: 10× the
// grants, to check that deciding does not slow down with the number of grants). Each case runs
// cold, with the cache off (every call evaluates the policy: the cost of a cache miss), and
// warm, with the cache on and the input already decided once (a cache hit). Besides ns/op it
// reports the p50 and p99 of individual calls and the process's CPU time per call (cpu-µs/op:
// unlike the wall time, other processes on the machine do not change it much).
//
//	go test ./authz -run '^$' -bench BenchmarkDecide -benchmem -count 6
func BenchmarkDecide(b *testing.B) {
	ctx := context.Background()
	allowed := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "researcher",
		Chain: []string{"researcher"}, Depth: 1, Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}, Arguments: map[string]any{"path": "data/q3.md"}}
	denied := allowed
	denied.Tool = &authz.Tool{Ref: fs, Name: "write_file"}
	for _, cache := range []string{"cold", "warm"} {
		qs := benchEngine(b, quickstart(b), cache)
		run(b, "quickstart/allow/"+cache, qs, allowed, "allow")
		run(b, "quickstart/deny/"+cache, qs, denied, "deny")
	}

	for _, agents := range []int{100, 1000} {
		size := gen.Size{Agents: agents, Loops: agents / 5, Grants: agents * 10}
		dir := b.TempDir()
		if err := gen.Write(dir, size); err != nil {
			b.Fatal(err)
		}
		res, err := compiler.Build(ctx, dir, compiler.Offline(true))
		if err != nil || !res.OK() {
			b.Fatalf("build generated project: %v %v", err, res.Diagnostics)
		}
		in := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:user-1", Groups: []string{"group:team-1"}},
			Agent: gen.AgentName(0), Chain: []string{gen.AgentName(0)}, Depth: 1,
			Tool: &authz.Tool{Ref: gen.ToolRef(0), Name: "read_item"}, Arguments: map[string]any{"id": 7}}
		for _, cache := range []string{"cold", "warm"} {
			run(b, "generated/grants="+itoa(size.Grants)+"/allow/"+cache, benchEngine(b, res.Bundle, cache), in, "allow")
		}
	}
}

// benchEngine prepares an engine over a bundle, with the cache off ("cold") or on ("warm").
func benchEngine(b *testing.B, bundle []byte, cache string) *authz.Engine {
	var opts []authz.Option
	if cache == "cold" {
		opts = append(opts, authz.Cache(0))
	}
	e, err := authz.FromBytes(context.Background(), bundle, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func run(b *testing.B, name string, e *authz.Engine, in authz.Input, want string) {
	b.Run(name, func(b *testing.B) {
		ctx := context.Background()
		if d := e.Decide(ctx, in); d.Outcome != want {
			b.Fatalf("outcome %s, want %s: %+v", d.Outcome, want, d)
		}
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		cpu0 := processCPU()
		for b.Loop() {
			start := time.Now()
			e.Decide(ctx, in)
			lat = append(lat, time.Since(start))
		}
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
