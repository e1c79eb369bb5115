package upstream

import (
	"context"
	"encoding/json"
)

// Asker answers a request an upstream server sends to the client during a call.
type Asker func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)

type askerKey struct{}

// WithAsker returns a context whose calls (Server.Request) have the requests their upstream sends
// about them (sampling/createMessage, elicitation/create, roots/list) answered by a.
func WithAsker(ctx context.Context, a Asker) context.Context {
	return context.WithValue(ctx, askerKey{}, a)
}
