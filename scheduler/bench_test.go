//go:build unix

package scheduler

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
)

// benchLoops is the number of loops on the one scheduler of BenchmarkFiringLag.
const benchLoops = 10_000

// lagScenario is a BenchmarkFiringLag scenario: benchLoops loops "@every <every>", loop i with
// phase (i mod phases) seconds, so that each of the phases instants of a round fires
// benchLoops/phases loops.
type lagScenario struct {
	name   string
	every  time.Duration
	phases int
	rounds int // measured rounds (of every), after one or more warm-up rounds
	// The idle window after an instant runs from when its last firing is finished plus head
	// until the next instant minus tail.
	head, tail time.Duration
}

// BenchmarkFiringLag runs 10,000 loops on one scheduler, on the real clock and a SQLite store,
// with an invoker that does nothing, and reports:
//
//   - p50-lag-ms, p99-lag-ms, max-lag-ms: lag is when the invoker is called minus the firing's
//     scheduled instant, over every firing of the measured rounds;
//   - firings/s: the measured firings over the time spent draining them (from each instant
//     until the last of its firings is finished and recorded);
//   - drain-ms: the longest of those drains;
//   - cpu-s/round: user+system CPU of the process over the measured rounds, per round (a round
//     is one schedule interval: every loop fires once);
//   - idle-cpu-%: CPU over the idle windows (after an instant's firings are all finished and
//     recorded, until just before the next instant), in percent of one core.
//
// The scenario takes about a minute and runs once whatever b.N is: run it with -benchtime=1x
// (the default benchtime also runs it once). It checks that every firing of the measured rounds
// ran exactly once and was recorded as succeeded.
//
//	go test -run '^$' -bench BenchmarkFiringLag -benchtime=1x -count=3 ./scheduler/
func BenchmarkFiringLag(b *testing.B) {
	for _, sc := range []lagScenario{
		// Worst case: all 10,000 firings at one instant.
		{name: "same-instant", every: 5 * time.Second, phases: 1, rounds: 3, head: time.Second, tail: 500 * time.Millisecond},
		// 1,000 firings at every whole second.
		{name: "spread", every: 10 * time.Second, phases: 10, rounds: 3, head: 100 * time.Millisecond, tail: 100 * time.Millisecond},
	} {
		b.Run(sc.name, func(b *testing.B) { benchFiringLag(b, sc) })
	}
}

// lagRecorder is an invoker that succeeds at once and records when each firing started.
type lagRecorder struct {
	mu       sync.Mutex
	from, to time.Time // the measured firings are scheduled in [from, to)
	lags     []time.Duration
	runs     map[firingKey]int // measured firings: how many times each ran
	started  map[int64]int     // all firings: how many started, by scheduled instant (unix µs)
}

func (r *lagRecorder) Invoke(_ context.Context, run Run) Outcome {
	now := time.Now()
	at := run.Firing.ScheduledAt
	r.mu.Lock()
	r.started[micros(at)]++
	if !at.Before(r.from) && at.Before(r.to) {
		r.lags = append(r.lags, now.Sub(at))
		r.runs[keyOf(run.Firing)]++
	}
	r.mu.Unlock()
	return Outcome{Status: StatusSucceeded}
}

func (r *lagRecorder) startedAt(t time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started[micros(t)]
}

func benchFiringLag(b *testing.B, sc lagScenario) {
	if testing.Short() {
		b.Skip("takes about a minute")
	}
	ctx := context.Background()
	loops := make([]manifest.Loop, benchLoops)
	for i := range loops {
		loops[i] = manifest.Loop{Name: fmt.Sprintf("loop-%05d", i), Schedule: fmt.Sprintf("@every %s", sc.every),
			Agent: "agent", RunAs: "serviceaccount:bot", Instruction: "tick",
			PhaseMS: int64(i%sc.phases) * time.Second.Milliseconds()}
	}
	inv := &lagRecorder{runs: map[firingKey]int{}, started: map[int64]int{}}
	// Nothing is measured until from is set.
	inv.from = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	inv.to = inv.from

	s, err := New(ctx, Config{Store: filepath.Join(b.TempDir(), "scheduler.db")}, Options{Invoker: inv})
	if err != nil {
		b.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close(ctx)
		}
	}()
	s.Deploy(&manifest.Manifest{Loops: loops}, "rev-bench")
	s.Start()

	// Set up: the first tick records a cursor for every loop.
	deadline := time.Now().Add(time.Minute)
	for {
		s.mu.Lock()
		replan := s.replan
		s.mu.Unlock()
		if !replan {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the scheduler did not plan its loops within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	setUp := time.Now()

	// The measured rounds start on a round boundary after at least one full warm-up round.
	every := int64(sc.every / time.Second)
	from := time.Unix((setUp.Unix()/every+2)*every, 0)
	to := from.Add(time.Duration(sc.rounds) * sc.every)
	inv.mu.Lock()
	inv.from, inv.to = from, to
	inv.mu.Unlock()
	var instants []time.Time
	for t := from; t.Before(to); t = t.Add(time.Second) {
		if int(t.Sub(from)%sc.every/time.Second) < sc.phases {
			instants = append(instants, t)
		}
	}
	perInstant := benchLoops / sc.phases

	sleepUntil(from.Add(-50 * time.Millisecond))
	cpuStart := cpuTime()
	var drain, maxDrain, idleCPU, idleWall time.Duration
	for j, t := range instants {
		next := to
		if j+1 < len(instants) {
			next = instants[j+1]
		}
		sleepUntil(t)
		done := waitDrained(b, s, inv, t, perInstant)
		d := done.Sub(t)
		drain += d
		maxDrain = max(maxDrain, d)
		start, end := done.Add(sc.head), next.Add(-sc.tail)
		if end.Sub(start) < 100*time.Millisecond {
			continue // no idle time before the next instant
		}
		sleepUntil(start)
		c0, w0 := cpuTime(), time.Now()
		sleepUntil(end)
		idleCPU += cpuTime() - c0
		idleWall += time.Since(w0)
	}
	sleepUntil(to.Add(-50 * time.Millisecond))
	cpu := cpuTime() - cpuStart

	// Every measured firing ran exactly once, and is recorded as succeeded at its first attempt.
	inv.mu.Lock()
	lags := slices.Clone(inv.lags)
	runs := inv.runs
	inv.mu.Unlock()
	want := benchLoops * sc.rounds
	for _, l := range loops {
		sched, err := l.Parsed()
		if err != nil {
			b.Fatal(err)
		}
		for t := sched.Next(from.Add(-time.Nanosecond)); t.Before(to); t = sched.Next(t) {
			if n := runs[firingKey{l.Name, micros(t)}]; n != 1 {
				b.Fatalf("firing %s@%s ran %d times, want once", l.Name, t.Format(time.RFC3339), n)
			}
		}
	}
	if len(runs) != want || len(lags) != want {
		b.Fatalf("%d distinct firings ran %d times in the measured rounds, want %d once each", len(runs), len(lags), want)
	}
	var succeeded int
	if err := s.store.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lush_loop_firings
		WHERE scheduled_at >= ? AND scheduled_at < ? AND status = 'succeeded' AND attempts = 1`,
		micros(from), micros(to)).Scan(&succeeded); err != nil {
		b.Fatal(err)
	}
	if succeeded != want {
		b.Fatalf("%d firings of the measured rounds are recorded as succeeded at their first attempt, want %d", succeeded, want)
	}
	closed = true
	if err := s.Close(ctx); err != nil {
		b.Fatal(err)
	}

	slices.Sort(lags)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(0, "ns/op") // the scenario's duration says nothing
	b.ReportMetric(ms(benchPercentile(lags, 0.50)), "p50-lag-ms")
	b.ReportMetric(ms(benchPercentile(lags, 0.99)), "p99-lag-ms")
	b.ReportMetric(ms(lags[len(lags)-1]), "max-lag-ms")
	b.ReportMetric(float64(want)/drain.Seconds(), "firings/s")
	b.ReportMetric(ms(maxDrain), "drain-ms")
	b.ReportMetric(cpu.Seconds()/float64(sc.rounds), "cpu-s/round")
	if idleWall > 0 {
		b.ReportMetric(100*idleCPU.Seconds()/idleWall.Seconds(), "idle-cpu-%")
	} else {
		b.Log("no idle time between instants: idle CPU not measured")
	}
}

// waitDrained waits until the n firings scheduled at t have started and finished (their end
// is recorded in the store), and returns when that was seen (within 2ms). A scheduler that has
// not drained them a minute later has fallen behind: the benchmark fails.
func waitDrained(b *testing.B, s *Scheduler, inv *lagRecorder, t time.Time, n int) time.Time {
	deadline := t.Add(time.Minute)
	for {
		if inv.startedAt(t) >= n {
			running := false
			s.mu.Lock()
			for k := range s.running {
				if k.at <= micros(t) {
					running = true
					break
				}
			}
			s.mu.Unlock()
			if !running {
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the scheduler fell behind: %d of the %d firings scheduled at %s started within a minute",
				inv.startedAt(t), n, t.Format(time.RFC3339))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func sleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchPercentile is the q-quantile of sorted (nearest rank).
func benchPercentile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
