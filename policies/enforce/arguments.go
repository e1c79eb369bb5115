package enforce

import (
	"context"
	"fmt"

	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/policies/authz"
)

// Rule ids of calls refused for their arguments before the policy is asked (CheckArguments).
const (
	// RuleArgumentsLimit: the arguments exceed a limit (nesting depth, values, encoded size).
	RuleArgumentsLimit = "lush.arguments.limit"
	// RuleArgumentsInvalid: a string of the arguments is not text (invalid UTF-8, an unpaired
	// surrogate escape), or the arguments are not JSON.
	RuleArgumentsInvalid = "lush.arguments.invalid"
)

// OmittedArguments is the member of the placeholder that stands for refused arguments in a
// logged policy input: {"dev.lush/omitted": {"bytes": <size sent>, "problem": "<why>"}}.
const OmittedArguments = "dev.lush/omitted"

// CheckArguments checks a call's arguments, as the raw JSON the caller sent, against lim before
// anything decodes them (jsonlimit.Limits.Check), and returns nil, nil when they pass.
//
// Arguments that fail are refused without asking the policy, and the refusal is recorded like
// any denial, with the verdict and the problem returned: its rule is RuleArgumentsLimit or
// RuleArgumentsInvalid and its reason the problem, and the logged input carries a placeholder
// (OmittedArguments) instead of the arguments, so that the event stays small whatever was sent.
// No rate-limit token or budget unit is taken. in is the call's input without its arguments.
func (e *Enforcer) CheckArguments(ctx context.Context, in authz.Input, raw []byte, lim jsonlimit.Limits) (*Verdict, *jsonlimit.Error) {
	problem := lim.Check(raw)
	if problem == nil {
		return nil, nil
	}
	reason := authz.Reason{Rule: RuleArgumentsLimit, Message: "the call's arguments " + problem.Error()}
	if problem.Limit == "" {
		reason.Rule = RuleArgumentsInvalid
	}
	in.Arguments = map[string]any{OmittedArguments: map[string]any{"bytes": len(raw), "problem": reason.Message}}
	return e.Decide(ctx, in, refusing(reason)), problem
}

// ExplainArguments is what the caller of a tools/call whose arguments CheckArguments refused is
// told: the problem, which names the limit and its setting or the string at fault, and the
// decision id.
func ExplainArguments(problem *jsonlimit.Error, decisionID string) string {
	return fmt.Sprintf("tools/call arguments %s (decision %s)", problem, decisionID)
}
