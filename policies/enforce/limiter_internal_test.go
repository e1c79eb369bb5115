package enforce

import (
	"fmt"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/authz"
)

func TestLimiterEvictsIdleBuckets(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLimiter([]limit{{label: "group:everyone 1/s burst 1", principal: "group:everyone", rate: 1, burst: 1}},
		func() time.Time { return now }, 100)
	call := func(id string) *reservation {
		return l.reserve(&authz.Input{Action: authz.ActionToolsCall, Principal: authz.Principal{ID: id}, Tool: &authz.Tool{Ref: "tools/clock"}})
	}
	for i := range 1000 {
		if res := call(fmt.Sprintf("user:u%d", i)); res.exceeded {
			t.Fatalf("first call of user:u%d exceeded", i)
		}
		if n := l.size(); n > 100 {
			t.Fatalf("%d buckets after %d callers, bound 100", n, i+1)
		}
	}
	// Buckets that refilled are dropped at the next sweep; their callers start full, as before.
	now = now.Add(2 * sweepEvery)
	if res := call("user:u999"); res.exceeded {
		t.Fatal("a refilled caller is limited")
	}
	if n := l.size(); n != 1 {
		t.Errorf("%d buckets after the sweep, want 1", n)
	}
	if res := call("user:u999"); !res.exceeded || res.retry != time.Second {
		t.Errorf("second call = %+v", res)
	}
	// Other actions are not limited.
	if res := l.reserve(&authz.Input{Action: authz.ActionLoopTrigger, Principal: authz.Principal{ID: "user:u999"}}); res.exceeded {
		t.Error("loop/trigger is rate limited")
	}
}

func TestLimiterCancelGivesTokensBack(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLimiter([]limit{{label: "user:a 1/s burst 1", principal: "user:a", rate: 1, burst: 1},
		{label: "tools/clock 1/s burst 2", tool: "tools/clock", rate: 1, burst: 2}}, func() time.Time { return now }, 0)
	in := &authz.Input{Action: authz.ActionToolsCall, Principal: authz.Principal{ID: "user:a"}, Tool: &authz.Tool{Ref: "tools/clock"}}
	res := l.reserve(in)
	if res.exceeded || len(res.taken) != 2 {
		t.Fatalf("first = %+v", res)
	}
	res.cancel()
	res.cancel() // idempotent
	if res := l.reserve(in); res.exceeded {
		t.Fatalf("after cancel = %+v", res)
	}
	// user:a is out of tokens; the tool's bucket keeps the one it has left.
	if res := l.reserve(in); !res.exceeded || res.label != "user:a 1/s burst 1" || len(res.taken) != 0 {
		t.Fatalf("over user:a's limit = %+v", res)
	}
	other := &authz.Input{Action: authz.ActionToolsCall, Principal: authz.Principal{ID: "user:b"}, Tool: &authz.Tool{Ref: "tools/clock"}}
	if res := l.reserve(other); res.exceeded {
		t.Fatalf("user:b takes the tool's last token = %+v", res)
	}
	if res := l.reserve(other); !res.exceeded || res.label != "tools/clock 1/s burst 2" {
		t.Fatalf("tool exhausted = %+v", res)
	}
}
