package model

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/lush-agents/lush/internal/modelref"
)

// Factory makes the Model that serves one target (a provider's endpoint, with a key and
// settings) for a project's agents; t.Model is empty, as one client serves every model of the
// endpoint (each request names its own). The composition root registers one per provider; it gives the
// provider a key function that asks the credential broker for t.Credential on each request.
type Factory func(ctx context.Context, project string, t Target) (Model, error)

// MaxRoutes bounds the providers' clients a Router keeps: one per distinct project, provider,
// endpoint, key address and settings the builds name. Past it, a client is dropped and made again when
// needed.
const MaxRoutes = 64

// Router is a Model that runs each request on the provider its Target names, through the Model
// that provider's Factory made for the target (made on first use and kept). It is safe for
// concurrent use.
type Router struct {
	factories map[string]Factory

	mu     sync.Mutex
	routes map[routeKey]Model
}

type routeKey struct {
	project string
	target  Target
}

var _ Model = (*Router)(nil)

// NewRouter returns a router over the providers factories names (by modelref provider name).
func NewRouter(factories map[string]Factory) *Router {
	return &Router{factories: maps.Clone(factories), routes: map[routeKey]Model{}}
}

// Providers are the providers the router serves, sorted.
func (r *Router) Providers() []string { return slices.Sorted(maps.Keys(r.factories)) }

// Generate implements Model: it sends req, with Model set to the target's model id, to the
// target's provider. A request without a target (Target.Provider "") names a Gemini model, as
// before the build resolved targets.
func (r *Router) Generate(ctx context.Context, req Request, onText func(string)) (*Response, error) {
	m, req, err := r.target(ctx, req)
	if err != nil {
		return nil, err
	}
	return m.Generate(ctx, req, onText)
}

var _ ToolNamer = (*Router)(nil)

// ToolNames implements ToolNamer: the rule of the provider req's target runs on. A target the
// router cannot run gets defaultNames (its requests fail anyway, with the reason).
func (r *Router) ToolNames(ctx context.Context, req Request) NameRule {
	m, req, err := r.target(ctx, req)
	if err != nil {
		return defaultNames
	}
	return ToolNamesOf(ctx, m, req)
}

// target returns the Model that serves req's target, and req as that Model takes it (Model set
// to the target's model id).
func (r *Router) target(ctx context.Context, req Request) (Model, Request, error) {
	t := req.Target
	if t.Provider == "" {
		t = Target{Provider: modelref.Gemini, Model: req.Model, Credential: modelref.Credential(modelref.Gemini)}
	}
	m, err := r.route(ctx, req.Project, t)
	if err != nil {
		return nil, req, err
	}
	req.Model, req.Target = t.Model, t
	return m, req, nil
}

func (r *Router) route(ctx context.Context, project string, t Target) (Model, error) {
	f, ok := r.factories[t.Provider]
	if !ok {
		return nil, &Error{Provider: t.Provider, Message: fmt.Sprintf("this process does not run models on %s (it runs %s): choose another provider with --provider or LUSH_MODEL_PROVIDER",
			t.Provider, strings.Join(r.Providers(), ", "))}
	}
	id := t.Model
	t.Model = ""
	k := routeKey{project, t}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.routes[k]; ok {
		return m, nil
	}
	m, err := f(ctx, project, t)
	if err != nil {
		return nil, fmt.Errorf("set up %s model %s: %w", t.Provider, id, err)
	}
	if len(r.routes) >= MaxRoutes {
		for old := range r.routes {
			delete(r.routes, old)
			break
		}
	}
	r.routes[k] = m
	return m, nil
}
