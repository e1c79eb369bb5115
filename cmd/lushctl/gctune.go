package main

// The garbage collector's settings for the long-lived server processes (lushctl gateway, serve
// and run). Their live heap is small (12–15 MiB with a few sessions), so under Go's default
// (GOGC=100) the collector runs every few hundred calls and takes 15–18% of the CPU of a call.
// When the user set neither GOGC nor GOMEMLIMIT, a server runs with GC percent serverGCPercent
// and a soft memory limit that caps only the extra headroom: the limit is kept at
// max(gcLimitFloor, the runtime's non-heap memory + 2 × the live heap), so a small heap may grow
// to 5× its live size (up to the floor), and a large one (10,000 open streams) never gets less
// headroom than GOGC=100 would give it, nor more memory than the floor above that. docs/memory.md
// states the trade-off; GOGC and GOMEMLIMIT in the environment override it.

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/spf13/cobra"
)

const (
	// serverGCPercent is the GC percent of a server process when GOGC is not set.
	serverGCPercent = 400
	// gcLimitFloor is the least soft memory limit: below it, the heap grows to
	// serverGCPercent's goal.
	gcLimitFloor = 256 << 20
	// gcLimitEvery is how often the soft memory limit follows the live heap.
	gcLimitEvery = time.Second
)

// gcPlan is what a process does about the garbage collector's settings.
type gcPlan struct {
	percent  int  // the GC percent to set; 0: leave it
	adaptive bool // keep a soft memory limit over the live heap
}

// planGC decides the settings for the command args names, given the environment.
func planGC(args []string, lookupEnv func(string) (string, bool)) gcPlan {
	cmd, _, err := newRootCmd().Find(args)
	if err != nil || !isServer(cmd) {
		return gcPlan{}
	}
	if _, set := lookupEnv("GOGC"); set {
		return gcPlan{} // the user's choice, limit included
	}
	_, limitSet := lookupEnv("GOMEMLIMIT")
	return gcPlan{percent: serverGCPercent, adaptive: !limitSet}
}

// isServer says whether cmd runs a long-lived server and gets the server GC settings.
func isServer(cmd *cobra.Command) bool {
	switch cmd.CommandPath() {
	case "lushctl gateway", "lushctl serve", "lushctl run":
		return true
	}
	return false
}

// gcMemory is what the soft memory limit follows, from runtime/metrics.
type gcMemory struct {
	live    uint64 // the heap marked live by the last collection
	nonHeap uint64 // memory the runtime holds outside the heap (stacks, metadata, buffers)
}

// gcLimit is the soft memory limit for m: the floor, or the non-heap memory and twice the live
// heap (GOGC=100's goal) if that is more.
func gcLimit(m gcMemory) int64 {
	const most = 1 << 62
	if m.live > most/4 || m.nonHeap > most/2 {
		return most
	}
	return max(gcLimitFloor, int64(m.nonHeap+2*m.live))
}

var gcSamples = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

// readGCMemory reads the runtime's memory figures.
func readGCMemory() gcMemory {
	s := make([]metrics.Sample, len(gcSamples))
	for i, name := range gcSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	v := make([]uint64, len(s))
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	m := gcMemory{live: v[0]}
	if heap := v[2] + v[3] + v[4] + v[5]; v[1] > heap {
		m.nonHeap = v[1] - heap
	}
	return m
}

// followLimit sets the soft memory limit from read at each tick until ctx ends.
func followLimit(ctx context.Context, ticks <-chan time.Time, read func() gcMemory, set func(int64)) {
	set(gcLimit(read()))
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			set(gcLimit(read()))
		}
	}
}

// applyGC applies plan to this process until ctx ends; wait returns once its goroutine, if any,
// has stopped.
func applyGC(ctx context.Context, plan gcPlan) (wait func()) {
	if plan.percent == 0 {
		return func() {}
	}
	debug.SetGCPercent(plan.percent)
	if !plan.adaptive {
		return func() {}
	}
	done := make(chan struct{})
	ticker := time.NewTicker(gcLimitEvery)
	go func() {
		defer close(done)
		defer ticker.Stop()
		followLimit(ctx, ticker.C, readGCMemory, func(n int64) { debug.SetMemoryLimit(n) })
	}()
	return func() { <-done }
}

// serverGC applies the server GC settings to this process when args run a server.
func serverGC(ctx context.Context, args []string) (wait func()) {
	return applyGC(ctx, planGC(args, os.LookupEnv))
}
