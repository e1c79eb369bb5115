package gateway

import (
	"context"
	"encoding/json"
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

// awaitApproval handles a call the policy sent for approval (v). It returns the verdict the
// call then runs (or is refused) under, or the result that refuses it. In order:
//
//   - an approved, unused approval of this exact call (its first attempt gave up waiting, or
//     the gateway restarted) is used up, and the call is decided again with input.approval;
//   - otherwise the call joins the pending approval of the same call, or asks for a new one
//     (keyed by v's decision id), and waits up to approvals.wait for a holder of the approve
//     role to decide it (lushctl approvals, POST /approvals/{id});
//   - approved: the call is decided again with input.approval, and runs under that decision
//     (still subject to the write stub); denied, expired or still pending when the wait ends:
//     the model gets a refusal that says which, and what to do.
//
// The approval_required decision gets a completion saying how the wait ended (approved,
// approval_denied, approval_expired, approval_pending, cancelled); the approval itself and
// each person's decision are logged by the approvals API; the span gets an event per step.
func (c *call) awaitApproval(ctx context.Context, e *exposed, in authz.Input, v *enforce.Verdict, args json.RawMessage,
	pre enforce.Precondition) (*enforce.Verdict, any) {
	span := trace.SpanFromContext(ctx)
	store := c.g.opts.Approvals
	if store == nil {
		v.Complete(decisionlog.StatusError, 0, nil, "no approvals store")
		msg := fmt.Sprintf("This call needs a person's approval (%s), and this gateway has no approvals store, so it is refused (decision %s).",
			joinReasons(v.Approvals), v.ID)
		return nil, toolError(msg, v)
	}
	cfg := c.g.cfg.Approvals.WithDefaults()
	start := time.Now()
	unavailable := func(err error) (*enforce.Verdict, any) {
		c.g.log.Error("approvals store", "decision_id", v.ID, "error", err)
		v.Complete(decisionlog.StatusError, time.Since(start), nil, "approvals store: "+err.Error())
		msg := fmt.Sprintf("This call needs a person's approval (%s), and the approvals store cannot be reached, so it is refused (decision %s).",
			joinReasons(v.Approvals), v.ID)
		return nil, toolError(msg, v)
	}
	call := approval.Call{Tool: e.Ref, ToolName: e.Upstream, Arguments: args, Principal: c.caller.ID, Agent: c.agent}
	if ap, ok, err := approval.Resume(ctx, store, call, v); err != nil {
		return unavailable(err)
	} else if ok {
		return c.runApproved(ctx, in, v, ap, pre, start), nil
	}
	ap, joined, err := approval.Request(ctx, store, cfg, call, v)
	if err != nil {
		return unavailable(err)
	}
	if !joined {
		c.g.notifier.Notify(ap)
	}
	span.AddEvent("lush.approval.requested", trace.WithAttributes(attribute.String("lush.approval.id", ap.ID),
		attribute.Bool("lush.approval.joined", joined), attribute.String("lush.approval.expires", ap.Expires.Format(time.RFC3339))))
	if c.g.metrics != nil {
		c.g.metrics.Approvals.WithLabelValues("requested").Inc()
	}

	deadline := start.Add(cfg.Wait)
	if ap.Expires.Before(deadline) {
		deadline = ap.Expires
	}
	tick := time.NewTicker(cfg.Poll)
	defer tick.Stop()
	for {
		cur, err := store.Get(ctx, ap.ID)
		if err != nil && ctx.Err() == nil {
			return unavailable(err)
		}
		switch {
		case ctx.Err() != nil:
			// The client went away: the approval stays open for a repeat of the call.
			v.Complete(decisionlog.StatusCancelled, time.Since(start), nil, "the caller stopped waiting for approval "+ap.ID)
			return nil, toolError(fmt.Sprintf("The call was cancelled while it waited for approval %s (decision %s).", ap.ID, v.ID), v)
		case cur.Status == decisionlog.ApprovalApproved:
			used, err := store.Consume(ctx, cur.ID, v.ID)
			if err != nil {
				return unavailable(err)
			}
			if used {
				cur.Status, cur.UsedBy = decisionlog.ApprovalConsumed, v.ID
				return c.runApproved(ctx, in, v, cur, pre, start), nil
			}
			// Another attempt of the same call took it, or it expired just now: the next read
			// says which.
		case cur.Status == decisionlog.ApprovalConsumed:
			return c.approvalEnded(span, v, cur, start, decisionlog.StatusApprovalDenied,
				fmt.Sprintf("Approval %s was given for this call and has already been used by another attempt of it (decision %s), so this attempt is refused (decision %s).",
					cur.ID, cur.UsedBy, v.ID))
		case cur.Status == decisionlog.ApprovalDenied:
			why := ""
			if cur.Note != "" {
				why = fmt.Sprintf(": %q", cur.Note)
			}
			return c.approvalEnded(span, v, cur, start, decisionlog.StatusApprovalDenied,
				fmt.Sprintf("A person refused this call: %s denied approval %s%s (decision %s). Do not repeat it unchanged.", cur.DecidedBy, cur.ID, why, v.ID))
		case cur.Status == decisionlog.ApprovalExpired:
			if _, err := store.Expire(ctx, cur.ID); err != nil {
				return unavailable(err)
			}
			msg := fmt.Sprintf("This call needed a person's approval (%s), and no one decided approval %s before it expired at %s, so it is refused (decision %s).",
				joinReasons(v.Approvals), cur.ID, cur.Expires.Format(time.RFC3339), v.ID)
			if cur.DecidedBy != "" {
				msg = fmt.Sprintf("%s approved this call (approval %s), but the approval expired at %s before the call could use it, so it is refused (decision %s).",
					cur.DecidedBy, cur.ID, cur.Expires.Format(time.RFC3339), v.ID)
			}
			return c.approvalEnded(span, v, cur, start, decisionlog.StatusApprovalExpired, msg)
		case !time.Now().Before(deadline):
			return c.approvalEnded(span, v, cur, start, decisionlog.StatusApprovalPending,
				fmt.Sprintf("This call needs a person's approval (%s). No one decided approval %s within %s. Once a holder of the approve role approves it "+
					"(lushctl approvals approve %s), repeat exactly the same call and it will run; the approval can be decided until %s (decision %s).",
					joinReasons(v.Approvals), cur.ID, cfg.Wait, cur.ID, cur.Expires.Format(time.RFC3339), v.ID))
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// runApproved decides the call again as approved by a person, after recording that the wait
// of the approval_required decision v ended in approval ap.
func (c *call) runApproved(ctx context.Context, in authz.Input, v *enforce.Verdict, ap decisionlog.Approval, pre enforce.Precondition,
	start time.Time) *enforce.Verdict {
	v.Complete(decisionlog.StatusApproved, time.Since(start), nil, fmt.Sprintf("approval %s by %s", ap.ID, ap.DecidedBy))
	span := trace.SpanFromContext(ctx)
	span.AddEvent("lush.approval.approved", trace.WithAttributes(attribute.String("lush.approval.id", ap.ID),
		attribute.String("lush.approval.decided_by", ap.DecidedBy)))
	span.SetAttributes(attribute.String("lush.approval.id", ap.ID), attribute.String("lush.approval.status", decisionlog.ApprovalApproved),
		attribute.String("lush.approval.decided_by", ap.DecidedBy), attribute.String("lush.approval_required.decision_id", v.ID))
	if c.g.metrics != nil {
		c.g.metrics.Approvals.WithLabelValues(decisionlog.ApprovalApproved).Inc()
	}
	nv := c.g.enforcer.DecideThen(ctx, approval.Grant(in, ap), pre)
	span.SetAttributes(attribute.String("lush.decision", nv.Outcome), attribute.String("lush.decision_id", nv.ID),
		attribute.String("lush.revision", nv.Revision))
	return nv
}

// approvalEnded records that the wait of v ended without running the call (status) and
// returns the refusal the model reads, with the approval in its _meta.
func (c *call) approvalEnded(span trace.Span, v *enforce.Verdict, ap decisionlog.Approval, start time.Time, status, msg string) (*enforce.Verdict, any) {
	detail := fmt.Sprintf("approval %s %s", ap.ID, ap.Status)
	if ap.DecidedBy != "" {
		detail += " by " + ap.DecidedBy
	}
	v.Complete(status, time.Since(start), nil, detail)
	span.AddEvent("lush.approval."+ap.Status, trace.WithAttributes(attribute.String("lush.approval.id", ap.ID),
		attribute.String("lush.approval.decided_by", ap.DecidedBy)))
	span.SetAttributes(attribute.String("lush.approval.id", ap.ID), attribute.String("lush.approval.status", ap.Status),
		attribute.String("lush.status", status))
	if c.g.metrics != nil {
		c.g.metrics.Approvals.WithLabelValues(ap.Status).Inc()
	}
	res := toolError(msg, v)
	meta := res["_meta"].(map[string]any)
	meta["dev.lush/approval"] = map[string]any{"id": ap.ID, "status": ap.Status, "expires": ap.Expires.Format(time.RFC3339),
		"decided_by": ap.DecidedBy}
	return nil, res
}
