package main

import (
	"context"
	"runtime"
	"testing"
	"time"
)

func envOf(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func TestPlanGC(t *testing.T) {
	server := gcPlan{percent: serverGCPercent, adaptive: true}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want gcPlan
	}{
		{[]string{"gateway", "--dev", "examples/quickstart"}, nil, server},
		{[]string{"gateway"}, nil, server},
		{[]string{"serve"}, nil, server},
		{[]string{"run", "--dev", "."}, nil, server},
		{[]string{"gateway"}, map[string]string{"GOGC": "100"}, gcPlan{}},
		{[]string{"gateway"}, map[string]string{"GOGC": ""}, gcPlan{}},
		{[]string{"gateway"}, map[string]string{"GOGC": "off", "GOMEMLIMIT": "1GiB"}, gcPlan{}},
		{[]string{"gateway"}, map[string]string{"GOMEMLIMIT": "1GiB"}, gcPlan{percent: serverGCPercent}},
		{[]string{"build", "."}, nil, gcPlan{}},
		{[]string{"mesh", "xds"}, nil, gcPlan{}},
		{[]string{"health"}, nil, gcPlan{}},
		{[]string{}, nil, gcPlan{}},
		{[]string{"no-such-command"}, nil, gcPlan{}},
	} {
		if got := planGC(tc.args, envOf(tc.env)); got != tc.want {
			t.Errorf("planGC(%q, %v) = %+v, want %+v", tc.args, tc.env, got, tc.want)
		}
	}
}

func TestGCLimit(t *testing.T) {
	for _, tc := range []struct {
		m    gcMemory
		want int64
	}{
		{gcMemory{}, gcLimitFloor},
		{gcMemory{live: 15 << 20, nonHeap: 10 << 20}, gcLimitFloor},
		// 10,000 streams: ~200 MiB live heap, ~100 MiB stacks: GOGC=100's goal, not the floor.
		{gcMemory{live: 200 << 20, nonHeap: 100 << 20}, 500 << 20},
		{gcMemory{live: 1 << 63, nonHeap: 1 << 63}, 1 << 62},
	} {
		if got := gcLimit(tc.m); got != tc.want {
			t.Errorf("gcLimit(%+v) = %d, want %d", tc.m, got, tc.want)
		}
	}
}

func TestFollowLimit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time)
	lives := []uint64{0, 300 << 20, 10 << 20}
	reads := 0
	read := func() gcMemory { m := gcMemory{live: lives[reads]}; reads++; return m }
	sets := make(chan int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		followLimit(ctx, ticks, read, func(n int64) { sets <- n })
	}()
	want := []int64{gcLimitFloor, 600 << 20, gcLimitFloor}
	for i, w := range want {
		if i > 0 {
			ticks <- time.Time{}
		}
		if got := <-sets; got != w {
			t.Errorf("limit %d = %d, want %d", i, got, w)
		}
	}
	cancel()
	<-done
}

func TestReadGCMemory(t *testing.T) {
	runtime.GC()
	m := readGCMemory()
	if m.live == 0 || m.nonHeap == 0 {
		t.Errorf("readGCMemory() = %+v: the runtime's figures are missing", m)
	}
}
