package approval_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/test/projecttest"
)

// waitEnv is a policy under which alice's calls of the destructive tools/purge need approval, a
// decision log and its approvals store.
type waitEnv struct {
	log      *decisionlog.Log
	store    *decisionlog.Approvals
	enforcer *enforce.Enforcer
}

func newWaitEnv(t *testing.T) *waitEnv {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"lush.yaml": "project: wait\nroles:\n  approve: [user:sam]\ntool_grants:\n  - tool: tools/purge\n    grants:\n      - {principal: user:alice, access: write}\n",
		"agents/janitor/spec.yaml": "name: janitor\nmodel: gemini-2.5-flash\ndescription: Cleans up.\ntools:\n  - name: tools/purge\n    access: write\n" +
			"acl:\n  - principal: user:alice\n    role: execute\n",
		"tools/purge/tool.yaml": "description: Purges the cache.\ncommand: ./run\naccess: write\nrisk: destructive\n",
		"tools/purge/run":       "#!/bin/sh\necho purged\n",
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	_, eng := projecttest.Build(t, dir)
	path := filepath.Join(t.TempDir(), "d.db")
	log, err := decisionlog.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	store, err := decisionlog.OpenApprovals(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	policy := enforce.NewPolicy(enforce.Config{Log: log})
	policy.Set(eng)
	return &waitEnv{log: log, store: store, enforcer: policy.Enforcer("test")}
}

var purge = approval.Call{Tool: "tools/purge", ToolName: "purge", Arguments: json.RawMessage(`{"scope":"all"}`), Principal: "user:alice", Agent: "janitor"}

// decide decides alice's purge, which needs approval.
func (e *waitEnv) decide(t *testing.T) *enforce.Verdict {
	t.Helper()
	v := e.enforcer.Decide(context.Background(), authz.Input{Action: authz.ActionToolsCall, Agent: "janitor", Chain: []string{"janitor"}, Depth: 1,
		Principal: authz.Principal{ID: "user:alice", Groups: []string{}}, Tool: &authz.Tool{Ref: "tools/purge", Name: "purge"},
		Arguments: map[string]any{"scope": "all"}})
	if v.Outcome != authz.OutcomeApproval || !v.Recorded {
		t.Fatalf("purge: %+v", v.Decision)
	}
	return v
}

// completion is the status of the completion recorded for decision id.
func (e *waitEnv) completion(t *testing.T, id string) string {
	t.Helper()
	if err := e.log.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, err := e.log.Query(context.Background(), decisionlog.Filter{DecisionID: id})
	if err != nil || len(recs) != 1 {
		t.Fatalf("decision %s: %v %v", id, recs, err)
	}
	if recs[0].Completion == nil {
		return ""
	}
	return recs[0].Completion.Status
}

// waiter returns a waiter that reports each approval requested on requested.
func (e *waitEnv) waiter(maxWait time.Duration, requested chan<- decisionlog.Approval) *approval.Waiter {
	return &approval.Waiter{Store: e.store, Config: approval.Config{Poll: 5 * time.Millisecond}, MaxWait: maxWait,
		Requested: func(_ context.Context, ap decisionlog.Approval, _ bool) {
			if requested != nil {
				requested <- ap
			}
		}}
}

// TestWaitEndings: each way a wait ends, what it returns, and the completion it records.
func TestWaitEndings(t *testing.T) {
	ctx := context.Background()

	t.Run("pending without a wait, then joined", func(t *testing.T) {
		e := newWaitEnv(t)
		v := e.decide(t)
		w := e.waiter(0, nil).Wait(ctx, purge, v)
		if w.Ending != approval.Pending || w.Approval.ID != v.ID || w.Joined || e.completion(t, v.ID) != decisionlog.StatusApprovalPending {
			t.Fatalf("first attempt: %+v", w)
		}
		v2 := e.decide(t)
		if w2 := e.waiter(0, nil).Wait(ctx, purge, v2); w2.Ending != approval.Pending || w2.Approval.ID != v.ID || !w2.Joined {
			t.Fatalf("a repeat joins the pending approval: %+v", w2)
		}
	})

	t.Run("approved while waiting", func(t *testing.T) {
		e := newWaitEnv(t)
		v := e.decide(t)
		requested := make(chan decisionlog.Approval, 1)
		go func() {
			ap := <-requested
			e.store.Decide(ctx, ap.ID, true, "user:sam", "ok", "dec-sam")
		}()
		w := e.waiter(time.Minute, requested).Wait(ctx, purge, v)
		if w.Ending != approval.Approved || w.Approval.Status != decisionlog.ApprovalConsumed || w.Approval.UsedBy != v.ID ||
			w.Approval.DecidedBy != "user:sam" || e.completion(t, v.ID) != decisionlog.StatusApproved {
			t.Fatalf("%+v", w)
		}
		// Deciding again as approved, the policy lets the call run.
		if nv := e.enforcer.Decide(ctx, approval.Grant(authz.Input{Action: authz.ActionToolsCall, Agent: "janitor", Chain: []string{"janitor"},
			Depth: 1, Principal: authz.Principal{ID: "user:alice", Groups: []string{}}, Tool: &authz.Tool{Ref: "tools/purge", Name: "purge"},
			Arguments: map[string]any{"scope": "all"}}, w.Approval)); nv.Outcome != authz.OutcomeAllow && nv.Outcome != authz.OutcomeStub {
			t.Errorf("decided again as approved: %+v", nv.Decision)
		}
	})

	t.Run("approved before a repeat", func(t *testing.T) {
		e := newWaitEnv(t)
		first := e.decide(t)
		e.waiter(0, nil).Wait(ctx, purge, first)
		if _, err := e.store.Decide(ctx, first.ID, true, "user:sam", "", "dec-sam"); err != nil {
			t.Fatal(err)
		}
		v := e.decide(t)
		requested := make(chan decisionlog.Approval, 1)
		if w := e.waiter(0, requested).Wait(ctx, purge, v); w.Ending != approval.Approved || w.Approval.ID != first.ID || len(requested) != 0 {
			t.Fatalf("the repeat uses the approval at once, asking for none: %+v", w)
		}
		if again := e.waiter(0, nil).Wait(ctx, purge, e.decide(t)); again.Ending != approval.Pending || again.Approval.ID == first.ID {
			t.Fatalf("an approval runs one call: the next asks again: %+v", again)
		}
	})

	t.Run("denied", func(t *testing.T) {
		e := newWaitEnv(t)
		v := e.decide(t)
		requested := make(chan decisionlog.Approval, 1)
		go func() {
			ap := <-requested
			e.store.Decide(ctx, ap.ID, false, "user:sam", "not during the freeze", "dec-sam")
		}()
		w := e.waiter(time.Minute, requested).Wait(ctx, purge, v)
		if w.Ending != approval.Denied || w.Approval.Note != "not during the freeze" || e.completion(t, v.ID) != decisionlog.StatusApprovalDenied {
			t.Fatalf("%+v", w)
		}
	})

	t.Run("used by another attempt", func(t *testing.T) {
		e := newWaitEnv(t)
		requested := make(chan decisionlog.Approval, 2)
		ends := make(chan approval.Waited, 2)
		var wg sync.WaitGroup
		for range 2 {
			v := e.decide(t)
			wg.Go(func() { ends <- e.waiter(time.Minute, requested).Wait(ctx, purge, v) })
			<-requested // the second attempt joins the first's approval
		}
		recs, err := e.store.List(ctx, decisionlog.ApprovalFilter{})
		if err != nil || len(recs) != 1 {
			t.Fatalf("approvals: %v %v", recs, err)
		}
		if _, err := e.store.Decide(ctx, recs[0].ID, true, "user:sam", "", "dec-sam"); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(ends)
		got := map[approval.Ending]int{}
		for w := range ends {
			got[w.Ending]++
		}
		if got[approval.Approved] != 1 || got[approval.Used] != 1 {
			t.Fatalf("two attempts of one approved call: %v", got)
		}
	})

	t.Run("expired", func(t *testing.T) {
		e := newWaitEnv(t)
		v := e.decide(t)
		w := (&approval.Waiter{Store: e.store, Config: approval.Config{ExpireAfter: time.Nanosecond, Poll: 5 * time.Millisecond}, MaxWait: time.Minute}).
			Wait(ctx, purge, v)
		if w.Ending != approval.Expired || e.completion(t, v.ID) != decisionlog.StatusApprovalExpired {
			t.Fatalf("%+v", w)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		e := newWaitEnv(t)
		v := e.decide(t)
		cctx, cancel := context.WithCancel(ctx)
		requested := make(chan decisionlog.Approval, 1)
		go func() { <-requested; cancel() }()
		w := e.waiter(time.Minute, requested).Wait(cctx, purge, v)
		if w.Ending != approval.Cancelled || e.completion(t, v.ID) != decisionlog.StatusCancelled {
			t.Fatalf("%+v", w)
		}
		if cur, err := e.store.Get(ctx, w.Approval.ID); err != nil || cur.Status != decisionlog.ApprovalPending {
			t.Fatalf("the approval stays open for a repeat: %+v %v", cur, err)
		}
	})

	t.Run("store unavailable", func(t *testing.T) {
		e := newWaitEnv(t)
		v := e.decide(t)
		e.store.Close()
		w := e.waiter(time.Minute, nil).Wait(ctx, purge, v)
		if w.Ending != approval.Unavailable || w.Err == nil || e.completion(t, v.ID) != decisionlog.StatusError {
			t.Fatalf("%+v", w)
		}
	})
}
