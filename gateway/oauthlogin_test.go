package gateway

import (
	"testing"
	"time"
)

// TestPendingLogins: a state is taken once; an expired one is refused; the number pending is
// bounded.
func TestPendingLogins(t *testing.T) {
	var l logins
	l.put("fresh", pendingLogin{server: "mcp://a", principal: "user:bob", expires: time.Now().Add(time.Minute)})
	l.put("stale", pendingLogin{server: "mcp://a", principal: "user:bob", expires: time.Now().Add(-time.Second)})
	tests := []struct {
		state string
		ok    bool
	}{
		{"fresh", true},
		{"fresh", false}, // used
		{"stale", false}, // expired
		{"unknown", false},
	}
	for _, tt := range tests {
		if p, ok := l.take(tt.state); ok != tt.ok || ok && p.principal != "user:bob" {
			t.Errorf("take(%q) = %+v, %v; want ok %v", tt.state, p, ok, tt.ok)
		}
	}
	for i := range maxPendingLogin {
		if !l.put(string(rune('a'+i%26))+time.Duration(i).String(), pendingLogin{expires: time.Now().Add(time.Minute)}) {
			t.Fatalf("put %d refused below the bound", i)
		}
	}
	if l.put("one-too-many", pendingLogin{expires: time.Now().Add(time.Minute)}) {
		t.Error("more logins pending than the bound")
	}
}
