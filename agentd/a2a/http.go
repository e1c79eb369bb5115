package a2a

import (
	"net/http"
	"net/url"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// Builds is where the deployed build comes from: agentd's Server.
type Builds interface {
	Deployed() (m *manifest.Manifest, hash string, ok bool)
}

// CardHandler answers GET {prefix}/agents/{agent}/a2a/.well-known/agent-card.json with the
// agent's card as of the deployed build (the route must bind {agent}). It does not
// authenticate: the composition root mounts it behind the process's gate.
func CardHandler(b Builds, o CardOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, hash, ok := b.Deployed()
		if !ok {
			policyhttp.WriteError(w, http.StatusServiceUnavailable, "no_build", "no build is deployed yet")
			return
		}
		name := r.PathValue("agent")
		a, ok := m.Agent(name)
		if !ok {
			policyhttp.WriteError(w, http.StatusNotFound, "not_found", "no agent "+url.PathEscape(name)+" in the deployed build")
			return
		}
		opts := o
		opts.Revision = hash
		card, err := Card(m, a, opts)
		if err != nil {
			policyhttp.WriteError(w, http.StatusInternalServerError, "internal", "agent card: "+err.Error())
			return
		}
		policyhttp.WriteJSON(w, http.StatusOK, card)
	})
}
