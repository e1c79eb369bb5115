package authserver_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/lush-agents/lush/examples/authserver/authserver"
	"github.com/lush-agents/lush/test/authtest"
)

const (
	notesResource = "http://127.0.0.1:9/agents/notes/mcp"
	otherResource = "http://127.0.0.1:9/agents/other/mcp"
)

// claims verifies token with the keys at jwksURL and issuer, and returns its claims.
func claims(t *testing.T, jwksURL, issuer, token string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	set, err := jwk.Fetch(ctx, jwksURL)
	if err != nil {
		t.Fatalf("fetch %s: %v", jwksURL, err)
	}
	tok, err := jwt.Parse([]byte(token), jwt.WithKeySet(set), jwt.WithIssuer(issuer), jwt.WithValidate(true))
	if err != nil {
		t.Fatalf("verify the token: %v", err)
	}
	out := map[string]any{}
	for _, k := range tok.Keys() {
		var v any
		if err := tok.Get(k, &v); err != nil {
			t.Fatalf("claim %s: %v", k, err)
		}
		out[k] = v
	}
	return out
}

func audience(c map[string]any) []string {
	switch a := c["aud"].(type) {
	case []string:
		return a
	case string:
		return []string{a}
	}
	return nil
}

func TestClientCredentials(t *testing.T) {
	srv := authtest.Start(t, authtest.WithAllowedResources(notesResource, otherResource), authtest.WithScopes("notes:read"))
	ctx := context.Background()
	if err := srv.CreateClient(ctx, authserver.Client{ID: "svc", Secret: "svc-secret-0123456789", GrantTypes: []string{"client_credentials"},
		ResponseTypes: []string{}, Scopes: []string{"notes:read"}, Audience: []string{notesResource}}); err != nil {
		t.Fatal(err)
	}
	tok, err := srv.ClientCredentialsToken(ctx, "svc", "svc-secret-0123456789", []string{notesResource}, "notes:read")
	if err != nil {
		t.Fatal(err)
	}
	c := claims(t, srv.JWKSURL(), srv.Issuer(), tok.AccessToken)
	if aud := audience(c); !slices.Equal(aud, []string{notesResource}) {
		t.Errorf("aud = %v, want [%s]", aud, notesResource)
	}
	if c["client_id"] != "svc" || c["sub"] != "svc" {
		t.Errorf("client_id = %v, sub = %v, want svc", c["client_id"], c["sub"])
	}
	t.Logf("claims: %v", c)
}

func TestAuthorizationCodeRefreshAndRevokedConsent(t *testing.T) {
	srv := authtest.Start(t, authtest.WithAllowedResources(notesResource, otherResource), authtest.WithScopes("notes:read"))
	ctx := context.Background()
	app := authserver.Client{ID: "app", Secret: "app-secret-0123456789", GrantTypes: []string{"authorization_code", "refresh_token"},
		RedirectURIs: []string{"http://127.0.0.1:9/callback"}, Scopes: []string{"openid", "offline_access", "notes:read"},
		Audience: []string{notesResource}}
	if err := srv.CreateClient(ctx, app); err != nil {
		t.Fatal(err)
	}
	tok, err := srv.AuthorizationCodeToken(ctx, app, "bob", notesResource, []string{"openid", "offline_access", "notes:read"})
	if err != nil {
		t.Fatal(err)
	}
	c := claims(t, srv.JWKSURL(), srv.Issuer(), tok.AccessToken)
	if c["sub"] != "bob" || c["email"] != "bob@example.com" || !slices.Equal(audience(c), []string{notesResource}) {
		t.Errorf("claims = %v, want sub bob, email bob@example.com, aud [%s]", c, notesResource)
	}
	if g, _ := c["groups"].([]any); len(g) != 1 || g[0] != "sales" {
		t.Errorf("groups = %v, want [sales]", c["groups"])
	}
	if tok.RefreshToken == "" {
		t.Fatal("no refresh token with offline_access")
	}
	idToken, _ := tok.Extra("id_token").(string)
	if ic := claims(t, srv.JWKSURL(), srv.Issuer(), idToken); ic["email"] != "bob@example.com" {
		t.Errorf("ID token claims = %v, want email bob@example.com", ic)
	}

	refreshed, err := srv.RefreshToken(ctx, app, tok.RefreshToken, notesResource)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if rc := claims(t, srv.JWKSURL(), srv.Issuer(), refreshed.AccessToken); rc["sub"] != "bob" || !slices.Equal(audience(rc), []string{notesResource}) {
		t.Errorf("refreshed claims = %v", rc)
	}

	if err := srv.RevokeConsent(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.RefreshToken(ctx, app, refreshed.RefreshToken, notesResource); err == nil {
		t.Fatal("refresh after the consent was revoked: no error")
	} else {
		t.Logf("refresh after revoke: %v", err)
	}
}
