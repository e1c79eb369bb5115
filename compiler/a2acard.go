package compiler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/lush-agents/lush/internal/a2acard"
	"github.com/lush-agents/lush/internal/toolref"
	"github.com/lush-agents/lush/vault"
)

// reachA2A fetches a remote A2A agent's Agent Card and checks it; a card that is missing or that
// Lush could not use is an error at the reference.
func (b *build) reachA2A(ti *toolInfo) {
	ctx, cancel := context.WithTimeout(b.ctx, b.opts.reachTimeout)
	defer cancel()
	badCard := func(problem string) {
		b.opts.progress(fmt.Sprintf("  ✗ %s", ti.ref))
		b.l.ErrorHint(ti.first, "bad-agent-card", "fix the agent's card at "+ti.ref.AgentCardURL()+" (A2A specification, AgentCard)",
			"A2A agent %s has an Agent Card Lush cannot use: %s", ti.ref, problem)
	}
	card, err := a2acard.Fetch(ctx, ti.ref, nil)
	switch {
	case errors.Is(err, a2acard.ErrBad):
		badCard(a2acard.Problem(err))
		return
	case a2acard.Unauthorized(err) && vault.Needs(b.declaredCredentials(), ti.ref.String()):
		b.opts.progress(fmt.Sprintf("  ✓ %s: asks for a credential, as mcp_credentials declares (its card is read when the gateway calls it)", ti.ref))
		return
	case a2acard.Unauthorized(err):
		var se *a2acard.StatusError
		errors.As(err, &se)
		b.opts.progress(fmt.Sprintf("  ⚠ %s: asks for a credential", ti.ref))
		b.l.WarnHint(ti.first, "credential-needed", "declare one under mcp_credentials in lush.yaml (docs/credentials.md); calls will fail until then",
			"A2A agent %s asks for a credential (%s) for its Agent Card, and mcp_credentials declares none for it", ti.ref, se.Status)
		return
	case err != nil:
		b.opts.progress(fmt.Sprintf("  ✗ %s", ti.ref))
		b.l.ErrorHint(ti.first, "agent-unreachable", "check that the agent is running and serves "+toolref.AgentCardPath+", or build with --offline to skip this check",
			"A2A agent %s is not reachable: %s", ti.ref, reachError(ctx, err, b.opts.reachTimeout.String()))
		return
	}
	if problems := a2acard.Check(ti.ref, card); len(problems) > 0 {
		badCard(strings.Join(problems, "; "))
		return
	}
	b.opts.progress(fmt.Sprintf("  ✓ %s: %s, %d skills", ti.ref, card.Name, len(card.Skills)))
}
