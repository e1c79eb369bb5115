package vault_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/test/vaultserver"
	"github.com/lush-agents/lush/vault"
)

// The Vault tests run against test/vaultserver, or against a real Vault when VAULT_ADDR and
// VAULT_TOKEN are set (make test-vault). Tests that need what only the test server can do
// (outages, its clock, dynamic secrets, auth methods) skip against a real Vault.

// target is the Vault a test talks to.
type target struct {
	t      *testing.T
	addr   string
	root   string
	fake   *vaultserver.Server // nil for a real Vault
	prefix string              // unique per test: secrets live under secret/data/<prefix>/…
}

func newTarget(t *testing.T, opts ...vaultserver.Option) *target {
	t.Helper()
	tg := &target{t: t, prefix: fmt.Sprintf("lush-test/%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())}
	if addr, tok := os.Getenv("VAULT_ADDR"), os.Getenv("VAULT_TOKEN"); addr != "" && tok != "" {
		tg.addr, tg.root = addr, tok
		t.Cleanup(func() {
			// Remove what the test wrote.
			c := tg.client(tg.root)
			list, _ := c.Logical().List("secret/metadata/" + tg.prefix)
			if list != nil {
				if keys, ok := list.Data["keys"].([]any); ok {
					for _, k := range keys {
						c.Logical().Delete("secret/metadata/" + tg.prefix + "/" + fmt.Sprint(k))
					}
				}
			}
		})
		return tg
	}
	tg.fake = vaultserver.Start(t, opts...)
	tg.addr, tg.root = tg.fake.Addr(), tg.fake.RootToken()
	return tg
}

func (tg *target) needFake() {
	if tg.fake == nil {
		tg.t.Skip("needs test/vaultserver (it controls outages, time, dynamic secrets and auth methods)")
	}
}

func (tg *target) client(token string) *api.Client {
	cfg := api.DefaultConfig()
	cfg.Address = tg.addr
	cfg.MaxRetries = 0
	c, err := api.NewClient(cfg)
	if err != nil {
		tg.t.Fatal(err)
	}
	c.SetToken(token)
	if tg.fake != nil && tg.fake.Namespace() != "" {
		c.SetNamespace(tg.fake.Namespace())
	}
	return c
}

// put writes a KV v2 secret at secret/<prefix>/<rel> and returns its logical read path.
func (tg *target) put(rel string, data map[string]any) string {
	tg.t.Helper()
	if _, err := tg.client(tg.root).KVv2("secret").Put(context.Background(), tg.prefix+"/"+rel, data); err != nil {
		tg.t.Fatal(err)
	}
	return "secret/data/" + tg.prefix + "/" + rel
}

// childToken creates a renewable token that may read what root may.
func (tg *target) childToken(ttl time.Duration) string {
	tg.t.Helper()
	s, err := tg.client(tg.root).Auth().Token().Create(&api.TokenCreateRequest{TTL: ttl.String(), Renewable: ptr(true)})
	if err != nil {
		tg.t.Fatal(err)
	}
	return s.Auth.ClientToken
}

func ptr[T any](v T) *T { return &v }

// tokenFile writes a token to a file, as a deployment would mount it.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	writeTokenFile(t, p, token)
	return p
}

func writeTokenFile(t testing.TB, p, token string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// clock is a settable time for the broker's cache.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (tg *target) broker(vc vault.VaultConfig, ttl time.Duration, clk *clock) *vault.Broker {
	tg.t.Helper()
	vc.Address = tg.addr
	if tg.fake != nil {
		vc.Namespace = tg.fake.Namespace()
	}
	opts := []vault.Option{}
	if clk != nil {
		opts = append(opts, vault.WithClock(clk.Now))
	}
	b, err := vault.New(vault.Config{Vault: &vc, CacheTTL: ttl}, opts...)
	if err != nil {
		tg.t.Fatal(err)
	}
	tg.t.Cleanup(b.Close)
	return b
}

// botRequest is a lookup for the service account "bot" of a declaration whose Vault path is the
// test's own.
func (tg *target) botRequest(typ, rel string) vault.Request {
	return vault.Request{Project: "p", Tool: notes, Principal: "serviceaccount:bot",
		Declared: []manifest.Credential{{Tool: notes, Principal: "serviceaccount:bot", Type: typ, Vault: "secret/data/" + tg.prefix + "/" + rel}}}
}

func TestVaultKV(t *testing.T) {
	tg := newTarget(t)
	path := tg.put("notes/bot", map[string]any{"token": "kv-bot-token"})
	b := tg.broker(vault.VaultConfig{Auth: vault.VaultAuth{TokenFile: tokenFile(t, tg.root)}}, 0, nil)
	c, err := b.Lookup(context.Background(), tg.botRequest("bearer", "notes/bot"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Token != "kv-bot-token" || c.Source != "vault "+path || c.Headers()["Authorization"] != "Bearer kv-bot-token" {
		t.Fatalf("got %v", c)
	}
}

func TestVaultDefaultPath(t *testing.T) {
	tg := newTarget(t)
	tg.put("quickstart/notes.example.com/mcp/serviceaccount/digest-bot", map[string]any{"token": "default-path-token"})
	b := tg.broker(vault.VaultConfig{Path: "secret/data/" + tg.prefix + "/{project}/{server}/{principal}",
		Auth: vault.VaultAuth{TokenFile: tokenFile(t, tg.root)}}, 0, nil)
	c, err := b.Lookup(context.Background(), vault.Request{Project: "quickstart", Tool: notes, Principal: "serviceaccount:digest-bot",
		Declared: []manifest.Credential{{Tool: notes, Principal: "serviceaccount:digest-bot", Type: "bearer"}}})
	if err != nil || c.Token != "default-path-token" {
		t.Fatalf("%v %v", c, err)
	}
}

func TestVaultMissing(t *testing.T) {
	tg := newTarget(t)
	tg.put("notes/wrongfield", map[string]any{"password": "x"})
	b := tg.broker(vault.VaultConfig{Auth: vault.VaultAuth{TokenFile: tokenFile(t, tg.root)}}, 0, nil)
	tests := []struct{ rel, want string }{
		{"notes/absent", "vault kv put -mount=secret " + tg.prefix + "/notes/absent token=…"},
		{"notes/wrongfield", "has no token field (it has: password)"},
	}
	for _, tt := range tests {
		_, err := b.Lookup(context.Background(), tg.botRequest("bearer", tt.rel))
		var m *vault.MissingError
		if !errors.As(err, &m) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want a MissingError with %q", tt.rel, err, tt.want)
		}
		if strings.Contains(fmt.Sprint(err), "x\"") {
			t.Errorf("the error shows a value: %v", err)
		}
	}
}

func TestVaultRevokedTokenFailsClosed(t *testing.T) {
	tg := newTarget(t)
	tg.put("notes/bot", map[string]any{"token": "t1"})
	child := tg.childToken(time.Hour)
	clk := &clock{now: time.Now()}
	b := tg.broker(vault.VaultConfig{Auth: vault.VaultAuth{TokenFile: tokenFile(t, child)}}, time.Minute, clk)
	if _, err := b.Lookup(context.Background(), tg.botRequest("bearer", "notes/bot")); err != nil {
		t.Fatal(err)
	}
	if err := tg.client(tg.root).Auth().Token().RevokeTree(child); err != nil {
		t.Fatal(err)
	}
	// Still fresh: served from the cache without asking Vault.
	if _, err := b.Lookup(context.Background(), tg.botRequest("bearer", "notes/bot")); err != nil {
		t.Fatalf("fresh cached value: %v", err)
	}
	// Due for a re-read: Vault refuses (403), which is an answer, not an outage: fail closed now,
	// although the cached value has not expired.
	clk.Add(31 * time.Second)
	_, err := b.Lookup(context.Background(), tg.botRequest("bearer", "notes/bot"))
	var u *vault.UnavailableError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "403") || u.Rule() != vault.RuleUnavailable {
		t.Fatalf("after revocation: %v", err)
	}
	if strings.Contains(err.Error(), child) || strings.Contains(u.Reason(), tg.addr) {
		t.Fatalf("the error leaks the token or the caller's reason names Vault: %v / %s", err, u.Reason())
	}
}

func TestVaultOutage(t *testing.T) {
	tg := newTarget(t)
	tg.needFake()
	tg.put("notes/bot", map[string]any{"token": "outage-token"})
	clk := &clock{now: time.Now()}
	b := tg.broker(vault.VaultConfig{Auth: vault.VaultAuth{TokenFile: tokenFile(t, tg.root)}}, time.Minute, clk)
	lookup := func() (*vault.Credential, error) {
		return b.Lookup(context.Background(), tg.botRequest("bearer", "notes/bot"))
	}
	if _, err := lookup(); err != nil {
		t.Fatal(err)
	}
	tg.fake.SetDown(true)
	clk.Add(40 * time.Second) // due for a re-read, not expired
	if c, err := lookup(); err != nil || c.Token != "outage-token" {
		t.Fatalf("during an outage, before expiry: %v %v", c, err)
	}
	clk.Add(30 * time.Second) // expired
	_, err := lookup()
	var u *vault.UnavailableError
	if !errors.As(err, &u) {
		t.Fatalf("after expiry during an outage: %v", err)
	}
	tg.fake.SetDown(false)
	if c, err := lookup(); err != nil || c.Token != "outage-token" {
		t.Fatalf("after the outage: %v %v", c, err)
	}
	// Unreachable (not just sealed): the same.
	tg.fake.Close()
	clk.Add(2 * time.Minute)
	if _, err := lookup(); !errors.As(err, &u) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("unreachable: %v", err)
	}
}

func TestVaultDynamicSecretLease(t *testing.T) {
	tg := newTarget(t, vaultserver.WithDynamicRole("notes", 30*time.Second, time.Hour))
	tg.needFake()
	clk := &clock{now: time.Now()}
	b := tg.broker(vault.VaultConfig{Auth: vault.VaultAuth{TokenFile: tokenFile(t, tg.root)}}, 10*time.Minute, clk)
	req := vault.Request{Project: "p", Tool: notes, Principal: "serviceaccount:bot",
		Declared: []manifest.Credential{{Tool: notes, Principal: "serviceaccount:bot", Type: "basic", Vault: "database/creds/{principal_name}"}}}
	// The role is named after the principal: {principal_name} = bot. Use the "notes" role instead.
	req.Declared[0].Vault = "database/creds/notes"
	first, err := b.Lookup(context.Background(), req)
	if err != nil || first.Username == "" || first.Password == "" {
		t.Fatalf("%v %v", first, err)
	}
	// Within the lease: the same credentials, no new read (a dynamic secret is not minted per call).
	clk.Add(10 * time.Second)
	if c, _ := b.Lookup(context.Background(), req); c.Username != first.Username {
		t.Fatal("a fresh lease was read again")
	}
	// Two thirds into the lease: renewed, still the same credentials.
	clk.Add(11 * time.Second)
	if c, err := b.Lookup(context.Background(), req); err != nil || c.Username != first.Username {
		t.Fatalf("after renewal: %v %v", c, err)
	}
	renewed := false
	for _, r := range tg.fake.Requests() {
		if strings.HasSuffix(r.Path, "sys/leases/renew") {
			renewed = true
		}
	}
	if !renewed {
		t.Fatal("the lease was not renewed")
	}
}

func TestVaultAuthMethods(t *testing.T) {
	const roleID, secretID, jwt = "role-1", "secret-id-1", "k8s-service-account-jwt"
	tg := newTarget(t,
		vaultserver.WithPolicy("lush", map[string][]string{"secret/data/*": {"read"}}),
		vaultserver.WithAppRole("approle", roleID, secretID, time.Hour, "lush"),
		vaultserver.WithKubernetes("kubernetes", "lush", jwt, time.Hour, "lush"))
	tg.needFake()
	tg.put("notes/bot", map[string]any{"token": "auth-method-token"})
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o600)
		return p
	}
	tests := []struct {
		name string
		auth vault.VaultAuth
		err  string
	}{
		{"approle", vault.VaultAuth{Method: "approle", RoleID: roleID, SecretIDFile: file("sid", secretID)}, ""},
		{"approle, wrong secret id", vault.VaultAuth{Method: "approle", RoleID: roleID, SecretIDFile: file("bad-sid", "nope")}, "vault approle login: Vault answered 400"},
		{"kubernetes", vault.VaultAuth{Method: "kubernetes", Role: "lush", JWTFile: file("jwt", jwt)}, ""},
		{"kubernetes, wrong jwt", vault.VaultAuth{Method: "kubernetes", Role: "lush", JWTFile: file("bad-jwt", "nope")}, "vault kubernetes login"},
		{"token, revoked", vault.VaultAuth{TokenFile: file("revoked", revoked(tg))}, "vault token: Vault answered 403"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tg.broker(vault.VaultConfig{Auth: tt.auth}, 0, nil)
			c, err := b.Lookup(context.Background(), tg.botRequest("bearer", "notes/bot"))
			if tt.err == "" {
				if err != nil || c.Token != "auth-method-token" {
					t.Fatalf("%v %v", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
			for _, s := range []string{secretID, jwt, "nope"} {
				if strings.Contains(err.Error(), s) {
					t.Fatalf("the error shows a login secret: %v", err)
				}
			}
		})
	}
}

func revoked(tg *target) string {
	tok := tg.fake.CreateToken(time.Hour, true, "root")
	tg.fake.Revoke(tok)
	return tok
}

func TestVaultNamespace(t *testing.T) {
	tg := newTarget(t, vaultserver.WithNamespace("team-a"))
	tg.needFake()
	tg.put("notes/bot", map[string]any{"token": "ns-token"})
	b := tg.broker(vault.VaultConfig{Auth: vault.VaultAuth{TokenFile: tokenFile(t, tg.root)}}, 0, nil)
	if c, err := b.Lookup(context.Background(), tg.botRequest("bearer", "notes/bot")); err != nil || c.Token != "ns-token" {
		t.Fatalf("%v %v", c, err)
	}
	for _, r := range tg.fake.Requests() {
		if strings.Contains(r.Path, "notes/bot") && r.Namespace != "team-a" {
			t.Errorf("read without the namespace: %+v", r)
		}
	}
}

func TestVaultTokenRenewal(t *testing.T) {
	tg := newTarget(t)
	tg.needFake()
	tg.put("notes/bot", map[string]any{"token": "t"})
	tok := tg.fake.CreateToken(3*time.Second, true, "root")
	b := tg.broker(vault.VaultConfig{Auth: vault.VaultAuth{TokenFile: tokenFile(t, tok)}}, 0, nil)
	if _, err := b.Lookup(context.Background(), tg.botRequest("bearer", "notes/bot")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range tg.fake.Requests() {
			if strings.HasSuffix(r.Path, "auth/token/renew-self") {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the token was not renewed before it expired")
}
