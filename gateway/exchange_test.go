package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/upstream"
)

// blocked is an upstream call that runs until its context ends.
func blocked(ctx context.Context, _ upstream.Notify) (json.RawMessage, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func aliceCall() *serverCall {
	return &serverCall{c: &call{caller: identity.Caller{ID: "user:alice"}}, ref: "mcp://x", name: "t", action: "tools/call", id: "d-1"}
}

// A replica holds at most max exchanges; Close cancels their upstream calls, waits for their
// goroutines and refuses new exchanges.
func TestExchangesBoundedAndClosed(t *testing.T) {
	xs := newExchanges([]byte(strings.Repeat("k", 32)))
	xs.max = 2
	var started []*exchange
	for range 2 {
		ex, err := xs.start(aliceCall(), "c", nil, blocked)
		if err != nil {
			t.Fatal(err)
		}
		started = append(started, ex)
	}
	if _, err := xs.start(aliceCall(), "c", nil, blocked); err == nil || !strings.Contains(err.Error(), "the most calls") {
		t.Fatalf("a third exchange: %v, want refused", err)
	}
	xs.Close() // returns once both goroutines ended
	for _, ex := range started {
		select {
		case <-ex.done:
			if !errors.Is(ex.err, context.Canceled) {
				t.Errorf("the upstream call ended with %v, want cancelled", ex.err)
			}
		default:
			t.Error("Close returned with an exchange's upstream call still running")
		}
	}
	if len(xs.byID) != 0 {
		t.Errorf("%d exchanges left after Close", len(xs.byID))
	}
	if _, err := xs.start(aliceCall(), "c", nil, blocked); err == nil {
		t.Error("an exchange started after Close")
	}
}

// An exchange ends at its TTL: its upstream call is cancelled and the request waiting gets the
// deadline; a result is handed to the request that waits, then the exchange is gone.
func TestExchangeTTLAndResult(t *testing.T) {
	xs := newExchanges([]byte(strings.Repeat("k", 32)))
	defer xs.Close()
	xs.ttl = -time.Second // expired from the start
	ex, err := xs.start(aliceCall(), "c", nil, blocked)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := xs.wait(context.Background(), ex, aliceCall()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an expired exchange: %v, want the deadline", err)
	}
	xs.ttl = time.Minute
	ex, err = xs.start(aliceCall(), "c", nil, func(context.Context, upstream.Notify) (json.RawMessage, error) {
		return json.RawMessage(`{"ok":true}`), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := xs.wait(context.Background(), ex, aliceCall()); err != nil || string(res) != `{"ok":true}` {
		t.Errorf("result %s %v", res, err)
	}
	xs.Close()
	if len(xs.byID) != 0 {
		t.Errorf("the exchange outlived its result: %d left", len(xs.byID))
	}
}

// A requestState is accepted only as signed, unchanged and before it expires.
func TestRequestStateVerify(t *testing.T) {
	xs := newExchanges([]byte(strings.Repeat("k", 32)))
	defer xs.Close()
	now := time.Unix(1_800_000_000, 0)
	xs.now = func() time.Time { return now }
	other := newExchanges([]byte(strings.Repeat("o", 32)))
	defer other.Close()
	st := requestState{Exchange: "x1", Principal: "p", Decision: "d", Expires: now.Unix() + 60}
	good := xs.sign(st)
	expired := st
	expired.Expires = now.Unix()
	tests := []struct {
		name, state string
		ok          bool
	}{
		{"signed", good, true},
		{"expired", xs.sign(expired), false},
		{"signed with another key", other.sign(st), false},
		{"signature changed", good[:len(good)-1] + "A", false},
		{"payload changed", strings.Replace(good, "lush-x1.e", "lush-x1.f", 1), false},
		{"no signature", good[:strings.LastIndexByte(good, '.')], false},
		{"too long", good + strings.Repeat("A", 1024), false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		got, ok := xs.verify(tt.state)
		if ok != tt.ok || (ok && got != st) {
			t.Errorf("%s: verify = %+v, %v; want ok %v", tt.name, got, ok, tt.ok)
		}
	}
}
