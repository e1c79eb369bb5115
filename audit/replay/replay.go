// Package replay decides logged decisions again under another build: a what-if for a policy
// change before it is deployed. Each logged input is decided as the log kept it (masked fields
// stay masked; a decision whose whole input the policy masked is skipped), and the decisions
// whose outcome would change are listed with both answers, the logged and the candidate's, and
// counted by principal, agent and tool. `lushctl audit replay` and the audit API's
// GET /audit/replay are its two users.
package replay

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// Flip is a logged decision whose outcome the candidate build would change.
type Flip struct {
	DecisionID string   `json:"decision_id"`
	Time       string   `json:"time"`
	Principal  string   `json:"principal"`
	Agent      string   `json:"agent,omitempty"`
	Action     string   `json:"action"`
	Tool       string   `json:"tool,omitempty"` // the reference, and the tool's name in parentheses
	Was        string   `json:"was"`
	Now        string   `json:"now"`
	Rules      []string `json:"rules"`             // of the candidate's decision
	Reasons    []string `json:"reasons,omitempty"` // of the candidate's decision
	// Logged is the decision object as the log holds it; Candidate is the candidate build's
	// decision of the same input: the two sides of the flip.
	Logged    json.RawMessage `json:"logged,omitempty"`
	Candidate *authz.Decision `json:"candidate,omitempty"`
}

// Count is how many flips one principal, agent or tool has.
type Count struct {
	Name  string `json:"name"`
	Flips int    `json:"flips"`
}

// Summary is the result of a replay.
type Summary struct {
	Bundle   string `json:"bundle"` // the candidate build
	Replayed int    `json:"replayed"`
	Skipped  int    `json:"skipped"` // the input was not logged (masked by the policy)
	Changed  []Flip `json:"changed"`
	// The flips counted by principal, agent and tool, most first.
	ByPrincipal []Count `json:"by_principal"`
	ByAgent     []Count `json:"by_agent"`
	ByTool      []Count `json:"by_tool"`
}

// Run decides the input of each record again with eng (the candidate build's policy) and
// returns what would change. It stops early, with what it has, when ctx ends.
func Run(ctx context.Context, eng *authz.Engine, recs []decisionlog.Record) Summary {
	sum := Summary{Bundle: eng.Revision(), Changed: []Flip{}}
	for _, rec := range recs {
		if ctx.Err() != nil {
			break
		}
		ev := rec.Event
		in, ok := Input(ev)
		if !ok {
			sum.Skipped++
			continue
		}
		sum.Replayed++
		d := eng.Decide(ctx, in)
		if d.Outcome == ev.Outcome {
			continue
		}
		f := Flip{DecisionID: ev.DecisionID, Time: ev.Timestamp.UTC().Format("2006-01-02T15:04:05Z"), Principal: ev.Principal,
			Agent: ev.Agent, Action: ev.Action, Tool: ev.Tool, Was: ev.Outcome, Now: d.Outcome, Rules: d.Rules,
			Logged: ev.Result, Candidate: &d}
		if ev.ToolName != "" {
			f.Tool += " (" + ev.ToolName + ")"
		}
		for _, r := range d.Reasons {
			f.Reasons = append(f.Reasons, r.Message)
		}
		sum.Changed = append(sum.Changed, f)
	}
	sum.ByPrincipal = count(sum.Changed, func(f Flip) string { return f.Principal })
	sum.ByAgent = count(sum.Changed, func(f Flip) string { return f.Agent })
	sum.ByTool = count(sum.Changed, func(f Flip) string { return f.Tool })
	return sum
}

// Input is the logged input of ev, decoded; false when the log did not keep it (the policy
// masked all of it) or it is not an input document.
func Input(ev decisionlog.Event) (authz.Input, bool) {
	var in authz.Input
	if len(ev.Input) == 0 || string(ev.Input) == "null" || json.Unmarshal(ev.Input, &in) != nil || in.Action == "" {
		return in, false
	}
	return in, true
}

// count groups flips by key ("" is not counted), most flips first, then by name.
func count(flips []Flip, key func(Flip) string) []Count {
	n := map[string]int{}
	for _, f := range flips {
		if k := key(f); k != "" {
			n[k]++
		}
	}
	out := make([]Count, 0, len(n))
	for k, v := range n {
		out = append(out, Count{Name: k, Flips: v})
	}
	slices.SortFunc(out, func(a, b Count) int { return cmp.Or(cmp.Compare(b.Flips, a.Flips), strings.Compare(a.Name, b.Name)) })
	return out
}
