package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// OpenApprovals opens the approvals store beside the decision log cfg names; OpenDecisionLog
// must have opened (and so upgraded) the log first.
func OpenApprovals(cfg Config) (*decisionlog.Approvals, error) {
	a, err := decisionlog.OpenApprovals(cfg.DecisionLog)
	if err != nil {
		return nil, fmt.Errorf("open approvals: %w", err)
	}
	return a, nil
}

// awaitApproval handles a call the policy sent for approval (v): it waits for a person's
// decision (approval.Waiter.Wait: an approval already given to this exact call is used at once;
// otherwise the call asks for one, or joins the one it already waits on, for up to
// approvals.wait). It returns the verdict the call then runs (or is refused) under, or the result
// that refuses it: approved, the call is decided again with input.approval and runs under that
// decision (still subject to the write stub); denied, expired or still pending when the wait
// ends, the model gets a refusal that says which, and what to do. The span gets an event per
// step.
//
// A client that can be asked where it is (inband.go) is pointed at the approval's page: a
// 2026-07-28 client gets input_required at once instead of a wait, and its retry waits (a retry
// whose user declined to open the page does not); a 2025-11-25 client is sent an elicitation
// while the call waits.
func (c *call) awaitApproval(ctx context.Context, tc *toolCall, in authz.Input, v *enforce.Verdict,
	opts ...enforce.Option) (*enforce.Verdict, any) {
	if c.g.approvals == nil {
		v.Complete(decisionlog.StatusError, 0, nil, "no approvals store")
		msg := fmt.Sprintf("This call needs a person's approval (%s), and this gateway has no approvals store, so it is refused (decision %s).",
			joinReasons(v.Approvals), v.ID)
		return nil, toolError(msg, v)
	}
	ac := c.approvalCall(tc)
	w := *c.g.approvals
	var pending func(ap decisionlog.Approval) any // answers a wait that ended pending, instead of the refusal
	switch mode := c.inband(); {
	case tc.retry != nil:
		if ended, ok := c.endedApproval(ctx, tc.retry.state.Approval, v); ok {
			return c.approvalEnded(ctx, in, v, ended, nil, opts...)
		}
		if tc.retry.accepted && mode == inbandInputRequired {
			pending = func(ap decisionlog.Approval) any { return c.inputRequired(ap, ac.Digest(), v) }
		} else {
			w.MaxWait = 0 // the user declined to open the page: no wait, and no new question
		}
	case mode == inbandInputRequired:
		w.MaxWait = 0
		pending = func(ap decisionlog.Approval) any { return c.inputRequired(ap, ac.Digest(), v) }
	case mode == inbandAsk:
		return c.askApproval(ctx, &w, ac, in, v, opts...)
	}
	return c.approvalEnded(ctx, in, v, w.Wait(ctx, ac, v), pending, opts...)
}

// endedApproval reads the approval a retry's requestState names: when it was denied, expired or
// used by another attempt, the retry is refused as a wait that ended so would be (v gets its
// completion), rather than asking for a new approval.
func (c *call) endedApproval(ctx context.Context, id string, v *enforce.Verdict) (approval.Waited, bool) {
	ap, err := c.g.approvals.Store.Get(ctx, id)
	var w approval.Waited
	switch {
	case errors.Is(err, decisionlog.ErrNoApproval):
		return w, false // a store that forgot it: the call asks again
	case err != nil:
		w = approval.Waited{Ending: approval.Unavailable, Err: err}
		v.Complete(decisionlog.StatusError, 0, nil, "approvals store: "+err.Error())
		return w, true
	}
	switch ap.Status {
	case decisionlog.ApprovalDenied:
		w = approval.Waited{Ending: approval.Denied, Approval: ap}
	case decisionlog.ApprovalExpired:
		w = approval.Waited{Ending: approval.Expired, Approval: ap}
	case decisionlog.ApprovalConsumed:
		w = approval.Waited{Ending: approval.Used, Approval: ap}
	default:
		return w, false
	}
	v.Complete(endStatus[w.Ending], 0, nil, fmt.Sprintf("approval %s %s (requestState of an in-band approval)", ap.ID, ap.Status))
	return w, true
}

// approvalEnded goes on from a wait that ended as w: approved, the call is decided again with
// input.approval; otherwise it is refused, or, ended pending with pending set, answered by it.
func (c *call) approvalEnded(ctx context.Context, in authz.Input, v *enforce.Verdict, w approval.Waited,
	pending func(decisionlog.Approval) any, opts ...enforce.Option) (*enforce.Verdict, any) {
	span := trace.SpanFromContext(ctx)
	ap := w.Approval
	switch w.Ending {
	case approval.Approved:
		span.AddEvent("lush.approval.approved", trace.WithAttributes(attribute.String("lush.approval.id", ap.ID),
			attribute.String("lush.approval.decided_by", ap.DecidedBy)))
		span.SetAttributes(attribute.String("lush.approval.id", ap.ID), attribute.String("lush.approval.status", decisionlog.ApprovalApproved),
			attribute.String("lush.approval.decided_by", ap.DecidedBy), attribute.String("lush.approval_required.decision_id", v.ID))
		c.g.countApproval(decisionlog.ApprovalApproved)
		nv := c.g.enforcer.Decide(ctx, approval.Grant(in, ap), opts...)
		span.SetAttributes(attribute.String("lush.decision", nv.Outcome), attribute.String("lush.decision_id", nv.ID),
			attribute.String("lush.revision", nv.Revision))
		return nv, nil
	case approval.Unavailable:
		c.g.log.Error("approvals store", "decision_id", v.ID, "error", w.Err)
		msg := fmt.Sprintf("This call needs a person's approval (%s), and the approvals store cannot be reached, so it is refused (decision %s).",
			joinReasons(v.Approvals), v.ID)
		return nil, toolError(msg, v)
	case approval.Cancelled:
		return nil, toolError(fmt.Sprintf("The call was cancelled while it waited for approval %s (decision %s).", ap.ID, v.ID), v)
	}
	span.AddEvent("lush.approval."+ap.Status, trace.WithAttributes(attribute.String("lush.approval.id", ap.ID),
		attribute.String("lush.approval.decided_by", ap.DecidedBy)))
	span.SetAttributes(attribute.String("lush.approval.id", ap.ID), attribute.String("lush.approval.status", ap.Status),
		attribute.String("lush.status", endStatus[w.Ending]))
	c.g.countApproval(ap.Status)
	if w.Ending == approval.Pending && pending != nil {
		return nil, pending(ap)
	}
	res := toolError(refusal(w, v, c.g.approvals.MaxWait), v)
	meta := res["_meta"].(map[string]any)
	meta["dev.lush/approval"] = map[string]any{"id": ap.ID, "status": ap.Status, "expires": ap.Expires.Format(time.RFC3339),
		"decided_by": ap.DecidedBy}
	return nil, res
}

// endStatus is the completion status of the approval_required decision of a wait that ended
// without running the call.
var endStatus = map[approval.Ending]string{
	approval.Denied:  decisionlog.StatusApprovalDenied,
	approval.Used:    decisionlog.StatusApprovalDenied,
	approval.Expired: decisionlog.StatusApprovalExpired,
	approval.Pending: decisionlog.StatusApprovalPending,
}

// refusal is what the model is told of a wait (for up to wait) that ended without running the
// call whose approval_required decision is v.
func refusal(w approval.Waited, v *enforce.Verdict, wait time.Duration) string {
	ap := w.Approval
	switch w.Ending {
	case approval.Used:
		return fmt.Sprintf("Approval %s was given for this call and has already been used by another attempt of it (decision %s), so this attempt is refused (decision %s).",
			ap.ID, ap.UsedBy, v.ID)
	case approval.Denied:
		why := ""
		if ap.Note != "" {
			why = fmt.Sprintf(": %q", ap.Note)
		}
		return fmt.Sprintf("A person refused this call: %s denied approval %s%s (decision %s). Do not repeat it unchanged.", ap.DecidedBy, ap.ID, why, v.ID)
	case approval.Expired:
		if ap.DecidedBy != "" {
			return fmt.Sprintf("%s approved this call (approval %s), but the approval expired at %s before the call could use it, so it is refused (decision %s).",
				ap.DecidedBy, ap.ID, ap.Expires.Format(time.RFC3339), v.ID)
		}
		return fmt.Sprintf("This call needed a person's approval (%s), and no one decided approval %s before it expired at %s, so it is refused (decision %s).",
			joinReasons(v.Approvals), ap.ID, ap.Expires.Format(time.RFC3339), v.ID)
	}
	return fmt.Sprintf("This call needs a person's approval (%s). No one decided approval %s within %s. Once a holder of the approve role approves it "+
		"(lushctl approvals approve %s), repeat exactly the same call and it will run; the approval can be decided until %s (decision %s).",
		joinReasons(v.Approvals), ap.ID, wait, ap.ID, ap.Expires.Format(time.RFC3339), v.ID)
}

// approvalRequested is told of each approval a call asks for or joins: approvers are notified
// of new ones, and the call's span and the metrics say so.
func (g *Gateway) approvalRequested(ctx context.Context, ap decisionlog.Approval, joined bool) {
	if !joined {
		g.notifier.Notify(ap)
	}
	trace.SpanFromContext(ctx).AddEvent("lush.approval.requested", trace.WithAttributes(attribute.String("lush.approval.id", ap.ID),
		attribute.Bool("lush.approval.joined", joined), attribute.String("lush.approval.expires", ap.Expires.Format(time.RFC3339))))
	g.countApproval("requested")
}

// countApproval counts an approval event in lush_approvals_total.
func (g *Gateway) countApproval(event string) {
	if g.metrics != nil {
		g.metrics.Approvals.WithLabelValues(event).Inc()
	}
}
