package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lush-agents/lush/gateway/approvalhttp"
	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// In-band approvals: when the policy asks for a person's approval of a call, a client that can
// show its user a URL is pointed at the approval's page (approvalhttp.PagePath) instead of only
// waiting:
//
//   - a 2026-07-28 client that declares elicitation in URL mode gets an input_required result at
//     once: one input request (an elicitation/create in URL mode) and a requestState signed by the
//     gateway and bound to the approval, the call's digest and the principal. Its retry of the
//     same call with the state is decided again: an approval given for that exact call lets it
//     run; still pending once approvals.wait has passed, it gets input_required again; denied or
//     expired, it is refused.
//   - a 2025-11-25 client that declares elicitation in URL mode gets an elicitation/create request
//     (URL mode, elicitationId = the call's decision id) while the call waits as it always does, and
//     notifications/elicitation/complete once the approval is decided.
//
// Other clients wait as before. The approval stays what it is: bound to the call's digest, used
// once, decided by a holder of the approve role who is not the caller.

// ProtocolMRTR is the first protocol version whose servers ask clients for input with
// input_required results (multi round-trip requests) rather than requests of their own.
const ProtocolMRTR = "2026-07-28"

// Names the in-band approval uses on the wire.
const (
	// ApprovalInputKey is the key of the approval's elicitation in inputRequests and inputResponses.
	ApprovalInputKey = "lush_approval"
	// approvalStatePrefix starts every requestState of an in-band approval; any other
	// requestState belongs to an upstream, and is not the approval's to read.
	approvalStatePrefix = "lush-approval.v1."
)

// inbandMode is how a call's client can be asked for an approval where it is.
type inbandMode int

const (
	inbandNone          inbandMode = iota // the call waits, as for every client
	inbandAsk                             // an elicitation/create request, while the call waits (2025-11-25)
	inbandInputRequired                   // an input_required result at once (2026-07-28)
)

// inband says how this call's client can be asked for an approval: it must have declared
// elicitation in URL mode (at initialize, or in a 2026-07-28 request's _meta), and the gateway
// must know the public URL of the approval page.
func (c *call) inband() inbandMode {
	if c.g.cfg.Auth.ResourceURL == "" || !urlElicitation(c.req.Capabilities()) {
		return inbandNone
	}
	switch {
	case c.req.Protocol >= ProtocolMRTR:
		return inbandInputRequired
	case c.req.Protocol == "2025-11-25":
		return inbandAsk
	}
	return inbandNone
}

// urlElicitation reports whether client capabilities declare elicitation in URL mode.
func urlElicitation(caps json.RawMessage) bool {
	var c struct {
		Elicitation *struct {
			URL json.RawMessage `json:"url"`
		} `json:"elicitation"`
	}
	if json.Unmarshal(caps, &c) != nil || c.Elicitation == nil {
		return false
	}
	return len(c.Elicitation.URL) > 0 && c.Elicitation.URL[0] == '{'
}

// approvalURL is the public URL of an approval's page.
func (g *Gateway) approvalURL(id string) string {
	return strings.TrimSuffix(g.cfg.Auth.ResourceURL, "/") + approvalhttp.PagePath(id)
}

// approvalElicitation is the params of the elicitation/create that points a client at the page
// of approval ap of the call decided as v. Its elicitationId is v's id, unique to this attempt of
// the call (the first attempt's is also the approval's id; a repeat that joins it has its own).
func (g *Gateway) approvalElicitation(ap decisionlog.Approval, v *enforce.Verdict) map[string]any {
	msg := fmt.Sprintf("This call needs a person's approval (%s). Open the page to see the call and its approval %s; "+
		"a holder of the approve role decides it there (not the caller), until %s.",
		joinReasons(v.Approvals), ap.ID, ap.Expires.UTC().Format(time.RFC3339))
	return map[string]any{"mode": "url", "message": msg, "url": g.approvalURL(ap.ID), "elicitationId": v.ID}
}

// inputRequired is the input_required result of a 2026-07-28 call whose approval ap is pending:
// the approval's elicitation and a requestState bound to the approval, the call and the caller.
func (c *call) inputRequired(ap decisionlog.Approval, digest string, v *enforce.Verdict) map[string]any {
	state := c.g.approvalStates.sign(approvalStatePrefix, approvalState{Approval: ap.ID, Digest: digest, Principal: c.caller.ID, Expires: ap.Expires.Unix()})
	return map[string]any{
		"resultType": "input_required",
		"inputRequests": map[string]any{ApprovalInputKey: map[string]any{
			"method": "elicitation/create", "params": c.g.approvalElicitation(ap, v)}},
		"requestState": state,
		"_meta": map[string]any{"dev.lush/decision": v.Meta(), "dev.lush/approval": map[string]any{"id": ap.ID, "status": ap.Status,
			"expires": ap.Expires.UTC().Format(time.RFC3339), "url": c.g.approvalURL(ap.ID)}},
	}
}

// approvalState is what an in-band approval's requestState carries, signed.
type approvalState struct {
	Approval  string `json:"a"` // the approval's id
	Digest    string `json:"d"` // the call's digest (approval.Call.Digest)
	Principal string `json:"p"` // the caller it was given to
	Expires   int64  `json:"x"` // unix seconds: the approval's expiry
}

// isApprovalState reports whether a requestState is an in-band approval's (signed or not).
func isApprovalState(s string) bool { return strings.HasPrefix(s, approvalStatePrefix) }

// openApprovalState verifies a requestState of an in-band approval for the call with digest by
// principal, at now.
func (g *Gateway) openApprovalState(s, digest, principal string, now time.Time) (approvalState, error) {
	var st approvalState
	if err := g.approvalStates.open(approvalStatePrefix, s, &st); err != nil {
		return st, err
	}
	switch {
	case st.Principal != principal:
		return st, errors.New("it was given to another caller")
	case st.Digest != digest:
		return st, errors.New("it was given for another call: retry exactly the same tool and arguments")
	case now.Unix() >= st.Expires:
		return st, fmt.Errorf("approval %s expired at %s", st.Approval, time.Unix(st.Expires, 0).UTC().Format(time.RFC3339))
	}
	return st, nil
}

// approvalRetry is a retried call's answer to its in-band approval.
type approvalRetry struct {
	state    approvalState
	accepted bool // the user accepted to open the page (inputResponses action "accept")
}

// takeApprovalRetry reads, and removes from p (the upstream never sees them), the requestState
// and inputResponses of a retry of a call whose approval was asked in-band; it returns nil when
// the call carries no approval state, and an invalid-params error when it carries one that does
// not verify for this call and caller.
func (c *call) takeApprovalRetry(p map[string]json.RawMessage, ac approval.Call) (*approvalRetry, error) {
	var state string
	if raw, ok := p["requestState"]; !ok || json.Unmarshal(raw, &state) != nil || !isApprovalState(state) {
		return nil, nil
	}
	delete(p, "requestState")
	var responses map[string]json.RawMessage
	json.Unmarshal(p["inputResponses"], &responses)
	delete(p, "inputResponses")
	st, err := c.g.openApprovalState(state, ac.Digest(), c.caller.ID, time.Now())
	if err != nil {
		c.g.log.Warn("in-band approval: a requestState was refused", "agent", c.agent, "principal", c.caller.ID, "error", err)
		return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, "tools/call requestState: %v; call again without requestState and inputResponses", err)
	}
	var answer struct {
		Action string `json:"action"`
	}
	json.Unmarshal(responses[ApprovalInputKey], &answer)
	return &approvalRetry{state: st, accepted: answer.Action == "accept"}, nil
}

// errDeclined stops the wait of a call whose user declined to open its approval's page.
var errDeclined = errors.New("the user declined to open the approval page")

// askApproval waits for the approval of a 2025-11-25 call whose client declared elicitation in
// URL mode, as w waits for any: once the call has asked for (or joined) its approval, the client
// is sent an elicitation/create in URL mode for the approval's page, while the call waits. An
// answer other than accept (the user declined or dismissed it) ends the wait: the call is
// refused, and the approval stays open for a repeat. An error (a client that cannot be asked)
// changes nothing. Once the approval is decided, the client is told the elicitation is complete
// (notifications/elicitation/complete). The question is owned by this call: it ends (cancelled
// at the client) when the wait does.
func (c *call) askApproval(ctx context.Context, w *approval.Waiter, ac approval.Call, in authz.Input, v *enforce.Verdict,
	opts ...enforce.Option) (*enforce.Verdict, any) {
	if !c.req.CanAsk() {
		return c.approvalEnded(ctx, in, v, w.Wait(ctx, ac, v), nil, opts...)
	}
	waitCtx, stopWait := context.WithCancelCause(ctx)
	defer stopWait(nil)
	askCtx, stopAsk := context.WithCancel(ctx)
	defer stopAsk()
	var answered chan struct{} // closed once the question ends; nil when none was asked
	requested := w.Requested
	w.Requested = func(rctx context.Context, ap decisionlog.Approval, joined bool) {
		if requested != nil {
			requested(rctx, ap, joined)
		}
		answered = make(chan struct{})
		params := c.g.approvalElicitation(ap, v)
		go func(done chan<- struct{}) {
			defer close(done)
			res, err := c.req.Ask(askCtx, "elicitation/create", params)
			if err != nil {
				if askCtx.Err() == nil {
					c.g.log.Debug("in-band approval: the client could not be asked", "decision_id", v.ID, "error", err)
				}
				return
			}
			var answer struct {
				Action string `json:"action"`
			}
			if json.Unmarshal(res, &answer) == nil && answer.Action != "accept" {
				stopWait(errDeclined)
			}
		}(answered)
	}
	waited := w.Wait(waitCtx, ac, v)
	stopAsk()
	if answered != nil {
		<-answered
	}
	ap := waited.Approval
	if waited.Ending == approval.Cancelled && ctx.Err() == nil && errors.Is(context.Cause(waitCtx), errDeclined) {
		msg := fmt.Sprintf("The user declined to open the page of approval %s (%s), so the call did not wait for it (decision %s). "+
			"The approval stays open until %s: once a holder of the approve role approves it, repeat exactly the same call and it will run.",
			ap.ID, c.g.approvalURL(ap.ID), v.ID, ap.Expires.UTC().Format(time.RFC3339))
		return nil, toolError(msg, v)
	}
	switch waited.Ending {
	case approval.Approved, approval.Denied, approval.Expired, approval.Used:
		if answered != nil {
			c.req.Notify("notifications/elicitation/complete", map[string]any{"elicitationId": v.ID})
		}
	}
	return c.approvalEnded(ctx, in, v, waited, nil, opts...)
}
