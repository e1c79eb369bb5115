package enforce

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// The decision-log event of a build switch: action build/switch at enforcement point "build",
// principal system:lush, outcome allow, revision the new build; input {from, to, source}.
const (
	ActionBuildSwitch = "build/switch"
	PointBuild        = "build"
	PrincipalSystem   = "system:lush"
)

// RecordSwitch logs that this replica switched from build from to build to (from is "" for the
// first build it serves), and where to came from (a store, a bundle server's URL): the decision
// log then shows, per replica (labels.id), which build decided each call and when it changed.
func (p *Policy) RecordSwitch(ctx context.Context, from, to, source string) error {
	in, err := json.Marshal(map[string]string{"from": from, "to": to, "source": source})
	if err != nil {
		return fmt.Errorf("log build switch: %w", err)
	}
	res, err := json.Marshal(map[string]any{"allow": true, "reasons": []string{"build switched from " + orNone(from) + " to " + to}})
	if err != nil {
		return fmt.Errorf("log build switch: %w", err)
	}
	ev := &decisionlog.Event{DecisionID: newID(), Input: in, Result: res, Labels: p.labels, Bundles: p.eventBundles(to),
		Revision: to, Point: PointBuild, Principal: PrincipalSystem, Groups: []string{}, Action: ActionBuildSwitch,
		Outcome: authz.OutcomeAllow, Rules: []string{}, Environment: p.cfg.Environment}
	if err := p.cfg.Log.Record(ctx, ev); err != nil {
		p.writeFailed(ctx, "decision log: build switch not recorded", "to", to, "error", err)
		return fmt.Errorf("log build switch to %s: %w", to, err)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
