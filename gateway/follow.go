package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/lush-agents/lush/buildstore"
	"github.com/lush-agents/lush/manifest"
)

// DefaultFollowInterval is how often Follow checks for a new deploy.
const DefaultFollowInterval = 500 * time.Millisecond

// Follow serves the build a store names as deployed (lushctl deploy): it deploys it now, then
// again whenever the deploy changes, until ctx ends. The first deploy's error is returned; later
// failures are logged and counted, and the last good build keeps serving.
func (g *Gateway) Follow(ctx context.Context, store *buildstore.Store, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultFollowInterval
	}
	hash, err := store.Current()
	if err != nil {
		return err
	}
	if hash == "" {
		return fmt.Errorf("nothing is deployed in %s: run lushctl deploy <hash>", store.Path())
	}
	if err := g.deployFrom(ctx, store, hash); err != nil {
		return err
	}
	tried := hash
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		next, err := store.Current()
		if err != nil || next == "" || next == tried {
			continue
		}
		tried = next
		if err := g.deployFrom(ctx, store, next); err != nil {
			g.log.Error("refused a new build; the current one keeps serving", "build", manifest.Short(next), "serving", manifest.Short(g.Revision()), "error", err)
		}
	}
}

func (g *Gateway) deployFrom(ctx context.Context, store *buildstore.Store, hash string) error {
	m, bundle, err := store.Load(hash)
	if err != nil {
		if g.metrics != nil {
			g.metrics.Reloads.WithLabelValues("rejected").Inc()
		}
		return err
	}
	return g.Deploy(ctx, m, hash, bundle)
}
