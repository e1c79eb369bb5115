package gateway

import (
	"context"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/vault"
)

// Credentials (docs/credentials.md): a call to an MCP server is decided first; when the policy
// allows it, the credential the caller needs for the server is looked up before the decision is
// recorded, so a missing one denies the call and the log says so. The call then goes to a
// connection of the caller's own that carries the credential (headers, or a stdio process's
// environment); the credential never enters the policy input, the log, a span or a message.

// warmupWait bounds how long tools/list waits for a caller's first private connection.
const warmupWait = 10 * time.Second

// privateServers are the servers lush.yaml declares credentials for: no shared connection, every
// call carries its caller's credential.
func privateServers(m *manifest.Manifest) map[string]bool {
	out := map[string]bool{}
	for _, c := range m.Credentials {
		out[c.Tool] = true
	}
	return out
}

// needCredential returns the precondition that looks up the credential a call to ref needs and
// keeps it in *cred (nil when it needs none).
// The decision records how the credential was obtained (never the credential).
func (c *call) needCredential(ref string, cred **vault.Credential) enforce.Option {
	return enforce.All(enforce.WithPrecondition(func(ctx context.Context) error {
		got, err := c.lookupCredential(ctx, ref)
		*cred = got
		return err
	}), enforce.WithCredentialUse(func() *decisionlog.CredentialUse {
		if *cred == nil {
			return nil
		}
		cr := *cred
		return &decisionlog.CredentialUse{Type: cr.Type, Obtained: cr.Provenance(), Source: cr.Source, Act: cr.Act}
	}))
}

func (c *call) lookupCredential(ctx context.Context, ref string) (*vault.Credential, error) {
	r := vault.Request{Project: c.s.manifest.Project, Tool: ref, Principal: c.caller.ID,
		Groups: c.caller.Groups, Declared: c.s.manifest.Credentials,
		Chain: c.chain(), SubjectToken: c.caller.Token.Reveal(), Method: string(c.caller.Method)}
	if t, ok := c.s.manifest.Tool(ref); ok && t.Remote != nil {
		r.URL = t.Remote.URL
	} else if ok && t.A2A != nil {
		r.URL = t.A2A.URL
	}
	return c.g.broker.Lookup(ctx, r)
}

// server returns the connection a call to ref goes through: the caller's private one when the call
// carries a credential (started on first use, and waited for), else the shared one.
func (c *call) server(ctx context.Context, ref string, cred *vault.Credential) (*upstream.Server, error) {
	if cred == nil {
		if srv, ok := c.g.pool.Get(ref); ok {
			return srv, nil
		}
		return nil, &upstream.ErrUnavailable{Ref: ref, Reason: "not started"}
	}
	srv, ok := c.g.pool.Private(ref, c.caller.ID, upstream.Credential{Fingerprint: cred.Fingerprint(c.g.fpKey),
		Headers: cred.Headers(), Env: cred.Environ()})
	if !ok {
		return nil, &upstream.ErrUnavailable{Ref: ref, Reason: "not in the deployed build"}
	}
	if !srv.State().Settled {
		_ = srv.WaitSettled(ctx) // a server that does not come up answers with its error below
	}
	return srv, nil
}

// warm starts the caller's private connections to the agent's credential-only servers that no
// one has connected to yet, so that tools/list can show their real tools. A caller without the
// credential changes nothing: the declared tools stay listed and a call says what is missing.
// It reports whether it started any.
func (c *call) warm(ctx context.Context) (started bool) {
	a, ok := c.s.manifest.Agent(c.agent)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, warmupWait)
	defer cancel()
	for _, at := range a.Tools {
		if !vault.Needs(c.s.manifest.Credentials, at.Ref) {
			continue
		}
		if _, up := c.g.pool.Lists(at.Ref); up {
			continue
		}
		if cred, err := c.lookupCredential(ctx, at.Ref); err == nil && cred != nil {
			_, _ = c.server(ctx, at.Ref, cred)
			started = true
		}
	}
	return started
}
