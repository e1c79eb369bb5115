package gateway

import (
	"context"
	"encoding/json"

	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
)

// checkArguments refuses a tools/call of e whose raw arguments exceed the gateway's argument
// limits (limits.arguments) or hold a string that is not text, before anything decodes them: the
// refusal is recorded as a denial (enforce.Enforcer.CheckArguments), and the client gets an
// invalid-params error that names the limit and its setting, with the decision in its data. It
// returns nil for arguments within the limits.
func (c *call) checkArguments(ctx context.Context, e *exposed, raw json.RawMessage) error {
	in := c.input(authz.ActionToolsCall, &authz.Tool{Ref: e.Ref, Name: e.Upstream})
	v, problem := c.g.enforcer.CheckArguments(ctx, in, raw, c.g.argLimits)
	if problem == nil {
		return nil
	}
	return &mcphttp.Error{Code: mcphttp.CodeInvalidParams, Message: enforce.ExplainArguments(problem, v.ID),
		Data: map[string]any{"dev.lush/decision": v.Meta()}}
}
