package extauthz

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/lush-agents/lush/internal/mcphttp"
)

// Checks are decided by a fixed set of long-lived worker goroutines, not by the goroutine gRPC
// starts for each request:
//
//   - Evaluating a policy over a call's arguments needs a deep stack (OPA's evaluator recurses),
//     and a new goroutine starts with a small one: growing it, copy by copy, took 25–40% of the
//     CPU of a Check that misses the decision cache. A worker keeps the stack it grew.
//   - The workers bound how many Checks are decided at once, so that a burst queues in order
//     instead of sharing the CPUs among all of its Checks, each slower than the last. The bound
//     is generous: a decision holds its worker while it waits for its commit to the decision
//     log, so the workers must cover the commit's latency at the highest rate, not only the CPUs.
//   - A Check that finds every worker busy waits for one at most maxQueueWait (or until its
//     caller gives up): then it is denied at once, 503 with the reason, instead of being decided
//     after Envoy stopped waiting, or after the decision deadline denied it anyway.
//   - When Checks take longer than targetLatency on average (the CPUs are short: more Checks
//     arrive than can be decided, or other processes took the CPUs), fewer are let in at once
//     (limiter): as many as finish in targetLatency at the rate they finish. The others are
//     denied at once, so that the ones let in are decided in about targetLatency instead of
//     all of them waiting ever longer, past the decision deadline (500 ms by default).
const (
	minWorkers    = 256
	maxQueueWait  = 250 * time.Millisecond
	targetLatency = 250 * time.Millisecond
	limitWindow   = 100 * time.Millisecond // how often the limit is set again
)

// workerCount is how many Checks are decided at once, at most: 128 per CPU, at least minWorkers
// (at 2,000 Checks a second, 256 workers are all busy only when a Check takes 128 ms). Below
// it, the limiter decides how many are let in.
func workerCount() int { return max(minWorkers, 128*runtime.GOMAXPROCS(0)) }

// workers decide Checks: run hands one to an idle worker, or waits for one.
type workers struct {
	jobs    chan *job
	stop    chan struct{}
	running sync.WaitGroup
	n       int
	wait    time.Duration // how long a Check waits for a worker
	shed    atomic.Int64  // Checks denied because no worker was free in time
	limit   *limiter
	logged  atomic.Int64 // unix second of the last log line about shedding
}

// job is one Check handed to a worker.
type job struct {
	ctx  context.Context
	req  *authv3.CheckRequest
	resp *authv3.CheckResponse
	done chan struct{}
}

func startWorkers(n int, wait time.Duration, check func(context.Context, *authv3.CheckRequest) *authv3.CheckResponse) *workers {
	w := &workers{jobs: make(chan *job), stop: make(chan struct{}), n: n, wait: wait,
		limit: newLimiter(max(4, runtime.GOMAXPROCS(0)), n, targetLatency)}
	w.running.Add(n)
	for range n {
		go func() {
			defer w.running.Done()
			for {
				select {
				case j := <-w.jobs:
					start := time.Now()
					j.resp = check(j.ctx, j.req)
					w.limit.done(time.Now(), time.Since(start))
					close(j.done)
				case <-w.stop:
					return
				}
			}
		}()
	}
	return w
}

// close stops the workers once no Check is in flight (after the gRPC server stopped).
func (w *workers) close() {
	close(w.stop)
	w.running.Wait()
}

// limiter bounds the Checks let in at once: up to its maximum while they are decided within
// its target latency on average; when they take longer, to as many as finish within the target
// at the rate they finish (at least its minimum), doubled again each window in which they are
// fast again. A window is at least limitWindow long and holds at least limitSamples Checks; the
// rate is measured from its first Check's end to its last's, and a pause of more than
// limitWindow without a Check ending starts a new window, so that idle time does not count as
// slowness.
type limiter struct {
	inflight atomic.Int64
	limit    atomic.Int64
	min, max int
	target   time.Duration

	mu    sync.Mutex
	first time.Time     // when the window's first Check ended
	last  time.Time     // when the last Check ended
	n     int           // Checks ended in the window
	took  time.Duration // their time, together
}

// limitSamples is the fewest Checks a window judges by.
const limitSamples = 8

func newLimiter(min, max int, target time.Duration) *limiter {
	l := &limiter{min: min, max: max, target: target}
	l.limit.Store(int64(max))
	return l
}

// admit lets one more Check in, unless as many as the limit are in already.
func (l *limiter) admit() bool {
	if l.inflight.Add(1) > l.limit.Load() {
		l.inflight.Add(-1)
		return false
	}
	return true
}

// cancel gives back an admission whose Check was not decided.
func (l *limiter) cancel() { l.inflight.Add(-1) }

// done records a Check decided in took, ending at now; the window's end sets the limit again.
func (l *limiter) done(now time.Time, took time.Duration) {
	l.inflight.Add(-1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 || now.Sub(l.last) > limitWindow {
		// A new window; after a pause without Checks ending, one that leaves the pause out.
		l.first, l.n, l.took = now, 0, 0
	}
	l.last = now
	l.n++
	l.took += took
	elapsed := now.Sub(l.first)
	if elapsed < limitWindow || l.n < limitSamples {
		return
	}
	limit := int(l.limit.Load())
	if l.took/time.Duration(l.n) > l.target {
		limit = min(limit, int(float64(l.n-1)/elapsed.Seconds()*l.target.Seconds()+0.5))
	} else {
		limit *= 2
	}
	l.limit.Store(int64(min(l.max, max(l.min, limit))))
	l.n, l.took = 0, 0
}

var jobPool = sync.Pool{New: func() any { return &job{} }}

// run decides req on a worker. ok is false when no worker took it in time, or ctx ended first,
// or the workers stop: the caller denies it.
func (w *workers) run(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, bool) {
	if !w.limit.admit() {
		return nil, false
	}
	j := jobPool.Get().(*job)
	*j = job{ctx: ctx, req: req, done: make(chan struct{})}
	select {
	case w.jobs <- j:
	default:
		t := time.NewTimer(w.wait)
		select {
		case w.jobs <- j:
			t.Stop()
		case <-t.C:
			w.limit.cancel()
			return nil, false
		case <-ctx.Done():
			t.Stop()
			w.limit.cancel()
			return nil, false
		case <-w.stop:
			t.Stop()
			w.limit.cancel()
			return nil, false
		}
	}
	<-j.done
	resp := j.resp
	*j = job{}
	jobPool.Put(j)
	return resp, true
}

// overloaded answers a Check that no worker took in time: 503, so that it is denied (fail
// closed) with the reason, at once.
func (s *Server) overloaded(w *workers, req *authv3.CheckRequest) *authv3.CheckResponse {
	n := w.shed.Add(1)
	if now := time.Now().Unix(); w.logged.Load() != now && w.logged.Swap(now) != now {
		s.opts.Logger.Warn("ext_authz: overloaded, so Checks are denied until they are decided in time again",
			"workers", w.n, "let_in_at_once", w.limit.limit.Load(), "target_latency", targetLatency.String(), "denied_so_far", n)
	}
	return refuse(peekID(req.GetAttributes().GetRequest().GetHttp()), &problem{status: http.StatusServiceUnavailable, code: mcphttp.CodeInternalError,
		msg: fmt.Sprintf("Lush is deciding as many requests as it can (%d at once now), and could not take this one in time, so it is denied: retry shortly", w.limit.limit.Load())})
}
