package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/telemetry"
	"github.com/lush-agents/lush/internal/upstream"
)

// AgentsConfig says how the gateway reaches agentd, which serves the agents that lush://<name>
// tools name.
type AgentsConfig struct {
	// URL is agentd's base URL: lush://<name> is <url>/agents/<name>/mcp. A process that runs
	// agentd and the gateway together sets it to its own address.
	URL string `yaml:"url"`
	// DelegationKey is the file with the Ed25519 private key the gateway signs delegation
	// tokens with when it calls an agent for a caller (lushctl writes one: docs/running.md).
	DelegationKey string `yaml:"delegation_key"`
	// Timeout bounds one call of an agent (default 5m); agentd's own limits usually end it first.
	Timeout time.Duration `yaml:"timeout"`
}

// DefaultAgentTimeout bounds a lush:// call when agents.timeout is not set.
const DefaultAgentTimeout = 5 * time.Minute

// agentTool is the catalog entry of lush://<name>.
func agentTool(t *manifest.Tool, m *manifest.Manifest) *exposed {
	name := strings.TrimPrefix(t.Ref, "lush://")
	a, ok := m.Agent(name)
	if !ok {
		return nil // the compiler refuses such builds; never offer it
	}
	return &exposed{Name: name, Ref: t.Ref, Raw: a.MCPTool(), Agent: name}
}

// errNoAgentd is the problem of a lush:// call on a gateway that does not know where agentd is.
var errNoAgentd = errors.New("this gateway cannot reach agents: set agents.url and agents.delegation_key in its config (docs/running.md)")

// callAgent invokes agent target for the caller: a delegation token carries the caller's
// principal and groups and the call chain extended by target, so agentd checks the target's ACL
// and the depth for the real caller, and the target's own tool calls come back through this
// gateway as that caller.
func (c *call) callAgent(ctx context.Context, target string, p map[string]json.RawMessage) (json.RawMessage, error) {
	g := c.g
	if g.cfg.Agents.URL == "" || g.opts.Signer == nil {
		return nil, errNoAgentd
	}
	chain := slices.Clone(c.input("", nil).Chain)
	chain = append(chain, target)
	groups := c.caller.Groups
	tok, err := g.opts.Signer.Sign(identity.Delegation{Principal: c.caller.ID, Groups: groups, Agent: target, Chain: chain, Hops: c.caller.Hops, TTL: identity.DefaultDelegationMaxTTL, Subject: c.caller.Token})
	if err != nil {
		return nil, fmt.Errorf("call agent %s: %w", target, err)
	}
	timeout := g.cfg.Agents.Timeout
	if timeout <= 0 {
		timeout = DefaultAgentTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := strings.TrimSuffix(g.cfg.Agents.URL, "/") + "/agents/" + target + "/mcp"
	cl, err := client.NewStreamableHttpClient(url,
		transport.WithHTTPBasicClient(&http.Client{Transport: agentTransport}),
		transport.WithHTTPHeaderFunc(func(ctx context.Context) map[string]string {
			h := map[string]string{"Authorization": "Bearer " + tok}
			telemetry.Propagator.Inject(ctx, propagation.MapCarrier(h))
			return h
		}))
	if err != nil {
		return nil, fmt.Errorf("call agent %s: %w", target, err)
	}
	defer cl.Close()
	if err := cl.Start(ctx); err != nil {
		return nil, fmt.Errorf("call agent %s: %w", target, err)
	}
	if downstream := progressToken(p); downstream != nil {
		cl.OnNotification(func(n mcp.JSONRPCNotification) {
			if n.Method != "notifications/progress" {
				return
			}
			fields := map[string]any{}
			for k, v := range n.Params.AdditionalFields {
				fields[k] = v
			}
			fields["progressToken"] = downstream
			c.req.Notify(n.Method, fields)
		})
	}
	if _, err := cl.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ProtocolVersion: upstream.ProtocolVersion, ClientInfo: mcp.Implementation{Name: "lush-gateway", Version: serverVersion}}}); err != nil {
		return nil, agentError(target, err)
	}
	params := map[string]any{"name": target, "arguments": json.RawMessage(p["arguments"])}
	if len(p["arguments"]) == 0 {
		params["arguments"] = map[string]any{}
	}
	if progressToken(p) != nil {
		params["_meta"] = map[string]any{"progressToken": "lush-agent-" + target}
	}
	resp, err := cl.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION,
		ID: mcp.NewRequestId("lush-agent-1"), Method: "tools/call", Params: params})
	if err != nil {
		return nil, agentError(target, err)
	}
	if resp.Error != nil {
		e := &upstream.RPCError{Code: resp.Error.Code, Message: resp.Error.Message}
		if resp.Error.Data != nil {
			e.Data, _ = json.Marshal(resp.Error.Data)
		}
		return nil, e
	}
	return resp.Result, nil
}

// agentError classifies a failed agent call the way upstream failures are classified: a
// JSON-RPC error stays one; a connection failure is "unavailable".
func agentError(target string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	return &upstream.ErrUnavailable{Ref: "lush://" + target, Reason: err.Error()}
}

// agentTransport pools connections to agentd.
var agentTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}()
