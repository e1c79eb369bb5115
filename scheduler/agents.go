package scheduler

import (
	"context"
	"errors"

	"github.com/lush-agents/lush/agentd"
	"github.com/lush-agents/lush/internal/identity"
)

// Agents runs firings through agentd: the loop's agent is invoked as the loop's run_as service
// account with the firing's instruction, decided (agent/invoke), logged and traced like any other
// invocation, and its tools go through the gateway.
func Agents(srv *agentd.Server) Invoker {
	return InvokerFunc(func(ctx context.Context, r Run) Outcome {
		caller := identity.Caller{ID: r.Loop.RunAs, Groups: []string{}, Method: identity.MethodSchedule, Subject: "loop:" + r.Loop.Name}
		res, err := srv.Invoke(ctx, agentd.Invocation{Agent: r.Loop.Agent, Caller: caller, Message: r.Instruction})
		var denied *agentd.DeniedError
		switch {
		case errors.As(err, &denied):
			return Outcome{Status: StatusDenied, DecisionID: denied.DecisionID, Error: denied.Error()}
		case err != nil:
			return Outcome{Status: StatusFailed, Error: err.Error()}
		case res.Status == "ok":
			return Outcome{Status: StatusSucceeded, DecisionID: res.ID, Response: res.Response, Revision: res.Revision}
		default:
			msg := res.Error
			if msg == "" {
				msg = "the invocation ended with status " + res.Status
			}
			return Outcome{Status: StatusFailed, DecisionID: res.ID, Response: res.Response, Error: msg, Revision: res.Revision}
		}
	})
}
