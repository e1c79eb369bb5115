package approval

import (
	"context"
	"fmt"
	"time"

	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// Ending is how a call's wait for a person's approval ended.
type Ending string

// The endings of a wait.
const (
	// Approved: a person approved the call, and this attempt used the approval up. Decide the
	// call again with Grant and run it under that decision.
	Approved Ending = "approved"
	// Denied: a person denied the call.
	Denied Ending = "denied"
	// Used: a person approved the call, and another attempt of it used the approval.
	Used Ending = "used"
	// Expired: no one decided the approval before it expired, or the call did not use an
	// approved one in time.
	Expired Ending = "expired"
	// Pending: no one decided the approval within the wait; a repeat of the call once a person
	// approved it runs.
	Pending Ending = "pending"
	// Cancelled: the caller stopped waiting; the approval stays open for a repeat of the call.
	Cancelled Ending = "cancelled"
	// Unavailable: the approvals store could not be used (Waited.Err says why).
	Unavailable Ending = "unavailable"
)

// Waited is the end of a call's wait for approval.
type Waited struct {
	Ending   Ending
	Approval decisionlog.Approval // the approval waited on, as last read (zero when none was found)
	Joined   bool                 // the call joined the approval an earlier attempt of it asked for
	Err      error                // Unavailable: why
}

// Waiter is how calls wait for people's approvals at one enforcement point. It is safe for
// concurrent use.
type Waiter struct {
	Store  *decisionlog.Approvals
	Config Config // how long approvals stay open, and how often a waiting call reads its approval
	// MaxWait is how long a call waits for a decision. Zero: the call asks for an approval (or
	// joins the pending one) and its wait ends at once, Pending unless already approved; the
	// ext_authz sidecar cannot hold Envoy's check for minutes.
	MaxWait time.Duration
	// Requested, when set, is told of the approval a call (its ctx) asked for or joined, before
	// it waits.
	Requested func(ctx context.Context, ap decisionlog.Approval, joined bool)
}

// Wait handles a call the policy sent for approval (its decision v), in order:
//
//   - an approved, unused approval of this exact call (its first attempt gave up waiting, ran at
//     another replica, or the process restarted) is used up: Approved at once;
//   - otherwise the call joins the pending approval of the same call, or asks for a new one
//     (keyed by v's decision id), and waits up to w.MaxWait (never past the approval's expiry) for a
//     holder of the approve role to decide it, reading it every Config.Poll.
//
// The approval_required decision v gets a completion in the decision log saying how the wait
// ended (approved, approval_denied, approval_expired, approval_pending, cancelled, or error).
func (w *Waiter) Wait(ctx context.Context, c Call, v *enforce.Verdict) Waited {
	start := time.Now()
	res := w.wait(ctx, c, v, start)
	res.complete(v, time.Since(start))
	return res
}

func (w *Waiter) wait(ctx context.Context, c Call, v *enforce.Verdict, start time.Time) Waited {
	if ap, ok, err := Resume(ctx, w.Store, c, v); err != nil {
		return Waited{Ending: Unavailable, Err: err}
	} else if ok {
		return Waited{Ending: Approved, Approval: ap}
	}
	ap, joined, err := Request(ctx, w.Store, w.Config, c, v)
	if err != nil {
		return Waited{Ending: Unavailable, Err: err}
	}
	if w.Requested != nil {
		w.Requested(ctx, ap, joined)
	}
	deadline := start.Add(w.MaxWait)
	if ap.Expires.Before(deadline) {
		deadline = ap.Expires
	}
	poll := w.Config.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		cur, err := w.Store.Get(ctx, ap.ID)
		if err != nil && ctx.Err() == nil {
			return Waited{Ending: Unavailable, Approval: ap, Joined: joined, Err: err}
		}
		end := func(e Ending) Waited { return Waited{Ending: e, Approval: cur, Joined: joined} }
		switch {
		case ctx.Err() != nil:
			return Waited{Ending: Cancelled, Approval: ap, Joined: joined}
		case cur.Status == decisionlog.ApprovalApproved:
			used, err := w.Store.Consume(ctx, cur.ID, v.ID)
			if err != nil {
				return Waited{Ending: Unavailable, Approval: cur, Joined: joined, Err: err}
			}
			if used {
				cur.Status, cur.UsedBy = decisionlog.ApprovalConsumed, v.ID
				return end(Approved)
			}
			// Another attempt of the same call took it, or it expired just now: the next read
			// says which.
		case cur.Status == decisionlog.ApprovalConsumed:
			return end(Used)
		case cur.Status == decisionlog.ApprovalDenied:
			return end(Denied)
		case cur.Status == decisionlog.ApprovalExpired:
			if _, err := w.Store.Expire(ctx, cur.ID); err != nil {
				return Waited{Ending: Unavailable, Approval: cur, Joined: joined, Err: err}
			}
			return end(Expired)
		case !time.Now().Before(deadline):
			return end(Pending)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// complete records how the wait of the approval_required decision v ended, as its completion.
func (r Waited) complete(v *enforce.Verdict, latency time.Duration) {
	ap := r.Approval
	status, detail := "", fmt.Sprintf("approval %s %s", ap.ID, ap.Status)
	if ap.DecidedBy != "" {
		detail += " by " + ap.DecidedBy
	}
	switch r.Ending {
	case Approved:
		status, detail = decisionlog.StatusApproved, fmt.Sprintf("approval %s by %s", ap.ID, ap.DecidedBy)
	case Denied, Used:
		status = decisionlog.StatusApprovalDenied
	case Expired:
		status = decisionlog.StatusApprovalExpired
	case Pending:
		status = decisionlog.StatusApprovalPending
		if r.Joined {
			detail += " (joined)"
		}
	case Cancelled:
		status, detail = decisionlog.StatusCancelled, "the caller stopped waiting for approval "+ap.ID
	default: // Unavailable
		status, detail = decisionlog.StatusError, "approvals store: "+r.Err.Error()
	}
	v.Complete(status, latency, nil, detail)
}
