// Package enforce is the step every enforcement point shares: decide a call with the one policy
// decision function, record the decision in the decision log before anything runs, and record
// afterwards what happened. The MCP gateway, the ext_authz server, agentd, the scheduler and the
// HTTP APIs all go through it, so a call decided at any of them produces the same decision and the
// same log event.
//
// A process has one Policy: the deployed build's engine, the budget ledger and what decisions are
// logged with. Each enforcement point decides with an Enforcer made from it
// (Policy.Enforcer(point)), so deploying a build to the whole process is one call (Policy.Set).
//
// If the decision cannot be recorded, the verdict denies: no decision is dropped silently. The
// Policy's Logger is told why (the store's error, rate-limited), and the caller is told that the
// decision was not recorded (DecisionRef), so that nobody looks for its id in the log.
package enforce

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/budget"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// Rule ids the enforcer adds to decisions it overrides.
const (
	RuleLogUnavailable = "lush.log.unavailable"
	RuleNoPolicy       = "lush.policy.unavailable"
)

// Enforcer decides and records at one enforcement point (Policy.Enforcer). It is safe for
// concurrent use; a build deployed to its Policy applies to the calls that start from then on
// (calls in flight keep the engine they started with).
//
// The enforcer also applies the project's rate_limits (lush.yaml; data.lush.project.rate_limits
// of the bundle) to tools/call and agent/invoke: before deciding, it takes a token from every
// bucket that applies to the call, and when one is empty it tells the policy so in
// input.rate_limit, and the policy denies the call (lush.rate.limited). A call that is not
// allowed, for any reason, gives its tokens back. Each enforcement point has buckets of its own;
// they are kept across deploys while the rate limits stay the same.
//
// It applies the project's budgets (data.lush.project.budgets) to the same actions: before
// deciding, it reserves the call's cost of every budget that applies in the policy's ledger
// (Config.Budgets) and tells the policy in input.budget, which denies the call when one is
// exhausted (lush.budget.exhausted). A call that runs (allowed or stubbed, and recorded) is
// charged in the decision log in the transaction that records its decision; any other gives its
// reservation back. An invocation's tokens are charged with its completion (CompleteInvocation).
type Enforcer struct {
	policy *Policy
	point  string

	rate   atomic.Pointer[rateState] // the rate limiter of the policy's current engine
	rateMu sync.Mutex                // serializes changes of rate
}

// rateState is the rate limiter of one policy engine (nil when its build has no rate limits).
type rateState struct {
	engine  *authz.Engine
	limiter *limiter
}

// limiter returns the rate limiter of eng. The buckets are kept when eng has the same rate
// limits as the engine before it, and start afresh when they changed.
func (e *Enforcer) limiter(eng *authz.Engine) *limiter {
	if s := e.rate.Load(); s != nil && s.engine == eng {
		return s.limiter
	}
	e.rateMu.Lock()
	defer e.rateMu.Unlock()
	old := e.rate.Load()
	if old != nil && old.engine == eng {
		return old.limiter
	}
	limits := limitsOf(eng)
	var lim *limiter
	if old != nil && old.limiter.sameLimits(limits) {
		lim = old.limiter
	} else {
		lim = newLimiter(limits, e.policy.cfg.Clock, e.policy.cfg.MaxRateBuckets)
	}
	e.rate.Store(&rateState{engine: eng, limiter: lim})
	return lim
}

// Point is the enforcement point's name in decision-log events.
func (e *Enforcer) Point() string { return e.point }

// Engine returns the policy engine of the deployed build (nil before the first deploy).
func (e *Enforcer) Engine() *authz.Engine { return e.policy.Engine() }

// Environment is the environment name passed to the policy.
func (e *Enforcer) Environment() string { return e.policy.cfg.Environment }

// Budgets is the budget ledger of the enforcer's policy, shared by every enforcer of the
// process (nil without a decision log).
func (e *Enforcer) Budgets() *budget.Ledger { return e.policy.cfg.Budgets }

// Verdict is a recorded decision.
type Verdict struct {
	authz.Decision
	ID       string        // the decision id, also in the log and in answers to the client
	Latency  time.Duration // time to decide
	Recorded bool          // the decision is in the log
	Tool     string        // the tool reference of the call ("" for decisions without a tool)
	// RetryAfter is set when the call was denied only because it exceeds a rate limit: the time
	// after which a retry can succeed (HTTP answers it as 429 with Retry-After).
	RetryAfter time.Duration
	enforcer   *Enforcer
	event      *decisionlog.Event
	budgets    *budget.Reservation // the budgets that applied, when the call was charged
}

// A Precondition is what an allowed call needs before it can run, such as fetching the
// credential it will carry. It runs after the policy allowed the call and before the decision is
// recorded. An error denies the call; when the error has the methods Rule() string and
// Reason() string, they give the denial's rule id and the reason the caller is told (the error's
// own text, which may hold internals, goes to the log's error field only).
type Precondition func(ctx context.Context) error

// RulePrecondition is the rule id of a precondition's denial when its error names none.
const RulePrecondition = "lush.precondition.failed"

// An Option changes how one decision is made.
type Option func(*options)

// options are what a decision's Options set.
type options struct {
	pre    Precondition
	cred   func() *decisionlog.CredentialUse // WithCredentialUse
	extra  []decisionlog.Charge              // WithCharges
	refuse *authz.Reason                     // refusing
	parent string                            // WithParent
}

// WithPrecondition makes pre a condition of the call: when the policy allows it, pre runs, and
// its error turns the decision into a denial, recorded as such.
func WithPrecondition(pre Precondition) Option {
	return func(o *options) { o.pre = pre }
}

// WithCredentialUse records, with an allowed decision, how the upstream credential the call
// carries was obtained: used is asked after the precondition ran (nil for none).
func WithCredentialUse(used func() *decisionlog.CredentialUse) Option {
	return func(o *options) { o.cred = used }
}

// WithParent records the decision as part of another: the decision id of the call a server
// request belongs to (decisionlog.Event.Parent).
func WithParent(decisionID string) Option {
	return func(o *options) { o.parent = decisionID }
}

// All applies every option of opts, in order: for a helper that sets several.
func All(opts ...Option) Option {
	return func(o *options) {
		for _, opt := range opts {
			opt(o)
		}
	}
}

// WithCharges makes the decision itself a change of budget usage, such as a budget top-up: when
// the policy plainly allows it (outcome allow) and it is recorded, charges are applied in the
// transaction that records it, so that the decision and the change are one entry of the log, or
// neither.
func WithCharges(charges []decisionlog.Charge) Option {
	return func(o *options) { o.extra = charges }
}

// refusing refuses the call before the policy is asked, for reason: the decision is a denial by
// reason's rule, and no rate-limit token or budget unit is taken.
func refusing(reason authz.Reason) Option {
	return func(o *options) { o.refuse = &reason }
}

func apply(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// decision is one call on its way through Decide: its input and options, and what was reserved
// for it.
type decision struct {
	in authz.Input
	options

	engine    *authz.Engine
	budgets   []budget.Budget     // the build's budgets
	rate      *reservation        // rate-limit tokens taken
	spend     *budget.Reservation // budget units reserved
	budgetErr error               // why budget usage could not be read
}

// Decide evaluates in, records the decision, and returns the verdict. It always returns a
// verdict; when the decision cannot be recorded the verdict denies. In order: the call's rate
// limits and budgets are reserved (reserve), the policy decides (decide), the decision is
// masked and recorded with the call's charges (record), and what was reserved is kept or given
// back (settle).
func (e *Enforcer) Decide(ctx context.Context, in authz.Input, opts ...Option) *Verdict {
	start := time.Now()
	d := decision{in: in} // on the stack: its options are applied apart
	if len(opts) > 0 {
		d.options = apply(opts)
	}
	d.in.Environment = e.policy.cfg.Environment
	if b := e.policy.current.Load(); b != nil {
		d.engine, d.budgets = b.engine, b.budgets
	}
	e.reserve(ctx, &d)
	v := e.decide(ctx, &d, start)
	e.record(ctx, &d, v)
	e.settle(&d, v)
	e.count(d.in, v)
	return v
}

// reserve takes the call's rate-limit tokens and reserves its budget units, and tells the
// policy, in input.rate_limit and input.budget, what they allow: the enforcer alone says so.
func (e *Enforcer) reserve(ctx context.Context, d *decision) {
	d.in.RateLimit, d.in.Budget = nil, nil
	if d.engine == nil || d.refuse != nil {
		return
	}
	if lim := e.limiter(d.engine); lim != nil {
		if d.rate = lim.reserve(&d.in); d.rate.exceeded {
			d.in.RateLimit = &authz.RateLimit{Exceeded: true, Limit: d.rate.label, RetryAfterMS: RetryAfterMS(d.rate.retry)}
		}
	}
	if e.policy.cfg.Budgets != nil {
		d.spend, d.in.Budget, d.budgetErr = e.reserveBudgets(ctx, d.budgets, &d.in)
	}
}

// decide asks the policy (unless the call is refused before it), then the precondition of a call
// it allows.
func (e *Enforcer) decide(ctx context.Context, d *decision, start time.Time) *Verdict {
	var dec authz.Decision
	switch {
	case d.refuse != nil:
		dec = deny(d.refuse.Rule, d.refuse.Message)
		if d.engine != nil {
			dec.Revision = d.engine.Revision()
		}
	case d.engine == nil:
		dec = deny(RuleNoPolicy, "no policy is loaded yet; the call is denied")
		dec.Outcome = authz.OutcomeError
	default:
		dec = d.engine.Decide(ctx, d.in)
	}
	if d.pre != nil && dec.Outcome == authz.OutcomeAllow {
		if err := d.pre(ctx); err != nil {
			dec = refused(dec, err)
		}
	}
	if d.budgetErr != nil && dec.Error == "" {
		dec.Error = "budgets: " + d.budgetErr.Error()
	}
	v := &Verdict{Decision: dec, ID: newID(), Latency: time.Since(start), enforcer: e}
	if d.in.Tool != nil {
		v.Tool = d.in.Tool.Ref
	}
	return v
}

// record writes the decision's event, masked as the policy says and with the charges of a call
// that runs, to the decision log. A decision that cannot be recorded denies.
func (e *Enforcer) record(ctx context.Context, d *decision, v *Verdict) {
	v.event = e.event(ctx, d.in, v)
	v.event.Parent = d.parent
	if d.cred != nil && v.Allow {
		v.event.Credential = d.cred()
	}
	// Mask the input as the policy says. Without a policy, or when the mask cannot be evaluated,
	// what to hide is unknown: the whole input is left out.
	eraseAll := []authz.MaskOp{{Op: "remove", Path: "/input"}}
	ops := eraseAll
	if d.engine != nil {
		var err error
		if ops, err = d.engine.Mask(ctx, d.in); err != nil {
			ops = eraseAll
		}
	}
	if len(ops) > 0 {
		decisionlog.ApplyMask(v.event, ops) // on a bad operation it erases the whole input itself
	}
	// A call that runs is charged with its decision, in the same transaction.
	if d.spend != nil && v.Allow && (v.Outcome == authz.OutcomeAllow || v.Outcome == authz.OutcomeStub) {
		v.event.Charges = d.spend.Charges()
	}
	if len(d.extra) > 0 && v.Allow && v.Outcome == authz.OutcomeAllow {
		v.event.Charges = append(v.event.Charges, d.extra...)
	} else {
		d.extra = nil
	}
	if err := e.policy.cfg.Log.Record(ctx, v.event); err != nil {
		e.policy.writeFailed(ctx, "decision log: decision not recorded, so the call is denied", "decision_id", v.ID, "point", e.point, "error", err)
		revision := v.Revision
		v.Decision = deny(RuleLogUnavailable, "the decision log cannot be written, so the call is denied")
		v.Decision.Outcome = authz.OutcomeError
		v.Decision.Error = "record decision: " + err.Error()
		v.Decision.Revision = revision
		return
	}
	v.Recorded = true
}

// settle keeps what a call that runs was charged and gives the rest back: budget units of a
// call that does not run, and the rate-limit tokens of a call that is not allowed.
func (e *Enforcer) settle(d *decision, v *Verdict) {
	if charges(v) {
		d.spend.Commit()
		v.budgets = d.spend
		if len(d.extra) > 0 && e.policy.cfg.Budgets != nil {
			e.policy.cfg.Budgets.Charged(d.extra)
		}
	} else {
		d.spend.Release()
	}
	if !v.Allow {
		d.rate.cancel() // the call does not run: it does not count against any limit
		if d.in.RateLimit != nil && onlyRule(v.Decision, RuleRateLimited) {
			v.RetryAfter = d.rate.retry
		}
	}
}

// count updates the decision metrics.
func (e *Enforcer) count(in authz.Input, v *Verdict) {
	m := e.policy.cfg.Metrics
	if m == nil {
		return
	}
	tool, access := "", v.Access
	if in.Tool != nil {
		tool = in.Tool.Ref
	}
	m.Decisions.WithLabelValues(e.point, in.Action, in.Agent, tool, access, v.Outcome).Inc()
	m.DecisionLatency.WithLabelValues(e.point).Observe(v.Latency.Seconds())
	if v.Outcome == authz.OutcomeStub {
		m.Stubs.WithLabelValues(in.Agent, tool).Inc()
	}
}

// newID returns a decision id: a time-ordered UUID (v7), which keeps the log's index appends local.
func newID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}

// refused turns an allowing decision into a denial for a failed precondition. The access and
// risk class stay those of the call.
func refused(d authz.Decision, err error) authz.Decision {
	rule, reason := RulePrecondition, "the call cannot be made: a step it needs failed"
	if r, ok := err.(interface{ Rule() string }); ok {
		rule = r.Rule()
	}
	if r, ok := err.(interface{ Reason() string }); ok {
		reason = r.Reason()
	}
	out := deny(rule, reason)
	out.Access, out.Risk, out.Revision = d.Access, d.Risk, d.Revision
	out.Rules = append(slices.Clone(d.Rules), rule)
	out.Error = err.Error()
	return out
}

// onlyRule reports whether every reason of d is rule (and there is one).
func onlyRule(d authz.Decision, rule string) bool {
	if len(d.Reasons) == 0 {
		return false
	}
	for _, r := range d.Reasons {
		if r.Rule != rule {
			return false
		}
	}
	return true
}

func deny(rule, msg string) authz.Decision {
	return authz.Decision{Outcome: authz.OutcomeDeny, Access: "write", Risk: "write",
		Reasons: []authz.Reason{{Rule: rule, Message: msg}}, Approvals: []authz.Reason{}, Rules: []string{rule}}
}

// event builds the decision-log event of a verdict.
func (e *Enforcer) event(ctx context.Context, in authz.Input, v *Verdict) *decisionlog.Event {
	input := inputJSON(&in)
	result := decisionJSON(&v.Decision)
	ev := &decisionlog.Event{
		DecisionID:  v.ID,
		Path:        "lush/authz/decision",
		Input:       input,
		Result:      result,
		Timestamp:   time.Now().UTC(),
		Labels:      e.policy.labels,
		Bundles:     e.policy.eventBundles(v.Revision),
		Metrics:     map[string]int64{"timer_lush_decision_ns": v.Latency.Nanoseconds()},
		Revision:    v.Revision,
		Point:       e.point,
		Principal:   in.Principal.ID,
		Groups:      in.Principal.Groups,
		Agent:       in.Agent,
		Chain:       in.Chain,
		Action:      in.Action,
		Access:      v.Access,
		Risk:        v.Risk,
		Outcome:     v.Outcome,
		Rules:       v.Rules,
		LatencyNS:   v.Latency.Nanoseconds(),
		Environment: in.Environment,
		Error:       v.Error,
	}
	if in.Tool != nil {
		ev.Tool, ev.ToolName = in.Tool.Ref, in.Tool.Name
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		ev.TraceID, ev.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
	return ev
}

// Complete records what happened after an allowed decision: the upstream's status (one of
// decisionlog.Statuses) and latency and, for writes, its response. The call has already run, so
// the client does not wait for the log: the completion is queued, and a completion that cannot be
// committed is counted in lush_decision_log_write_failures_total and reported to Config.Logger.
// The error is that of queueing it.
func (v *Verdict) Complete(status string, latency time.Duration, response json.RawMessage, errText string) error {
	c := &decisionlog.Completion{DecisionID: v.ID, Timestamp: time.Now().UTC(), Status: status, LatencyNS: latency.Nanoseconds(), Error: errText}
	if v.Access == "write" {
		c.Response = response
	}
	if m := v.enforcer.policy.cfg.Metrics; m != nil && status != decisionlog.StatusStubbed {
		m.UpstreamLatency.WithLabelValues(v.event.Tool, status).Observe(latency.Seconds())
	}
	return v.complete(c)
}

// CompleteInvocation records how an agent invocation (an agent/invoke decision) ended,
// with the tokens its model used. The tokens are charged to the token budgets that applied to
// the invocation, in the transaction that records the completion (a budget may thus be overrun
// by the invocation that exhausts it).
func (v *Verdict) CompleteInvocation(status string, latency time.Duration, tokensIn, tokensOut int64, errText string) error {
	return v.complete(&decisionlog.Completion{DecisionID: v.ID, Timestamp: time.Now().UTC(), Status: status,
		LatencyNS: latency.Nanoseconds(), Error: errText, TokensInput: tokensIn, TokensOutput: tokensOut,
		Charges: v.budgets.Tokens(tokensIn + tokensOut)})
}

func (v *Verdict) complete(c *decisionlog.Completion) error {
	p := v.enforcer.policy
	err := p.cfg.Log.CompleteAsync(c, func(err error) {
		if err != nil {
			p.completionFailed(v.ID, err)
			return
		}
		if len(c.Charges) > 0 && p.cfg.Budgets != nil {
			p.cfg.Budgets.Charged(c.Charges)
		}
	})
	if err != nil {
		p.completionFailed(v.ID, err)
	}
	return err
}

// Meta is the decision as clients see it, in a result's _meta["dev.lush/decision"]. A call
// denied by a rate limit alone has retry_after_ms: when a retry can succeed; a decision that
// could not be recorded has recorded: false (its id is not in the decision log).
func (v *Verdict) Meta() map[string]any {
	m := map[string]any{"id": v.ID, "tool": v.Tool, "outcome": v.Outcome, "access": v.Access, "risk": v.Risk, "reasons": v.Reasons,
		"approvals": v.Approvals, "rules": v.Rules, "revision": v.Revision}
	if v.RetryAfter > 0 {
		m["retry_after_ms"] = RetryAfterMS(v.RetryAfter)
	}
	if !v.Recorded {
		m["recorded"] = false
	}
	return m
}

// MetaJSON is Meta encoded as JSON: the same bytes as json.Marshal(v.Meta()) (the map's keys
// sorted), without building the map. Answers carry it on every call.
func (v *Verdict) MetaJSON() []byte {
	m := metaDoc{Access: v.Access, Approvals: v.Approvals, ID: v.ID, Outcome: v.Outcome, Reasons: v.Reasons,
		Revision: v.Revision, Risk: v.Risk, Rules: v.Rules, Tool: v.Tool}
	if v.RetryAfter > 0 {
		ms := RetryAfterMS(v.RetryAfter)
		m.RetryAfterMS = &ms
	}
	if !v.Recorded {
		m.Recorded = new(bool)
	}
	b, err := json.Marshal(&m)
	if err != nil { // not reached: every field encodes
		b, _ = json.Marshal(v.Meta())
	}
	return b
}

// metaDoc is Meta's map as a struct, its fields in the order json.Marshal sorts the map's keys.
type metaDoc struct {
	Access       string         `json:"access"`
	Approvals    []authz.Reason `json:"approvals"`
	ID           string         `json:"id"`
	Outcome      string         `json:"outcome"`
	Reasons      []authz.Reason `json:"reasons"`
	Recorded     *bool          `json:"recorded,omitempty"`
	RetryAfterMS *int64         `json:"retry_after_ms,omitempty"`
	Revision     string         `json:"revision"`
	Risk         string         `json:"risk"`
	Rules        []string       `json:"rules"`
	Tool         string         `json:"tool"`
}

// RetryAfterMS is d in whole milliseconds, rounded up.
func RetryAfterMS(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// RetryAfterSeconds is d in whole seconds, rounded up and at least 1: the value of an HTTP
// Retry-After header.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// Explain is the message a denied caller sees: the policy's reasons and the decision id, no
// internals.
func (v *Verdict) Explain() string { return Explain("call", v.Reasons, v.ID) }

// Explain is the message of a denied call or invocation (what): the reasons and the decision id
// (DecisionRef: a decision that could not be recorded, denied by lush.log.unavailable, is named
// as one that cannot be looked up).
func Explain(what string, reasons []authz.Reason, decisionID string) string {
	msgs := make([]string, 0, len(reasons))
	recorded := true
	for _, r := range reasons {
		msgs = append(msgs, r.Message)
		recorded = recorded && r.Rule != RuleLogUnavailable
	}
	if len(msgs) == 0 {
		msgs = append(msgs, "the policy does not allow it")
	}
	return fmt.Sprintf("Lush denied this %s: %s (%s)", what, strings.Join(msgs, "; "), DecisionRef(decisionID, recorded))
}

// DecisionRef names a decision for its caller: "decision <id>", which the decision log has, or,
// when it could not be recorded, "decision <id>, not recorded: the decision log cannot be
// written", so that nobody looks for it there (the server's log names it, with the cause).
func DecisionRef(id string, recorded bool) string {
	if recorded {
		return "decision " + id
	}
	return "decision " + id + ", not recorded: the decision log cannot be written"
}
