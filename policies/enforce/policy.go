package enforce

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/budget"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// Config is what a process's Policy is made of: what every decision of the process is logged
// with, and where.
type Config struct {
	Environment string // passed to the policy as input.environment
	Instance    string // labels.id of log events: which replica decided (default: host name)
	Version     string // labels.version
	Log         *decisionlog.Log
	Metrics     *telemetry.Metrics // optional
	// Logger is told why decisions and completions could not be logged (optional), at most one
	// line of each per UnrecordedLogInterval.
	Logger *slog.Logger

	// Clock is the time rate limits and the Logger's limit are measured by (default time.Now);
	// tests set it.
	Clock func() time.Time
	// MaxRateBuckets bounds the token buckets each enforcer keeps for per-principal rate limits
	// (default DefaultMaxRateBuckets); idle buckets are dropped first.
	MaxRateBuckets int
	// Budgets is the budget ledger (lush.yaml budgets) of every enforcer of the policy, so that
	// their calls cannot overspend together. Nil: a ledger of the policy's own over Log.
	Budgets *budget.Ledger
}

// Policy is the policy a process decides with: the engine of its deployed build, the budget
// ledger and what decisions are logged with, shared by every enforcement point of the process
// (Enforcer). Deploying a build to the whole process is one call, Set. It is safe for concurrent
// use.
type Policy struct {
	cfg     Config
	current atomic.Pointer[build]
	logged  *telemetry.LogLimiter // lines about writes to the log that failed
	// labels is every event's Labels and bundles the Bundles of the last revision that decided:
	// shared by the events, which the log only reads.
	labels  map[string]string
	bundles atomic.Pointer[bundlesOf]
}

// bundlesOf is an event's Bundles for a revision.
type bundlesOf struct {
	revision string
	bundles  map[string]decisionlog.Bundle
}

// eventBundles returns the Bundles of an event decided by revision.
func (p *Policy) eventBundles(revision string) map[string]decisionlog.Bundle {
	if b := p.bundles.Load(); b != nil && b.revision == revision {
		return b.bundles
	}
	b := &bundlesOf{revision: revision, bundles: map[string]decisionlog.Bundle{"lush": {Revision: revision}}}
	p.bundles.Store(b)
	return b.bundles
}

// UnrecordedLogInterval is how often at most the Logger is told that decisions (and, apart,
// completions) could not be logged: when the log cannot be written every call fails, and one
// line per interval, with the count of those held back, says so.
const UnrecordedLogInterval = 10 * time.Second

// build is a deployed policy engine and what the enforcers read from it once.
type build struct {
	engine  *authz.Engine
	budgets []budget.Budget
}

// NewPolicy returns a policy without an engine: until Set, every call is denied.
func NewPolicy(cfg Config) *Policy {
	if cfg.Instance == "" {
		cfg.Instance, _ = os.Hostname()
	}
	if cfg.Budgets == nil && cfg.Log != nil {
		cfg.Budgets = budget.New(cfg.Log)
	}
	return &Policy{cfg: cfg, logged: telemetry.NewLogLimiter(UnrecordedLogInterval, 2, cfg.Clock),
		labels: map[string]string{"id": cfg.Instance, "version": cfg.Version, "environment": cfg.Environment}}
}

// Set makes eng the policy of every enforcer of p, for the calls that start from now on.
func (p *Policy) Set(eng *authz.Engine) {
	p.current.Store(&build{engine: eng, budgets: budget.FromEngine(eng)})
}

// Engine returns the current policy engine (nil before the first Set).
func (p *Policy) Engine() *authz.Engine {
	if b := p.current.Load(); b != nil {
		return b.engine
	}
	return nil
}

// Environment is the environment name passed to the policy.
func (p *Policy) Environment() string { return p.cfg.Environment }

// Log is the decision log every decision of p is recorded in.
func (p *Policy) Log() *decisionlog.Log { return p.cfg.Log }

// Enforcer returns an enforcer that decides with p at enforcement point point (such as
// "mcp-gateway"), its name in decision-log events and metrics.
func (p *Policy) Enforcer(point string) *Enforcer {
	return &Enforcer{policy: p, point: point}
}

// completionFailed counts and reports a completion that could not be logged.
func (p *Policy) completionFailed(id string, err error) {
	p.writeFailed(context.Background(), "decision log: completion not recorded", "decision_id", id, "error", err)
}

// writeFailed counts a write to the decision log that failed and tells the Logger, rate-limited
// per msg: args say which write and why (the store's own error).
func (p *Policy) writeFailed(ctx context.Context, msg string, args ...any) {
	if p.cfg.Metrics != nil {
		p.cfg.Metrics.LogWriteFailures.Inc()
	}
	if p.cfg.Logger == nil {
		return
	}
	if ok, held := p.logged.Allow(msg); ok {
		p.cfg.Logger.ErrorContext(ctx, msg, append(args, "suppressed", held)...)
	}
}

// Policy is the policy the enforcer decides with.
func (e *Enforcer) Policy() *Policy { return e.policy }

// PrincipalOf is the input.principal of a call by caller: its id and groups (an empty list,
// never null, when it has none), and how it authenticated.
func PrincipalOf(caller identity.Caller) authz.Principal {
	groups := caller.Groups
	if groups == nil {
		groups = []string{}
	}
	return authz.Principal{ID: caller.ID, Groups: groups, Authentication: string(caller.Method)}
}
