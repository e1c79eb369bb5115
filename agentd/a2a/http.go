package a2a

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// Builds is where the deployed build comes from: agentd's Server.
type Builds interface {
	Deployed() (m *manifest.Manifest, hash string, ok bool)
}

// CardHandler answers GET {prefix}/agents/{agent}/a2a/.well-known/agent-card.json with the
// agent's full card as of the deployed build (the route must bind {agent}). It does not
// authenticate: the composition root mounts it behind the process's gate.
func CardHandler(b Builds, o CardOptions) http.Handler { return serveCard(b, o, true) }

// PublicCardHandler answers as CardHandler does, with the public card (PublicCard): for
// callers that have not authenticated.
func PublicCardHandler(b Builds, o CardOptions) http.Handler { return serveCard(b, o, false) }

func serveCard(b Builds, o CardOptions, full bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		card, status, err := cardOf(b, o, r.PathValue("agent"))
		if err != nil {
			code := map[int]string{http.StatusServiceUnavailable: "no_build", http.StatusNotFound: "not_found"}[status]
			if code == "" {
				code = "internal"
			}
			policyhttp.WriteError(w, status, code, err.Error())
			return
		}
		if !full {
			card = PublicCard(card)
		}
		policyhttp.WriteJSON(w, http.StatusOK, card)
	})
}

// cardOf is the full card of agent name in the deployed build, or the HTTP status and error
// that say why there is none.
func cardOf(b Builds, o CardOptions, name string) (*a2a.AgentCard, int, error) {
	m, hash, ok := b.Deployed()
	if !ok {
		return nil, http.StatusServiceUnavailable, fmt.Errorf("no build is deployed yet")
	}
	a, ok := m.Agent(name)
	if !ok {
		return nil, http.StatusNotFound, fmt.Errorf("no agent %s in the deployed build", url.PathEscape(name))
	}
	o.Revision = hash
	card, err := Card(m, a, o)
	if err != nil {
		return nil, http.StatusInternalServerError, fmt.Errorf("agent card: %w", err)
	}
	return card, http.StatusOK, nil
}

// cardHandler serves an agent's card: the full card to an authenticated caller (through the
// gate, which refuses credentials that do not authenticate), the public card to a request that
// carries none. A request without credentials that the gate authenticates anyway (dev mode, a
// trusted proxy, mutual TLS) is an authenticated caller.
func (s *Server) cardHandler() http.Handler {
	full := s.gate.Authenticated(CardHandler(s.agents, s.card))
	public := PublicCardHandler(s.agents, s.card)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasCredentials(r) && s.gate.Auth != nil {
			if _, err := s.gate.Auth.Authenticate(r); err != nil {
				public.ServeHTTP(w, r)
				return
			}
		}
		full.ServeHTTP(w, r)
	})
}

// hasCredentials reports whether r presents credentials of its own: a bearer token or an API key.
func hasCredentials(r *http.Request) bool {
	return r.Header.Get("Authorization") != "" || r.Header.Get("X-API-Key") != ""
}

// OnGetExtendedAgentCard answers agent/getAuthenticatedExtendedCard: the agent's full card.
// The JSON-RPC endpoint is behind the gate, so the caller is authenticated.
func (h *handler) OnGetExtendedAgentCard(ctx context.Context) (*a2a.AgentCard, error) {
	card, status, err := cardOf(h.agents, h.card, agentOf(ctx))
	switch {
	case err == nil:
		return card, nil
	case status == http.StatusInternalServerError:
		return nil, fmt.Errorf("%w: %s", a2a.ErrInternalError, err)
	default:
		return nil, fmt.Errorf("%w: %s", a2a.ErrInvalidRequest, err)
	}
}
