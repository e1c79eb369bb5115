package compiler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/lush-agents/lush/internal/toolref"
)

// maxAgentCard bounds the size of an Agent Card the build reads.
const maxAgentCard = 1 << 20

// errBadCard marks a card that was fetched but cannot be read as one.
var errBadCard = errors.New("bad agent card")

// cardClient fetches Agent Cards. It follows no redirects: the card is the one at the reference.
var cardClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// reachA2A fetches a remote A2A agent's Agent Card and checks it; a card that is missing or that
// Lush could not use is an error at the reference.
func (b *build) reachA2A(ti *toolInfo) {
	ctx, cancel := context.WithTimeout(b.ctx, b.opts.reachTimeout)
	defer cancel()
	card, err := fetchAgentCard(ctx, ti.ref)
	if errors.Is(err, errBadCard) {
		b.opts.progress(fmt.Sprintf("  ✗ %s", ti.ref))
		b.l.ErrorHint(ti.first, "bad-agent-card", "fix the agent's card at "+ti.ref.AgentCardURL()+" (A2A specification, AgentCard)",
			"A2A agent %s has an Agent Card Lush cannot use: %s", ti.ref, strings.TrimPrefix(err.Error(), errBadCard.Error()+": "))
		return
	}
	if err != nil {
		b.opts.progress(fmt.Sprintf("  ✗ %s", ti.ref))
		b.l.ErrorHint(ti.first, "agent-unreachable", "check that the agent is running and serves "+toolref.AgentCardPath+", or build with --offline to skip this check",
			"A2A agent %s is not reachable: %s", ti.ref, reachError(ctx, err, b.opts.reachTimeout.String()))
		return
	}
	if problems := checkAgentCard(ti.ref, card); len(problems) > 0 {
		b.opts.progress(fmt.Sprintf("  ✗ %s", ti.ref))
		b.l.ErrorHint(ti.first, "bad-agent-card", "fix the agent's card at "+ti.ref.AgentCardURL()+" (A2A specification, AgentCard)",
			"A2A agent %s has an Agent Card Lush cannot use: %s", ti.ref, strings.Join(problems, "; "))
		return
	}
	b.opts.progress(fmt.Sprintf("  ✓ %s: %s, %d skills", ti.ref, card.Name, len(card.Skills)))
}

// fetchAgentCard reads the Agent Card of ref, bounded in size.
func fetchAgentCard(ctx context.Context, ref toolref.Ref) (*a2a.AgentCard, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ref.AgentCardURL(), nil)
	if err != nil {
		return nil, fmt.Errorf("agent card request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := cardClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch agent card: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, fmt.Errorf("GET %s: %s (the build follows no redirects for an Agent Card; name the agent where it is)", ref.AgentCardURL(), resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", ref.AgentCardURL(), resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAgentCard+1))
	if err != nil {
		return nil, fmt.Errorf("read agent card: %w", err)
	}
	if len(body) > maxAgentCard {
		return nil, fmt.Errorf("%w: it is larger than %d bytes", errBadCard, maxAgentCard)
	}
	var card a2a.AgentCard
	if err := json.Unmarshal(body, &card); err != nil {
		return nil, fmt.Errorf("%w: it is not an AgentCard in JSON: %w", errBadCard, err)
	}
	return &card, nil
}

// checkAgentCard lists what makes a card unusable: missing required fields, and no JSON-RPC
// endpoint Lush may reach (https, or plain http on loopback for a2a+http:// references).
func checkAgentCard(ref toolref.Ref, card *a2a.AgentCard) []string {
	var problems []string
	for _, f := range []struct{ name, value string }{{"name", card.Name}, {"url", card.URL}, {"version", card.Version}, {"protocolVersion", card.ProtocolVersion}} {
		if strings.TrimSpace(f.value) == "" {
			problems = append(problems, "field "+f.name+" is missing")
		}
	}
	if card.Skills == nil {
		problems = append(problems, "field skills is missing")
	}
	if card.URL == "" {
		return problems
	}
	// The JSON-RPC endpoint: the main url unless preferredTransport names another transport,
	// else one of the additional interfaces.
	var endpoints []string
	if card.PreferredTransport == "" || card.PreferredTransport == a2a.TransportProtocolJSONRPC {
		endpoints = append(endpoints, card.URL)
	}
	for _, in := range card.AdditionalInterfaces {
		if in.Transport == a2a.TransportProtocolJSONRPC {
			endpoints = append(endpoints, in.URL)
		}
	}
	if len(endpoints) == 0 {
		return append(problems, fmt.Sprintf("it offers no JSONRPC transport (preferredTransport %s)", card.PreferredTransport))
	}
	if !slices.ContainsFunc(endpoints, func(e string) bool { return endpointAllowed(ref, e) }) {
		want := "an https URL"
		if ref.Insecure {
			want = "an http or https URL on this machine"
		}
		problems = append(problems, fmt.Sprintf("its JSONRPC endpoint %s is not %s", endpoints[0], want))
	}
	return problems
}

// endpointAllowed reports whether Lush may send messages to endpoint for ref.
func endpointAllowed(ref toolref.Ref, endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || u.User != nil {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		if !ref.Insecure {
			return false
		}
		r, err := toolref.Parse("a2a+http://" + u.Host + "/")
		return err == nil && r.Insecure
	}
	return false
}
