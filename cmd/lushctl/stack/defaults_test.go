package stack_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/cmd/lushctl/stack"
	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/identity"
)

// A gateway without a listen address listens on the documented default, on loopback only (it
// once listened on a random port of every interface). When another process holds the port, the
// error names the address.
func TestGatewayListensOnLoopbackByDefault(t *testing.T) {
	dir := t.TempDir()
	cfg := gateway.Config{DecisionLog: filepath.Join(dir, "decisions.db"), Auth: identity.Config{Dev: &identity.DevConfig{Principal: "user:dev"}}}
	st, err := stack.Start(context.Background(), stack.Config{ProjectDir: dir, Gateway: cfg})
	if err != nil {
		if !strings.Contains(err.Error(), "listen on "+gateway.DefaultListen) {
			t.Fatalf("start: %v", err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer st.Shutdown(ctx)
	if got := st.Addr(); got != gateway.DefaultListen || !strings.HasPrefix(gateway.DefaultListen, "127.0.0.1:") {
		t.Fatalf("listening on %s, want %s", got, gateway.DefaultListen)
	}
}
