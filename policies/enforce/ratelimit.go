package enforce

import (
	"encoding/json"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
)

// RuleRateLimited is the rule id of the base policy's denial of a call that exceeds one of the
// project's rate_limits (policies/limits.rego).
const RuleRateLimited = "lush.rate.limited"

// DefaultMaxRateBuckets bounds the token buckets an enforcer keeps for per-principal rate
// limits unless Config.MaxRateBuckets says otherwise.
const DefaultMaxRateBuckets = 100_000

// sweepEvery is how often, at most, idle buckets are dropped while the bucket count is under
// the bound.
const sweepEvery = time.Minute

// limit is one of the project's rate_limits, as the enforcer applies it.
type limit struct {
	label     string  // "group:contractors 5/s burst 10"
	principal string  // set for a principal's limit
	tool      string  // set for a tool's limit
	rate      float64 // tokens per second
	burst     float64
}

// bucketKey names a token bucket: the limit (its index) and, for a principal's limit, the
// caller ("" for a tool's limit, whose bucket every caller shares).
type bucketKey struct {
	limit  int
	caller string
}

type bucket struct {
	tokens float64
	last   time.Time
}

// limiter holds the token buckets of one set of rate limits. It is safe for concurrent use.
// Buckets are created full on first use; a bucket that has refilled to its burst is the same as
// no bucket, so idle buckets are dropped, which bounds memory without changing any answer. When
// the bound is reached all the same, the least recently used buckets go.
type limiter struct {
	limits     []limit
	now        func() time.Time
	maxBuckets int

	mu        sync.Mutex
	buckets   map[bucketKey]*bucket
	lastSweep time.Time
}

// limitsOf reads the rate limits of a build from its policy data (data.lush.project.rate_limits,
// written by the compiler from the manifest). Entries it cannot read are skipped.
func limitsOf(eng *authz.Engine) []limit {
	if eng == nil || eng.Bundle() == nil {
		return nil
	}
	root, _ := eng.Bundle().Data["lush"].(map[string]any)
	project, _ := root["project"].(map[string]any)
	raw, ok := project["rate_limits"]
	if !ok {
		return nil
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var entries []manifest.RateLimit
	if json.Unmarshal(data, &entries) != nil {
		return nil
	}
	var out []limit
	for _, r := range entries {
		count, per, ok := manifest.ParseRate(r.Rate)
		if !ok || r.Burst < 1 || (r.Principal == "") == (r.Tool == "") {
			continue
		}
		out = append(out, limit{label: r.String(), principal: r.Principal, tool: r.Tool,
			rate: float64(count) / per.Seconds(), burst: float64(r.Burst)})
	}
	return out
}

func newLimiter(limits []limit, now func() time.Time, maxBuckets int) *limiter {
	if len(limits) == 0 {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	if maxBuckets <= 0 {
		maxBuckets = DefaultMaxRateBuckets
	}
	return &limiter{limits: limits, now: now, maxBuckets: maxBuckets, buckets: map[bucketKey]*bucket{}}
}

// sameLimits reports whether l applies exactly limits (so that its buckets can be kept).
func (l *limiter) sameLimits(limits []limit) bool {
	if l == nil {
		return len(limits) == 0
	}
	return slices.Equal(l.limits, limits)
}

// rateLimited reports whether rate limits apply to the action: calls of tools and invocations of
// agents.
func rateLimited(action string) bool {
	return action == authz.ActionToolsCall || action == authz.ActionAgentInvoke
}

// applies reports whether limit li applies to in, and the caller of its bucket.
func (l *limiter) applies(li *limit, in *authz.Input) (string, bool) {
	if li.tool != "" {
		return "", in.Action == authz.ActionToolsCall && in.Tool != nil && in.Tool.Ref == li.tool
	}
	id := in.Principal.ID
	if id == "" {
		return "", false
	}
	if li.principal == id || li.principal == "group:everyone" || slices.Contains(in.Principal.Groups, li.principal) {
		return id, true
	}
	return "", false
}

// reservation is the outcome of taking a token from every bucket that applies to a call.
type reservation struct {
	l        *limiter
	taken    []*taken
	exceeded bool
	label    string        // the exceeded limit (the one to wait longest for)
	retry    time.Duration // when a retry can succeed
}

type taken struct {
	b     *bucket
	burst float64
}

// reserve takes a token from each bucket that applies to in. When one of them has none, the
// call exceeds that limit and the tokens taken from the others are given back at once: a call
// that does not run does not count against any limit.
func (l *limiter) reserve(in *authz.Input) *reservation {
	res := &reservation{l: l}
	if !rateLimited(in.Action) {
		return res
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	for i := range l.limits {
		li := &l.limits[i]
		caller, ok := l.applies(li, in)
		if !ok {
			continue
		}
		k := bucketKey{limit: i, caller: caller}
		b := l.buckets[k]
		if b == nil {
			b = &bucket{tokens: li.burst, last: now}
			l.buckets[k] = b
		}
		if elapsed := now.Sub(b.last); elapsed > 0 {
			b.tokens = math.Min(li.burst, b.tokens+elapsed.Seconds()*li.rate)
		}
		if now.After(b.last) {
			b.last = now
		}
		if b.tokens >= 1 {
			b.tokens--
			res.taken = append(res.taken, &taken{b: b, burst: li.burst})
			continue
		}
		wait := time.Duration(math.Ceil((1 - b.tokens) / li.rate * float64(time.Second)))
		if !res.exceeded || wait > res.retry {
			res.exceeded, res.label, res.retry = true, li.label, wait
		}
	}
	if res.exceeded {
		res.giveBackLocked()
	}
	return res
}

// cancel gives the tokens of the reservation back (the call did not run).
func (r *reservation) cancel() {
	if r == nil || r.l == nil || len(r.taken) == 0 {
		return
	}
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	r.giveBackLocked()
}

func (r *reservation) giveBackLocked() {
	for _, t := range r.taken {
		t.b.tokens = math.Min(t.burst, t.b.tokens+1)
	}
	r.taken = nil
}

// sweep drops the buckets that have refilled (at most every sweepEvery, or when the bound is
// reached) and, when that is not enough, the least recently used ones. l.mu is held.
func (l *limiter) sweep(now time.Time) {
	if len(l.buckets) < l.maxBuckets && now.Sub(l.lastSweep) < sweepEvery {
		return
	}
	l.lastSweep = now
	for k, b := range l.buckets {
		li := &l.limits[k.limit]
		if b.tokens+now.Sub(b.last).Seconds()*li.rate >= li.burst {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) < l.maxBuckets {
		return
	}
	keys := make([]bucketKey, 0, len(l.buckets))
	for k := range l.buckets {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return l.buckets[keys[i]].last.Before(l.buckets[keys[j]].last) })
	for _, k := range keys[:len(keys)-l.maxBuckets*3/4] {
		delete(l.buckets, k)
	}
}

// size is the number of buckets held (for tests).
func (l *limiter) size() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
