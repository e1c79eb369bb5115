// Package enforce is the step every enforcement point shares: decide a call with the one policy
// decision function, record the decision in the decision log before anything runs, and record
// afterwards what happened. The MCP gateway, the ext_authz server and agentd all go through it, so
// a call decided at any of them produces the same decision and the same log event.
//
// If the decision cannot be recorded, the verdict denies: no decision is dropped silently.
package enforce

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/budget"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// Rule ids the enforcer adds to decisions it overrides.
const (
	RuleLogUnavailable = "lush.log.unavailable"
	RuleNoPolicy       = "lush.policy.unavailable"
)

// Config configures an Enforcer.
type Config struct {
	Point       string // the enforcement point: "mcp-gateway", "ext_authz", "agentd"
	Environment string // passed to the policy as input.environment
	Instance    string // labels.id of log events: which replica decided
	Version     string // labels.version
	Log         *decisionlog.Log
	Metrics     *telemetry.Metrics // optional
	Logger      *slog.Logger       // optional: completions that could not be logged

	// Clock is the time rate limits are measured by (default time.Now); tests set it.
	Clock func() time.Time
	// MaxRateBuckets bounds the token buckets kept for per-principal rate limits (default
	// DefaultMaxRateBuckets); idle buckets are dropped first.
	MaxRateBuckets int
	// Budgets is the process's budget ledger (lush.yaml budgets), shared by all its enforcers so
	// that their calls cannot overspend together. Nil: the ledger shared by everyone using Log
	// (budget.ForLog).
	Budgets *budget.Ledger
}

// Enforcer decides and records. It is safe for concurrent use; SetEngine swaps the policy
// atomically (calls in flight keep the engine they started with).
//
// The enforcer also applies the project's rate_limits (lush.yaml; data.lush.project.rate_limits
// of the bundle) to tools/call and agent/invoke: before deciding, it takes a token from every
// bucket that applies to the call, and when one is empty it tells the policy so in
// input.rate_limit, and the policy denies the call (lush.rate.limited). A call that is not
// allowed, for any reason, gives its tokens back.
//
// It applies the project's budgets (data.lush.project.budgets) to the same actions: before
// deciding, it reserves the call's cost of every budget that applies (Config.Budgets) and tells
// the policy in input.budget, which denies the call when one is exhausted
// (lush.budget.exhausted). A call that runs (allowed or stubbed, and recorded) is charged in the
// decision log in the transaction that records its decision; any other gives its reservation
// back. An invocation's tokens are charged with its completion (CompleteInvocation).
type Enforcer struct {
	cfg   Config
	state atomic.Pointer[state]
	swap  sync.Mutex // serializes SetEngine
}

// state is a policy and the rate limiter and budgets of its build.
type state struct {
	engine  *authz.Engine
	limiter *limiter        // nil when the build has no rate limits
	budgets []budget.Budget // the build's budgets
}

// New returns an enforcer without a policy: until SetEngine, every call is denied.
func New(cfg Config) *Enforcer {
	if cfg.Budgets == nil && cfg.Log != nil {
		cfg.Budgets = budget.ForLog(cfg.Log)
	}
	return &Enforcer{cfg: cfg}
}

// SetEngine makes eng the policy for calls that start from now on. The rate limiter's buckets
// are kept when the new build has the same rate limits, and start afresh when they changed.
func (e *Enforcer) SetEngine(eng *authz.Engine) {
	e.swap.Lock()
	defer e.swap.Unlock()
	limits := limitsOf(eng)
	var lim *limiter
	if old := e.state.Load(); old != nil && old.limiter.sameLimits(limits) {
		lim = old.limiter
	} else {
		lim = newLimiter(limits, e.cfg.Clock, e.cfg.MaxRateBuckets)
	}
	e.state.Store(&state{engine: eng, limiter: lim, budgets: budget.FromEngine(eng)})
}

// Engine returns the current policy engine (nil before the first SetEngine).
func (e *Enforcer) Engine() *authz.Engine {
	if s := e.state.Load(); s != nil {
		return s.engine
	}
	return nil
}

// Environment is the environment name passed to the policy.
func (e *Enforcer) Environment() string { return e.cfg.Environment }

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

// Decide evaluates in, records the decision, and returns the verdict. It always returns a
// verdict; when the decision cannot be recorded the verdict denies.
func (e *Enforcer) Decide(ctx context.Context, in authz.Input) *Verdict {
	return e.DecideThen(ctx, in, nil)
}

// A Precondition is what an allowed call needs before it can run, such as fetching the
// credential it will carry. It runs after the policy allowed the call and before the decision is
// recorded. An error denies the call; when the error has the methods Rule() string and
// Reason() string, they give the denial's rule id and the reason the caller is told (the error's
// own text, which may hold internals, goes to the log's error field only).
type Precondition func(ctx context.Context) error

// RulePrecondition is the rule id of a precondition's denial when its error names none.
const RulePrecondition = "lush.precondition.failed"

// DecideThen is Decide with a precondition: when the policy allows the call, pre runs, and its
// error turns the decision into a denial, recorded as such.
func (e *Enforcer) DecideThen(ctx context.Context, in authz.Input, pre Precondition) *Verdict {
	in.Environment = e.cfg.Environment
	var eng *authz.Engine
	var lim *limiter
	var budgets []budget.Budget
	if s := e.state.Load(); s != nil {
		eng, lim, budgets = s.engine, s.limiter, s.budgets
	}
	start := time.Now()
	// The enforcer alone says whether a rate limit is exceeded.
	in.RateLimit = nil
	var res *reservation
	if lim != nil && eng != nil {
		if res = lim.reserve(&in); res.exceeded {
			in.RateLimit = &authz.RateLimit{Exceeded: true, Limit: res.label, RetryAfterMS: RetryAfterMS(res.retry)}
		}
	}
	// And alone says how much of each budget is left.
	in.Budget = nil
	var spend *budget.Reservation
	var budgetErr error
	if eng != nil && e.cfg.Budgets != nil {
		spend, in.Budget, budgetErr = e.reserveBudgets(ctx, budgets, &in)
	}
	var d authz.Decision
	if eng == nil {
		d = deny(RuleNoPolicy, "no policy is loaded yet; the call is denied")
		d.Outcome = authz.OutcomeError
	} else {
		d = eng.Decide(ctx, in)
	}
	if pre != nil && d.Outcome == authz.OutcomeAllow {
		if err := pre(ctx); err != nil {
			d = refused(d, err)
		}
	}
	if budgetErr != nil && d.Error == "" {
		d.Error = "budgets: " + budgetErr.Error()
	}
	v := &Verdict{Decision: d, ID: newID(), Latency: time.Since(start), enforcer: e}
	if in.Tool != nil {
		v.Tool = in.Tool.Ref
	}
	v.event = e.event(ctx, in, v)
	// Mask the input as the policy says. Without a policy, or when the mask cannot be evaluated,
	// what to hide is unknown: the whole input is left out.
	eraseAll := []authz.MaskOp{{Op: "remove", Path: "/input"}}
	ops := eraseAll
	if eng != nil {
		var err error
		if ops, err = eng.Mask(ctx, in); err != nil {
			ops = eraseAll
		}
	}
	if len(ops) > 0 {
		decisionlog.ApplyMask(v.event, ops) // on a bad operation it erases the whole input itself
	}
	// A call that runs is charged with its decision, in the same transaction.
	if spend != nil && v.Allow && (v.Outcome == authz.OutcomeAllow || v.Outcome == authz.OutcomeStub) {
		v.event.Charges = spend.Charges()
	}
	extra := chargesOf(ctx) // a decision that is itself a change of usage (WithCharges)
	if len(extra) > 0 && v.Allow && v.Outcome == authz.OutcomeAllow {
		v.event.Charges = append(v.event.Charges, extra...)
	} else {
		extra = nil
	}
	if err := e.cfg.Log.Record(ctx, v.event); err != nil {
		if e.cfg.Metrics != nil {
			e.cfg.Metrics.LogWriteFailures.Inc()
		}
		v.Decision = deny(RuleLogUnavailable, "the decision log cannot be written, so the call is denied")
		v.Decision.Outcome = authz.OutcomeError
		v.Decision.Error = "record decision: " + err.Error()
		v.Decision.Revision = d.Revision
	} else {
		v.Recorded = true
	}
	if charges(v) {
		spend.Commit()
		v.budgets = spend
		if len(extra) > 0 && e.cfg.Budgets != nil {
			e.cfg.Budgets.Charged(extra)
		}
	} else {
		spend.Release()
	}
	if !v.Allow {
		res.cancel() // the call does not run: it does not count against any limit
		if in.RateLimit != nil && onlyRule(v.Decision, RuleRateLimited) {
			v.RetryAfter = res.retry
		}
	}
	if m := e.cfg.Metrics; m != nil {
		tool, access := "", v.Access
		if in.Tool != nil {
			tool = in.Tool.Ref
		}
		m.Decisions.WithLabelValues(e.cfg.Point, in.Action, in.Agent, tool, access, v.Outcome).Inc()
		m.DecisionLatency.WithLabelValues(e.cfg.Point).Observe(v.Latency.Seconds())
		if v.Outcome == authz.OutcomeStub {
			m.Stubs.WithLabelValues(in.Agent, tool).Inc()
		}
	}
	return v
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
	input, _ := json.Marshal(in)
	result, _ := json.Marshal(v.Decision)
	ev := &decisionlog.Event{
		DecisionID:  v.ID,
		Path:        "lush/authz/decision",
		Input:       input,
		Result:      result,
		Timestamp:   time.Now().UTC(),
		Labels:      map[string]string{"id": e.cfg.Instance, "version": e.cfg.Version, "environment": e.cfg.Environment},
		Bundles:     map[string]decisionlog.Bundle{"lush": {Revision: v.Revision}},
		Metrics:     map[string]int64{"timer_lush_decision_ns": v.Latency.Nanoseconds()},
		Revision:    v.Revision,
		Point:       e.cfg.Point,
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
	if m := v.enforcer.cfg.Metrics; m != nil && status != decisionlog.StatusStubbed {
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
	e := v.enforcer
	err := e.cfg.Log.CompleteAsync(c, func(err error) {
		if err != nil {
			e.completionFailed(v.ID, err)
			return
		}
		if len(c.Charges) > 0 && e.cfg.Budgets != nil {
			e.cfg.Budgets.Charged(c.Charges)
		}
	})
	if err != nil {
		e.completionFailed(v.ID, err)
	}
	return err
}

func (e *Enforcer) completionFailed(id string, err error) {
	if e.cfg.Metrics != nil {
		e.cfg.Metrics.LogWriteFailures.Inc()
	}
	if e.cfg.Logger != nil {
		e.cfg.Logger.Error("decision log: completion not recorded", "decision_id", id, "error", err)
	}
}

// Meta is the decision as clients see it, in a result's _meta["dev.lush/decision"]. A call
// denied by a rate limit alone has retry_after_ms: when a retry can succeed.
func (v *Verdict) Meta() map[string]any {
	m := map[string]any{"id": v.ID, "tool": v.Tool, "outcome": v.Outcome, "access": v.Access, "risk": v.Risk, "reasons": v.Reasons,
		"approvals": v.Approvals, "rules": v.Rules, "revision": v.Revision}
	if v.RetryAfter > 0 {
		m["retry_after_ms"] = RetryAfterMS(v.RetryAfter)
	}
	return m
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

// Explain is the message of a denied call or invocation (what): the reasons and the decision id.
func Explain(what string, reasons []authz.Reason, decisionID string) string {
	msgs := make([]string, 0, len(reasons))
	for _, r := range reasons {
		msgs = append(msgs, r.Message)
	}
	if len(msgs) == 0 {
		msgs = append(msgs, "the policy does not allow it")
	}
	return fmt.Sprintf("Lush denied this %s: %s (decision %s)", what, strings.Join(msgs, "; "), decisionID)
}
