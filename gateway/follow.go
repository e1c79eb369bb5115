package gateway

import (
	"context"
	"time"

	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/bundlesource"
)

// DefaultFollowInterval is how often Follow checks for a new deploy.
const DefaultFollowInterval = buildstore.DefaultFollowInterval

// Follow serves the build a store names as deployed (lushctl deploy): it deploys it now, then
// again whenever the deploy changes, until ctx ends. The first deploy's error is returned; later
// failures are logged and counted, and the last good build keeps serving.
func (g *Gateway) Follow(ctx context.Context, store *buildstore.Store, interval time.Duration) error {
	return store.Follow(ctx, interval, func(ctx context.Context, hash string) error {
		return g.deployFrom(ctx, store, hash)
	}, func(string, error) {}) // Deploy logged, counted and recorded the refusal
}

func (g *Gateway) deployFrom(ctx context.Context, store *buildstore.Store, hash string) error {
	m, bundle, err := store.Load(hash)
	if err != nil {
		return g.refuse(ctx, hash, &bundlesource.Refused{Reason: bundlesource.ReasonUnreadable, Err: err})
	}
	return g.Deploy(ctx, m, hash, bundle)
}
