package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lush-agents/lush/examples/authserver/authserver"
	"github.com/lush-agents/lush/test/authtest"
)

func TestParseUser(t *testing.T) {
	tests := []struct {
		in      string
		want    authserver.User
		wantErr bool
	}{
		{"alice:alice@example.com:engineering,admins", authserver.User{Subject: "alice", Email: "alice@example.com", Groups: []string{"engineering", "admins"}}, false},
		{"user:bob:bob@example.com:", authserver.User{Subject: "user:bob", Email: "bob@example.com"}, false},
		{"carol::", authserver.User{Subject: "carol"}, false},
		{"alice", authserver.User{}, true},
		{"::x", authserver.User{}, true},
	}
	for _, tt := range tests {
		got, err := parseUser(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseUser(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if got.Subject != tt.want.Subject || got.Email != tt.want.Email || !slices.Equal(got.Groups, tt.want.Groups) {
			t.Errorf("parseUser(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	badClients := filepath.Join(dir, "clients.json")
	if err := os.WriteFile(badClients, []byte(`[{"id": "x", "secrett": "y"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	badExchange := filepath.Join(dir, "exchange")
	if err := os.WriteFile(badExchange, []byte("gateway\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hydra := authtest.HydraPath(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no hydra", []string{"--hydra", filepath.Join(dir, "missing")}, "make hydra-tool"},
		{"bad user", []string{"--hydra", hydra, "--user", "alice"}, `--user "alice"`},
		{"deny an unknown user", []string{"--hydra", hydra, "--deny-consent", "mallory"}, `--deny-consent "mallory": not a --user`},
		{"bad resource", []string{"--hydra", hydra, "--resource", "notes"}, "AllowedResources[0]"},
		{"unknown client field", []string{"--hydra", hydra, "--clients", badClients}, `unknown field "secrett"`},
		{"bad exchange clients", []string{"--hydra", hydra, "--exchange-clients", badExchange}, "line 1"},
		{"arguments", []string{"--hydra", hydra, "extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			err := run(context.Background(), tt.args, &out)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// lines is a writer that hands each complete line to a channel (and keeps them all).
type lines struct {
	mu      sync.Mutex
	partial string
	all     []string
	ch      chan string
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial += string(p)
	for {
		i := strings.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := l.partial[:i]
		l.partial = l.partial[i+1:]
		l.all = append(l.all, line)
		select {
		case l.ch <- line:
		default:
		}
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

var readyLine = regexp.MustCompile(`^authserver: issuer=(http://127\.0\.0\.1:\d+) exchange=(http://127\.0\.0\.1:\d+) admin=(http://127\.0\.0\.1:\d+)$`)

func TestRunServesUntilCancelled(t *testing.T) {
	dir := t.TempDir()
	clients := filepath.Join(dir, "clients.json")
	if err := os.WriteFile(clients, []byte(`[{"id": "svc", "secret": "svc-secret-0123456789", "grant_types": ["client_credentials"], "audience": ["http://127.0.0.1:9/mcp"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &lines{ch: make(chan string, 1024)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--hydra", authtest.HydraPath(t), "--quiet", "--resource", "http://127.0.0.1:9/mcp", "--clients", clients}, out)
	}()
	var m []string
	timeout := time.After(time.Minute)
	for m == nil {
		select {
		case line := <-out.ch:
			m = readyLine.FindStringSubmatch(line)
		case err := <-done:
			t.Fatalf("run returned before it was ready: %v\n%s", err, out)
		case <-timeout:
			t.Fatalf("no ready line after a minute:\n%s", out)
		}
	}
	issuer, exchange, admin := m[1], m[2], m[3]
	for _, u := range []string{issuer + "/.well-known/openid-configuration", exchange + "/.well-known/openid-configuration", admin + "/admin/clients/svc"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", u, resp.Status)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "authserver: stopped") {
		t.Errorf("no stop line:\n%s", out)
	}
	if _, err := http.Get(admin + "/health/alive"); err == nil {
		t.Errorf("Hydra still answers after run returned")
	}
}
