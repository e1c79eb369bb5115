package enforce_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

const notes = "mcp://notes.example.com/mcp"

const limitsYAML = `rate_limits:
  - principal: group:engineering
    rate: 1/s
    burst: 2
  - tool: mcp://notes.example.com/mcp
    rate: 60/m
    burst: 3
`

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func limitedEnforcer(t testing.TB, eng *authz.Engine) (*enforce.Enforcer, *fakeClock, *decisionlog.Log) {
	t.Helper()
	log, err := decisionlog.Open(context.Background(), filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := enforce.NewPolicy(enforce.Config{Log: log, Clock: clock.Now}).Enforcer("test")
	e.Policy().Set(eng)
	return e, clock, log
}

func readCall(who, ref, name string) authz.Input {
	return authz.Input{Action: "tools/call", Principal: authz.Principal{ID: who, Groups: []string{"group:engineering"}}, Agent: "researcher",
		Tool: &authz.Tool{Ref: ref, Name: name}}
}

func isLimited(v *enforce.Verdict) bool {
	return !v.Allow && len(v.Rules) == 1 && v.Rules[0] == enforce.RuleRateLimited
}

func TestRateLimitPerPrincipal(t *testing.T) {
	e, clock, _ := limitedEnforcer(t, engineWith(t, limitsYAML))
	ctx := context.Background()
	bob := readCall("user:bob", fs, "read_text_file")
	for i := range 2 {
		if v := e.Decide(ctx, bob); v.Outcome != authz.OutcomeAllow || v.RetryAfter != 0 {
			t.Fatalf("call %d within the burst: %+v", i+1, v.Decision)
		}
	}
	v := e.Decide(ctx, bob)
	if !isLimited(v) || v.RetryAfter != time.Second || !v.Recorded {
		t.Fatalf("call over the burst: %+v (retry after %v)", v.Decision, v.RetryAfter)
	}
	want := "rate limit group:engineering 1/s burst 2 exceeded: retry after 1000 ms"
	if v.Reasons[0].Message != want || !strings.Contains(v.Explain(), want) {
		t.Errorf("reason = %q, want %q", v.Reasons[0].Message, want)
	}
	if ms := v.Meta()["retry_after_ms"]; ms != int64(1000) {
		t.Errorf("meta retry_after_ms = %v", ms)
	}
	// Another member of the group has a bucket of its own.
	carl := readCall("user:carl", fs, "read_text_file")
	for i := range 2 {
		if v := e.Decide(ctx, carl); !v.Allow {
			t.Fatalf("carl's call %d: %+v", i+1, v.Decision)
		}
	}
	// Half a second refills half a token: still denied, retry in half a second.
	clock.Advance(500 * time.Millisecond)
	if v := e.Decide(ctx, bob); !isLimited(v) || v.RetryAfter != 500*time.Millisecond {
		t.Fatalf("after 500ms: %+v (retry after %v)", v.Decision, v.RetryAfter)
	}
	clock.Advance(500 * time.Millisecond)
	if v := e.Decide(ctx, bob); !v.Allow {
		t.Fatalf("after a second: %+v", v.Decision)
	}
	if v := e.Decide(ctx, bob); !isLimited(v) {
		t.Fatalf("the refilled token is used: %+v", v.Decision)
	}
	// A principal the limit does not match is not limited.
	alice := authz.Input{Action: "tools/call", Principal: authz.Principal{ID: "user:alice", Groups: []string{}}, Agent: "orchestrator",
		Tool: &authz.Tool{Ref: fs, Name: "read_text_file"}}
	for i := range 5 {
		if v := e.Decide(ctx, alice); v.Outcome == authz.OutcomeDeny && v.Rules[0] == enforce.RuleRateLimited {
			t.Fatalf("alice's call %d is rate limited: %+v", i+1, v.Decision)
		}
	}
}

func TestRateLimitPerToolIsShared(t *testing.T) {
	e, clock, _ := limitedEnforcer(t, engineWith(t, strings.Replace(limitsYAML, "burst: 2", "burst: 100", 1)))
	ctx := context.Background()
	for i, who := range []string{"user:bob", "user:carl", "user:bob"} {
		if v := e.Decide(ctx, readCall(who, notes, "search_notes")); !v.Allow {
			t.Fatalf("call %d: %+v", i+1, v.Decision)
		}
	}
	v := e.Decide(ctx, readCall("user:dora", notes, "search_notes"))
	if !isLimited(v) || v.RetryAfter != time.Second || !strings.Contains(v.Reasons[0].Message, notes+" 60/m burst 3") {
		t.Fatalf("fourth call: %+v (retry after %v)", v.Decision, v.RetryAfter)
	}
	// Other tools are not limited by it.
	if v := e.Decide(ctx, readCall("user:dora", fs, "read_text_file")); !v.Allow {
		t.Fatalf("filesystem call: %+v", v.Decision)
	}
	clock.Advance(time.Second)
	if v := e.Decide(ctx, readCall("user:dora", notes, "search_notes")); !v.Allow {
		t.Fatalf("after a second: %+v", v.Decision)
	}
}

// A call that is not allowed, for whatever reason, consumes no token; a call denied by one
// limit consumes none of the others.
func TestRateLimitDeniedCallsConsumeNothing(t *testing.T) {
	e, _, _ := limitedEnforcer(t, engineWith(t, limitsYAML))
	ctx := context.Background()
	for range 5 {
		v := e.Decide(ctx, readCall("user:bob", "tools/shell", ""))
		if v.Allow || v.RetryAfter != 0 || isLimited(v) {
			t.Fatalf("a tool outside the allowlist: %+v", v.Decision)
		}
	}
	// bob's bucket is still full; two calls of the notes tool take a token of both buckets each.
	for i := range 2 {
		if v := e.Decide(ctx, readCall("user:bob", notes, "search_notes")); !v.Allow {
			t.Fatalf("call %d: %+v", i+1, v.Decision)
		}
	}
	// bob is over his limit now: his denied calls take nothing from the tool's bucket.
	for range 5 {
		if v := e.Decide(ctx, readCall("user:bob", notes, "search_notes")); !isLimited(v) {
			t.Fatalf("bob over his limit: %+v", v.Decision)
		}
	}
	if v := e.Decide(ctx, readCall("user:carl", notes, "search_notes")); !v.Allow {
		t.Fatalf("the tool's last token: %+v", v.Decision)
	}
	// A denial that is not only the rate limit carries no retry time.
	v := e.Decide(ctx, readCall("user:bob", notes, "post_note"))
	if v.Allow || v.RetryAfter != 0 || len(v.Rules) < 2 {
		t.Fatalf("a write bob may not make, over the limit: %+v (retry after %v)", v.Decision, v.RetryAfter)
	}
}

func TestRateLimitAgentInvoke(t *testing.T) {
	e, _, _ := limitedEnforcer(t, engineWith(t, limitsYAML))
	in := authz.Input{Action: "agent/invoke", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "researcher"}
	for range 2 {
		if v := e.Decide(context.Background(), in); !v.Allow {
			t.Fatalf("invocation: %+v", v.Decision)
		}
	}
	if v := e.Decide(context.Background(), in); !isLimited(v) || v.RetryAfter != time.Second {
		t.Fatalf("third invocation: %+v", v.Decision)
	}
}

func TestRateLimitBucketsFollowTheBuild(t *testing.T) {
	limited := engineWith(t, limitsYAML)
	e, _, _ := limitedEnforcer(t, limited)
	ctx := context.Background()
	bob := readCall("user:bob", fs, "read_text_file")
	for range 2 {
		e.Decide(ctx, bob)
	}
	if v := e.Decide(ctx, bob); !isLimited(v) {
		t.Fatalf("over the burst: %+v", v.Decision)
	}
	// A new build with the same limits keeps the buckets.
	e.Policy().Set(engineWith(t, limitsYAML))
	if v := e.Decide(ctx, bob); !isLimited(v) {
		t.Fatalf("same limits, new build: %+v", v.Decision)
	}
	// Changed limits start afresh.
	e.Policy().Set(engineWith(t, strings.Replace(limitsYAML, "burst: 2", "burst: 4", 1)))
	for i := range 4 {
		if v := e.Decide(ctx, bob); !v.Allow {
			t.Fatalf("call %d with the new limits: %+v", i+1, v.Decision)
		}
	}
	// No limits at all.
	e.Policy().Set(engine(t))
	for range 10 {
		if v := e.Decide(ctx, bob); !v.Allow {
			t.Fatalf("without limits: %+v", v.Decision)
		}
	}
}

func TestRateLimitConcurrent(t *testing.T) {
	e, _, _ := limitedEnforcer(t, engineWith(t, strings.Replace(limitsYAML, "burst: 3", "burst: 10", 1)))
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for i := range 40 {
		wg.Go(func() {
			who := []string{"user:a", "user:b", "user:c", "user:d"}[i%4]
			if v := e.Decide(context.Background(), readCall(who, notes, "search_notes")); v.Allow {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 8 { // 4 callers with 2 each, under the tool's 10
		t.Errorf("allowed %d calls, want 8", allowed)
	}
}
