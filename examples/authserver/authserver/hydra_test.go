package authserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"golang.org/x/oauth2"

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

func TestDynamicRegistrationThroughTheFront(t *testing.T) {
	srv := authtest.Start(t, authtest.WithAllowedResources(notesResource, otherResource), authtest.WithScopes("notes:read"))
	ctx := context.Background()

	var disco map[string]any
	getJSON(t, srv.Issuer()+"/.well-known/openid-configuration", &disco)
	if disco["registration_endpoint"] != srv.Issuer()+"/oauth2/register" {
		t.Errorf("registration_endpoint = %v, want %s/oauth2/register", disco["registration_endpoint"], srv.Issuer())
	}
	if disco["issuer"] != srv.Issuer() || disco["token_endpoint"] != srv.TokenURL() {
		t.Errorf("issuer = %v, token_endpoint = %v", disco["issuer"], disco["token_endpoint"])
	}

	// What the TypeScript SDKs send: a public client with PKCE.
	reg := `{"client_name":"mcp client","redirect_uris":["http://127.0.0.1:9/callback"],"grant_types":["authorization_code","refresh_token"],` +
		`"response_types":["code"],"token_endpoint_auth_method":"none","scope":"openid offline_access notes:read"}`
	resp, err := http.Post(srv.Issuer()+"/oauth2/register", "application/json", strings.NewReader(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("register: %s: %s", resp.Status, body)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	for k, v := range got {
		if v == nil || v == "" {
			t.Errorf("registration response field %q is %#v: the SDKs reject it", k, v)
		}
	}
	if _, ok := got["contacts"]; ok {
		t.Errorf("contacts = %v, want it left out", got["contacts"])
	}
	if aud, _ := got["audience"].([]any); len(aud) != 2 || aud[0] != notesResource || aud[1] != otherResource {
		t.Errorf("audience = %v, want the allowed resources", got["audience"])
	}
	id, _ := got["client_id"].(string)
	if id == "" {
		t.Fatalf("no client_id in %s", body)
	}

	// The registered client logs in with PKCE for a resource and gets a token for it.
	c := authserver.Client{ID: id, RedirectURIs: []string{"http://127.0.0.1:9/callback"}, TokenEndpointAuthMethod: "none"}
	tok, err := srv.AuthorizationCodeToken(ctx, c, "", otherResource, []string{"openid", "notes:read"})
	if err != nil {
		t.Fatal(err)
	}
	cl := claims(t, srv.JWKSURL(), srv.Issuer(), tok.AccessToken)
	if cl["sub"] != "alice" || !slices.Equal(audience(cl), []string{otherResource}) {
		t.Errorf("claims = %v, want sub alice (the default user), aud [%s]", cl, otherResource)
	}
	if tok.RefreshToken != "" {
		t.Errorf("a refresh token without offline_access")
	}
}

func TestLoginHintNextUserAndDeniedConsent(t *testing.T) {
	srv := authtest.Start(t, authtest.WithAllowedResources(notesResource))
	ctx := context.Background()
	app := authserver.Client{ID: "app", Secret: "app-secret-0123456789", RedirectURIs: []string{"http://127.0.0.1:9/cb"},
		Scopes: []string{"openid"}, Audience: []string{notesResource}}
	if err := srv.CreateClient(ctx, app); err != nil {
		t.Fatal(err)
	}
	sub := func(user, resource string) (string, error) {
		t.Helper()
		tok, err := srv.AuthorizationCodeToken(ctx, app, user, resource, []string{"openid"})
		if err != nil {
			return "", err
		}
		s, _ := claims(t, srv.JWKSURL(), srv.Issuer(), tok.AccessToken)["sub"].(string)
		return s, nil
	}
	if s, err := sub("", notesResource); err != nil || s != "alice" {
		t.Errorf("no login_hint: sub %q, %v; want alice", s, err)
	}
	if s, err := sub("bob", notesResource); err != nil || s != "bob" {
		t.Errorf("login_hint bob: sub %q, %v; want bob", s, err)
	}
	if err := srv.SetNextUser("bob"); err != nil {
		t.Fatal(err)
	}
	if s, err := sub("nobody", notesResource); err != nil || s != "bob" {
		t.Errorf("login_hint of no user after SetNextUser(bob): sub %q, %v; want bob", s, err)
	}
	if err := srv.SetNextUser("nobody"); err == nil {
		t.Error("SetNextUser(nobody): no error")
	}
	if _, err := sub("carol", notesResource); err == nil || !strings.Contains(err.Error(), "access_denied") {
		t.Errorf("carol denies consent: err = %v, want access_denied", err)
	}
	if _, err := sub("bob", otherResource); err == nil || !strings.Contains(err.Error(), "invalid_target") {
		t.Errorf("a resource the client may not ask for: err = %v, want invalid_target", err)
	}
}

func getJSON(t *testing.T, u string, out any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

func TestOpaqueTokenIntrospection(t *testing.T) {
	srv := authtest.Start(t, authtest.WithAllowedResources(notesResource))
	ctx := context.Background()
	if err := srv.CreateClient(ctx, authserver.Client{ID: "opaque", Secret: "opaque-secret-0123456789", GrantTypes: []string{"client_credentials"},
		ResponseTypes: []string{}, Audience: []string{notesResource}, AccessTokenStrategy: "opaque"}); err != nil {
		t.Fatal(err)
	}
	tok, err := srv.ClientCredentialsToken(ctx, "opaque", "opaque-secret-0123456789", []string{notesResource})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(tok.AccessToken, ".") == 2 {
		t.Fatalf("the opaque client got a JWT")
	}
	introspect := func(token string) map[string]any {
		resp, err := http.PostForm(srv.IntrospectionURL(), url.Values{"token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	got := introspect(tok.AccessToken)
	if got["active"] != true || got["client_id"] != "opaque" {
		t.Errorf("introspection = %v, want active, client_id opaque", got)
	}
	if aud, _ := got["aud"].([]any); len(aud) != 1 || aud[0] != notesResource {
		t.Errorf("aud = %v, want [%s]", got["aud"], notesResource)
	}
	if got := introspect("not-a-token"); got["active"] != false {
		t.Errorf("introspection of garbage = %v, want inactive", got)
	}
}

// A client with a loopback callback (as lushctl auth login has): Browse plays the person's browser
// and the callback gets the code.
func TestBrowseToALoopbackCallback(t *testing.T) {
	srv := authtest.Start(t, authtest.WithAllowedResources(notesResource))
	ctx := context.Background()
	codes := make(chan url.Values, 1)
	callback := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		codes <- r.URL.Query()
		_, _ = io.WriteString(w, "you may close this window")
	}))
	t.Cleanup(callback.Close)
	app := authserver.Client{ID: "cli", RedirectURIs: []string{callback.URL + "/callback"}, TokenEndpointAuthMethod: "none",
		Scopes: []string{"openid", "offline_access"}, Audience: []string{notesResource}}
	if err := srv.CreateClient(ctx, app); err != nil {
		t.Fatal(err)
	}
	conf := srv.OAuth2Config(app, "openid", "offline_access")
	verifier := oauth2.GenerateVerifier()
	authURL := conf.AuthCodeURL("state-number-1", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("login_hint", "bob"),
		oauth2.SetAuthURLParam("resource", notesResource))
	final, status, err := srv.Browse(ctx, authURL)
	if err != nil || status != http.StatusOK || final.Path != "/callback" {
		t.Fatalf("Browse = %v, %d, %v; want the callback, 200", final, status, err)
	}
	q := <-codes
	if q.Get("state") != "state-number-1" || q.Get("code") == "" {
		t.Fatalf("callback query has state %q and a code: %v", q.Get("state"), q.Get("code") != "")
	}
	tok, err := conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier), oauth2.SetAuthURLParam("resource", notesResource))
	if err != nil {
		t.Fatal(err)
	}
	if c := claims(t, srv.JWKSURL(), srv.Issuer(), tok.AccessToken); c["sub"] != "bob" || !slices.Equal(audience(c), []string{notesResource}) {
		t.Errorf("claims = %v", c)
	}
	if tok.RefreshToken == "" {
		t.Error("no refresh token")
	}

	// Carol never consents: the callback gets access_denied.
	authURL = conf.AuthCodeURL("state-number-2", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("login_hint", "carol"))
	if _, _, err := srv.Browse(ctx, authURL); err != nil {
		t.Fatal(err)
	}
	if q := <-codes; q.Get("error") != "access_denied" || q.Get("code") != "" {
		t.Errorf("callback query = %v, want error=access_denied and no code", q)
	}
}

func TestShortAccessTokenTTL(t *testing.T) {
	srv := authtest.Start(t, authtest.WithAllowedResources(notesResource), authtest.WithTokenTTL(3*time.Second, time.Hour))
	ctx := context.Background()
	if err := srv.CreateClient(ctx, authserver.Client{ID: "svc", Secret: "svc-secret-0123456789", GrantTypes: []string{"client_credentials"},
		ResponseTypes: []string{}, Audience: []string{notesResource}}); err != nil {
		t.Fatal(err)
	}
	// Hydra sets exp when the request comes in (iat when it signs, later the first time, when it
	// makes its signing key): exp is 3s after a moment between before and after.
	before := time.Now()
	tok, err := srv.ClientCredentialsToken(ctx, "svc", "svc-secret-0123456789", []string{notesResource})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	c := claims(t, srv.JWKSURL(), srv.Issuer(), tok.AccessToken)
	exp, _ := c["exp"].(time.Time)
	lo, hi := before.Add(3*time.Second).Truncate(time.Second), after.Add(3*time.Second)
	if exp.Before(lo) || exp.After(hi) {
		t.Errorf("exp = %s, want between %s and %s (3s after the request)", exp, lo, hi)
	}
}
