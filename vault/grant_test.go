package vault_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/examples/authserver/authserver"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/test/authtest"
	"github.com/lush-agents/lush/vault"
	"github.com/lush-agents/lush/vault/oauth"
)

// TestGrantInVault: a service account's authorization-code grant kept in Vault (KV v2) is
// refreshed at the real authorization server (Hydra) when its access token is about to expire,
// and the rotated grant is written back to Vault; StoreGrant writes a new grant there; a grant
// Hydra refuses to refresh is a denial naming the login command.
func TestGrantInVault(t *testing.T) {
	const resource = "https://crm.example.com/mcp"
	ctx := context.Background()
	as := authtest.Start(t, authtest.WithAllowedResources(resource))
	crm := authserver.Client{ID: "lush-crm", Secret: "crm-secret-0123456789", RedirectURIs: []string{"http://127.0.0.1:9/cb"},
		GrantTypes: []string{"authorization_code", "refresh_token"}, Scopes: []string{"offline_access"}, Audience: []string{resource}}
	if err := as.CreateClient(ctx, crm); err != nil {
		t.Fatal(err)
	}
	first, err := as.AuthorizationCodeToken(ctx, crm, "alice", resource, []string{"offline_access"})
	if err != nil || first.RefreshToken == "" {
		t.Fatalf("authorization code: %v (refresh token %v)", err, first != nil && first.RefreshToken != "")
	}

	tg := newTarget(t)
	path := tg.put("crm-grant", map[string]any{"access_token": first.AccessToken, "refresh_token": first.RefreshToken,
		"issuer": as.Issuer(), "expiry": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)})
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(crm.Secret), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := vault.New(vault.Config{Vault: &vault.VaultConfig{Address: tg.addr, Auth: vault.VaultAuth{TokenFile: tokenFile(t, tg.root)}},
		OAuth: &oauth.Config{Clients: []oauth.ClientConfig{{Issuer: as.Issuer(), ClientID: crm.ID, ClientSecretFile: secret, Servers: []string{"mcp://crm.example.com/mcp"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	decl := manifest.Credential{Tool: "mcp://crm.example.com/mcp", Principal: "serviceaccount:bot", Type: "oauth", Flow: "authorization_code", Vault: path}
	req := vault.Request{Project: "p", Tool: decl.Tool, Principal: decl.Principal, Declared: []manifest.Credential{decl}, URL: resource}
	c, err := b.Lookup(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if c.Token == first.AccessToken || c.Provenance() != "stored_grant" {
		t.Fatalf("the expired access token was not refreshed (%s)", c.Provenance())
	}
	s, err := tg.client(tg.root).Logical().Read(path)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := s.Data["data"].(map[string]any)
	if data["access_token"] != c.Token || data["refresh_token"] == first.RefreshToken || data["refresh_token"] == "" {
		t.Fatalf("Vault does not hold the refreshed grant: access %v, refresh rotated %v", data["access_token"] == c.Token, data["refresh_token"] != first.RefreshToken)
	}
	if again, err := b.Lookup(ctx, req); err != nil || again.Token != c.Token {
		t.Fatalf("a fresh grant was refreshed again: %v", err)
	}

	// StoreGrant writes a grant where the principal's credentials are: here, Vault.
	if err := b.StoreGrant(ctx, req, oauth.Grant{AccessToken: "stored-access-0123", RefreshToken: "stored-refresh-0123", Expiry: time.Now().Add(time.Hour), Issuer: as.Issuer()}); err != nil {
		t.Fatal(err)
	}
	if c, err := b.Lookup(ctx, req); err != nil || c.Token != "stored-access-0123" {
		t.Fatalf("after StoreGrant: %v", err)
	}

	// A grant the server refuses to refresh.
	tg.put("crm-grant", map[string]any{"access_token": "old-access-0123", "refresh_token": "not-a-refresh-token-0123",
		"issuer": as.Issuer(), "expiry": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)})
	b2, err := vault.New(vault.Config{Vault: &vault.VaultConfig{Address: tg.addr, Auth: vault.VaultAuth{TokenFile: tokenFile(t, tg.root)}},
		OAuth: &oauth.Config{Clients: []oauth.ClientConfig{{Issuer: as.Issuer(), ClientID: crm.ID, ClientSecretFile: secret, Servers: []string{"mcp://crm.example.com/mcp"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b2.Close)
	_, err = b2.Lookup(ctx, req)
	var oe *oauth.Error
	if !errors.As(err, &oe) || oe.Rule() != oauth.RuleLoginRequired || !strings.Contains(oe.Reason(), "lushctl auth login mcp://crm.example.com/mcp --principal serviceaccount:bot") {
		t.Fatalf("a refused refresh: %v", err)
	}
	if strings.Contains(err.Error(), "not-a-refresh-token-0123") {
		t.Error("the error shows the refresh token")
	}
}
