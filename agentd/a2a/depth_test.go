package a2a

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/lush-agents/lush/internal/identity"
)

// TestCallerOf: the depth an A2A message's dev.lush/delegation metadata gives becomes the
// caller's hops, only ever raising them; the metadata's principal is ignored; metadata that is
// not what Lush sends is refused, naming the field.
func TestCallerOf(t *testing.T) {
	tests := []struct {
		name     string
		hops     int // the authenticated caller's (a delegation token's)
		metadata map[string]any
		want     int    // the caller's hops
		err      string // in the error; "" for none
	}{
		{"no metadata", 0, nil, 0, ""},
		{"no metadata, hops from the token", 2, nil, 2, ""},
		{"depth", 0, map[string]any{"depth": 3.0}, 3, ""},
		{"chain only", 0, map[string]any{"chain": []any{"a", "b"}}, 2, ""},
		{"depth below the chain", 0, map[string]any{"chain": []any{"a", "b"}, "depth": 1.0}, 2, ""},
		{"depth below the token's", 4, map[string]any{"depth": 1.0}, 4, ""},
		{"depth above the token's", 1, map[string]any{"depth": 4.0}, 4, ""},
		{"the bound", 0, map[string]any{"depth": 64.0}, 64, ""},
		{"past the bound", 0, map[string]any{"depth": 1e30}, 0, "more than 64 agent calls deep"},
		{"not an object", 0, map[string]any{"": nil}, 0, "dev.lush/delegation: not an object"},
		{"negative", 0, map[string]any{"depth": -1.0}, 0, "dev.lush/delegation.depth: not a whole number"},
		{"fraction", 0, map[string]any{"depth": 0.5}, 0, "dev.lush/delegation.depth: not a whole number"},
		{"string", 0, map[string]any{"depth": "9"}, 0, "dev.lush/delegation.depth: not a whole number"},
		{"chain not an array", 0, map[string]any{"chain": "a"}, 0, "dev.lush/delegation.chain: not an array"},
	}
	for _, tt := range tests {
		ctx := identity.WithCaller(context.Background(), identity.Caller{ID: "user:alice", Hops: tt.hops})
		m := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "hi"})
		if tt.metadata != nil {
			var v any = tt.metadata
			if _, ok := tt.metadata[""]; ok {
				v = "deep"
			}
			m.Metadata = map[string]any{DelegationMetadata: v}
		}
		c, err := callerOf(ctx, m)
		if tt.err != "" {
			if !errors.Is(err, a2a.ErrInvalidParams) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err = %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || c.Hops != tt.want || c.ID != "user:alice" {
			t.Errorf("%s: caller %+v, err %v; want hops %d", tt.name, c, err, tt.want)
		}
	}
}
