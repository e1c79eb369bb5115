package buildstore

import (
	"context"
	"fmt"
	"time"
)

// DefaultFollowInterval is how often Follow checks for a new deploy.
const DefaultFollowInterval = 500 * time.Millisecond

// Follow calls deploy with the build the store names as deployed (lushctl deploy), now and again
// whenever the deploy changes, until ctx ends. The first call's error is returned (as is an empty
// store); a later error goes to refused, and the caller keeps serving its last good build. Each
// hash is tried once.
func (s *Store) Follow(ctx context.Context, interval time.Duration, deploy func(ctx context.Context, hash string) error, refused func(hash string, err error)) error {
	if interval <= 0 {
		interval = DefaultFollowInterval
	}
	hash, err := s.Current()
	if err != nil {
		return err
	}
	if hash == "" {
		return fmt.Errorf("nothing is deployed in %s: run lushctl deploy <hash>", s.Path())
	}
	if err := deploy(ctx, hash); err != nil {
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
		next, err := s.Current()
		if err != nil || next == "" || next == tried {
			continue
		}
		tried = next
		if err := deploy(ctx, next); err != nil && refused != nil {
			refused(next, err)
		}
	}
}
