package budget

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lush-agents/lush/policies/decisionlog"
)

// Store is where usage is kept: *decisionlog.Log implements it.
type Store interface {
	BudgetUsage(ctx context.Context, f decisionlog.BudgetFilter) ([]decisionlog.BudgetUsage, error)
}

// DefaultMaxAge is how long the ledger trusts a usage entry before reading it from the store
// again (unless an Option says otherwise): how stale other replicas' charges and top-ups may be.
const DefaultMaxAge = 3 * time.Second

// sweepEvery is how often, at most, entries of ended periods are dropped.
const sweepEvery = time.Minute

// Ledger holds the usage of budgets, per budget, subject and period, for one process: every
// enforcer of the process shares it (through the process's enforce.Policy), so that concurrent
// calls cannot overspend. It is safe for concurrent use.
type Ledger struct {
	store  Store
	now    func() time.Time
	maxAge time.Duration

	mu        sync.Mutex
	usage     map[key]*usage
	gen       uint64 // orders charges, reservations and reads
	lastSweep time.Time
}

// key names one usage entry.
type key struct {
	budget, subject string
	period          int64 // the period's start, unix seconds
}

// usage is what the ledger knows of one entry: the store's values as of its last read, plus
// what this process has charged since. A charge committed before a read began is in the read's
// values and is dropped from local; one committed while the read ran may or may not be, so it
// is kept (counted twice, perhaps, never not at all) and the entry is read again by the next
// call. The ledger never counts less than the store, so a process cannot overspend.
type usage struct {
	baseUsed, baseGranted int64
	local                 []localCharge // charged by this process since the read began, oldest first
	readEnd               uint64        // l.gen when the last read was merged
	reserved              int64         // units of calls decided but not yet recorded
	loaded                time.Time     // when it was last read from the store (zero: read it again)
	end                   time.Time     // the period's end: after it the entry is dropped
}

type localCharge struct {
	gen           uint64 // l.gen when it was counted, after its commit
	used, granted int64
}

func (u *usage) totals() (used, granted int64) {
	used, granted = u.baseUsed, u.baseGranted
	for _, c := range u.local {
		used += c.used
		granted += c.granted
	}
	return used, granted
}

// charge counts units this process has committed to the store. since is l.gen before the
// commit began (0 when unknown): if a read ended after it, the read may already hold them, and
// the entry is read again. l.mu is held.
func (l *Ledger) charge(u *usage, since uint64, used, granted int64) {
	l.gen++
	u.local = append(u.local, localCharge{gen: l.gen, used: used, granted: granted})
	if u.readEnd > since {
		u.loaded = time.Time{}
	}
}

// An Option configures a Ledger.
type Option func(*Ledger)

// Clock sets the ledger's clock (default time.Now): which period a call falls in.
func Clock(now func() time.Time) Option { return func(l *Ledger) { l.now = now } }

// MaxAge sets how long usage read from the store is trusted (default DefaultMaxAge).
func MaxAge(d time.Duration) Option { return func(l *Ledger) { l.maxAge = d } }

// New returns a ledger over store.
func New(store Store, opts ...Option) *Ledger {
	l := &Ledger{store: store, now: time.Now, maxAge: DefaultMaxAge, usage: map[key]*usage{}}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Now is the ledger's clock.
func (l *Ledger) Now() time.Time { return l.now().UTC() }

// State is a budget as one call sees it: what input.budget.budgets lists.
type State struct {
	Budget    *Budget
	Subject   string
	Start     time.Time // the period
	End       time.Time
	Used      int64 // used in the period, including calls of this process in flight
	Granted   int64 // added by top-ups in the period
	Remaining int64 // Limit + Granted - Used (may be negative: token budgets overrun)
	Cost      int64 // what this call is charged before it runs
	Exhausted bool  // the call may not run: Remaining < max(Cost, 1)
}

// Reservation is the budgets that apply to one call and the units reserved for it. Exactly one
// of Commit and Release must follow (both do nothing on a nil reservation).
type Reservation struct {
	l         *Ledger
	States    []State
	Exhausted bool // some budget is exhausted: nothing was reserved
	held      []held
	start     uint64 // l.gen when the units were reserved
	done      bool
}

type held struct {
	k     key
	units int64
}

// Reserve finds the budgets of budgets that apply to c, reads their usage (from the store when
// the ledger's is missing or stale) and, unless one is exhausted, reserves the call's cost of
// each. It returns nil when no budget applies. An error (usage cannot be read) means the call
// must be denied: budgets fail closed.
func (l *Ledger) Reserve(ctx context.Context, budgets []Budget, c Call) (*Reservation, error) {
	if !Applies(c.Action) || len(budgets) == 0 {
		return nil, nil
	}
	now := l.Now()
	type target struct {
		b          *Budget
		subject    string
		k          key
		start, end time.Time
	}
	var targets []target
	for i := range budgets {
		b := &budgets[i]
		subject, ok := b.Subject(c)
		if !ok {
			continue
		}
		start, end := b.Period(now)
		targets = append(targets, target{b: b, subject: subject, k: key{b.Name, subject, start.Unix()}, start: start, end: end})
	}
	if len(targets) == 0 {
		return nil, nil
	}
	keys := make([]key, len(targets))
	ends := make([]time.Time, len(targets))
	for i, t := range targets {
		keys[i], ends[i] = t.k, t.end
	}
	if err := l.load(ctx, keys, ends, now); err != nil {
		return nil, err
	}
	r := &Reservation{l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	r.start = l.gen
	for _, t := range targets {
		u := l.entry(t.k, t.end)
		used, granted := u.totals()
		s := State{Budget: t.b, Subject: t.subject, Start: t.start, End: t.end, Used: used + u.reserved, Granted: granted, Cost: t.b.Cost(c)}
		s.Remaining = t.b.Limit + s.Granted - s.Used
		s.Exhausted = s.Remaining < max(s.Cost, 1)
		r.Exhausted = r.Exhausted || s.Exhausted
		r.States = append(r.States, s)
	}
	if !r.Exhausted {
		for _, s := range r.States {
			if s.Cost > 0 {
				k := key{s.Budget.Name, s.Subject, s.Start.Unix()}
				l.usage[k].reserved += s.Cost
				r.held = append(r.held, held{k: k, units: s.Cost})
			}
		}
	}
	return r, nil
}

// entry returns the usage entry of k, making it. l.mu is held.
func (l *Ledger) entry(k key, end time.Time) *usage {
	u := l.usage[k]
	if u == nil {
		u = &usage{end: end}
		l.usage[k] = u
	}
	return u
}

// load reads from the store the entries of keys that the ledger does not have or has had for
// longer than MaxAge.
func (l *Ledger) load(ctx context.Context, keys []key, ends []time.Time, now time.Time) error {
	var stale []int
	l.mu.Lock()
	l.sweep(now)
	for i, k := range keys {
		if u := l.usage[k]; u == nil || u.loaded.IsZero() || now.Sub(u.loaded) >= l.maxAge || now.Before(u.loaded) {
			stale = append(stale, i)
		}
	}
	l.gen++
	began := l.gen // charges counted before this were committed before the reads below began
	l.mu.Unlock()
	if len(stale) == 0 {
		return nil
	}
	if l.store == nil {
		return errors.New("read budget usage: no store")
	}
	type row struct{ used, granted int64 }
	rows := make([]row, len(stale))
	for j, i := range stale {
		k := keys[i]
		got, err := l.store.BudgetUsage(ctx, decisionlog.BudgetFilter{Budget: k.budget, Subject: k.subject, Period: time.Unix(k.period, 0).UTC()})
		if err != nil {
			return fmt.Errorf("read usage of budget %s: %w", k.budget, err)
		}
		for _, u := range got {
			rows[j].used += u.Used
			rows[j].granted += u.Granted
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	for j, i := range stale {
		u := l.entry(keys[i], ends[i])
		if began < u.readEnd {
			continue // a read that began later has been merged already
		}
		u.baseUsed, u.baseGranted, u.readEnd, u.loaded = rows[j].used, rows[j].granted, l.gen, now
		kept := u.local[:0]
		for _, c := range u.local {
			if c.gen > began {
				kept = append(kept, c)
			}
		}
		u.local = kept
		if len(kept) > 0 {
			u.loaded = time.Time{} // committed while the read ran: perhaps counted twice
		}
	}
	return nil
}

// sweep drops the entries of ended periods, at most every sweepEvery. l.mu is held.
func (l *Ledger) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < sweepEvery {
		return
	}
	l.lastSweep = now
	for k, u := range l.usage {
		if !now.Before(u.end) && u.reserved == 0 {
			delete(l.usage, k)
		}
	}
}

// Charges are the units reserved for the call, as the decision log charges them with the
// call's event.
func (r *Reservation) Charges() []decisionlog.Charge {
	if r == nil {
		return nil
	}
	out := make([]decisionlog.Charge, 0, len(r.held))
	for _, h := range r.held {
		out = append(out, decisionlog.Charge{Budget: h.k.budget, Subject: h.k.subject, Period: time.Unix(h.k.period, 0).UTC(), Used: h.units})
	}
	return out
}

// Commit turns the reservation into usage: the call's event, with its charges, is recorded.
func (r *Reservation) Commit() {
	r.finish(true)
}

// Release gives the reserved units back: the call does not run (or its decision was not
// recorded), so it is not charged.
func (r *Reservation) Release() {
	r.finish(false)
}

func (r *Reservation) finish(charged bool) {
	if r == nil || r.done {
		return
	}
	r.done = true
	if len(r.held) == 0 {
		return
	}
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	for _, h := range r.held {
		u := r.l.usage[h.k]
		if u == nil {
			continue
		}
		u.reserved -= h.units
		if charged {
			r.l.charge(u, r.start, h.units, 0)
		}
	}
}

// Tokens returns the charges of n tokens to the token budgets that applied to the call (in the
// periods the call started in): an invocation's tokens, charged when it ends.
func (r *Reservation) Tokens(n int64) []decisionlog.Charge {
	if r == nil || n <= 0 {
		return nil
	}
	var out []decisionlog.Charge
	for _, s := range r.States {
		if s.Budget.Unit == UnitTokens {
			out = append(out, decisionlog.Charge{Budget: s.Budget.Name, Subject: s.Subject, Period: s.Start, Used: n})
		}
	}
	return out
}

// Charged counts charges committed outside a reservation (an invocation's tokens, a top-up's
// grant) in the ledger's usage, so that this process sees them before its next read of the
// store. Call it once the charges are committed.
func (l *Ledger) Charged(charges []decisionlog.Charge) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range charges {
		u := l.usage[key{c.Budget, c.Subject, c.Period.Unix()}]
		if u == nil {
			continue // not cached: the next read from the store has it
		}
		l.charge(u, 0, c.Used, c.Granted)
	}
}
