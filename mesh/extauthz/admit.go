package extauthz

import (
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/lush-agents/lush/internal/mcphttp"
)

// Checks are decided by gRPC's stream workers (grpc.NumStreamWorkers), a few long-lived
// goroutines, rather than by a goroutine started for each request, and a limiter bounds how many
// are decided at once:
//
//   - Evaluating a policy over a call's arguments needs a deep stack (OPA's evaluator recurses),
//     and a new goroutine starts with a small one: growing it, copy by copy, took 25–40% of the
//     CPU of a Check that misses the decision cache. A worker keeps the stack it grew. The
//     workers are few (streamWorkers): they take Checks in turn, and one that waits for its
//     turn through a garbage collection has its stack shrunk, to grow it again. When every
//     worker is busy, gRPC starts a goroutine for the Check, as without workers, and
//     the decision function (policies/authz) grows its stack in one step before it evaluates.
//   - At most maxInFlight Checks are decided at once. The bound is generous: a decision waits
//     for its commit to the decision log, so the bound must cover the commit's latency at the
//     highest rate, not only the CPUs.
//   - When Checks take longer than targetLatency on average (the CPUs are short: more Checks
//     arrive than can be decided, or other processes took the CPUs), fewer are let in at once
//     (limiter): as many as finish in targetLatency at the rate they finish. The others are
//     denied at once, 503 with the reason (fail closed), so that the ones let in are decided in
//     about targetLatency instead of all of them waiting ever longer, past the decision
//     deadline (500 ms by default) and the sidecar's timeout, with their CPU spent for nothing.
const (
	minInFlight   = 1024
	targetLatency = 250 * time.Millisecond
	limitWindow   = 100 * time.Millisecond // how often the limit is set again
)

// maxInFlight is how many Checks are decided at once, at most: 512 per CPU, at least
// minInFlight (at 2,000 Checks a second, 1,024 are in flight only when Checks take 512 ms, past
// the decision deadline: a pause of the machine shorter than that denies nothing). Below it,
// the limiter decides how many are let in.
func maxInFlight() int { return max(minInFlight, 512*runtime.GOMAXPROCS(0)) }

// streamWorkers is how many gRPC stream workers there are: 8 per CPU (a Check in flight waits for
// its decision log commit part of the time, so a few more than the CPUs are busy at once).
func streamWorkers() int { return 8 * runtime.GOMAXPROCS(0) }

// admission is the limiter of a Server's Checks, and what it denied.
type admission struct {
	*limiter
	shed   atomic.Int64 // Checks denied because too many were in flight
	logged atomic.Int64 // unix second of the last log line about shedding
}

func newAdmission() *admission {
	return &admission{limiter: newLimiter(max(4, runtime.GOMAXPROCS(0)), maxInFlight(), targetLatency)}
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

// overloaded answers a Check the limiter did not let in: 503, so that it is denied (fail
// closed) with the reason, at once.
func (s *Server) overloaded(req *authv3.CheckRequest) *authv3.CheckResponse {
	a := s.admission
	n := a.shed.Add(1)
	if now := time.Now().Unix(); a.logged.Load() != now && a.logged.Swap(now) != now {
		s.opts.Logger.Warn("ext_authz: overloaded, so Checks are denied until they are decided in time again",
			"let_in_at_once", a.limit.Load(), "target_latency", targetLatency.String(), "denied_so_far", n)
	}
	return refuse(peekID(req.GetAttributes().GetRequest().GetHttp()), &problem{status: http.StatusServiceUnavailable, code: mcphttp.CodeInternalError,
		msg: fmt.Sprintf("Lush is deciding as many requests as it can (%d at once now), so this one is denied: retry shortly", a.limit.Load())})
}
