package authserver_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/zitadel/oidc/v3/pkg/client/tokenexchange"
	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/lush-agents/lush/examples/authserver/authserver"
	"github.com/lush-agents/lush/test/authtest"
	"github.com/lush-agents/lush/test/syncbuf"
)

const (
	gatewayResource  = "http://127.0.0.1:9/agents/planner/mcp"
	upstreamResource = "https://upstream.example.com/mcp"
	exchangeSecret   = "gateway-exchange-secret-0123456789"
)

// actorKey is an Ed25519 key pair whose public half is a JWK set (with a kid).
type actorKey struct {
	priv ed25519.PrivateKey
	kid  string
	set  []byte
}

func newActorKey(t *testing.T, kid string) actorKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := jwk.Import(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.KeyIDKey, kid); err != nil {
		t.Fatal(err)
	}
	set := jwk.NewSet()
	if err := set.AddKey(k); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return actorKey{priv: priv, kid: kid, set: b}
}

// sign signs claims (exp defaults to a minute from now).
func (k actorKey) sign(t *testing.T, claims map[string]any) string {
	t.Helper()
	b := jwt.NewBuilder().Expiration(time.Now().Add(time.Minute)).IssuedAt(time.Now())
	for name, v := range claims {
		b = b.Claim(name, v)
	}
	tok, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.KeyIDKey, k.kid); err != nil {
		t.Fatal(err)
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.EdDSA(), k.priv, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		t.Fatal(err)
	}
	return string(signed)
}

func exchange(ctx context.Context, srv *authserver.Server, id, secret, subject, actor string, resource []string) (*oidc.TokenExchangeResponse, error) {
	actorType := oidc.TokenType("")
	if actor != "" {
		actorType = oidc.JWTTokenType
	}
	return exchangeTyped(ctx, srv, id, secret, subject, actor, actorType, resource)
}

func exchangeTyped(ctx context.Context, srv *authserver.Server, id, secret, subject, actor string, actorType oidc.TokenType, resource []string) (*oidc.TokenExchangeResponse, error) {
	te, err := tokenexchange.NewTokenExchangerClientCredentials(ctx, srv.ExchangeIssuer(), id, secret)
	if err != nil {
		return nil, err
	}
	return tokenexchange.ExchangeToken(ctx, te, subject, oidc.AccessTokenType, actor, actorType, resource, nil, nil, oidc.AccessTokenType)
}

func TestTokenExchange(t *testing.T) {
	agentd := newActorKey(t, "agentd")
	stranger := newActorKey(t, "agentd") // same kid, another key
	logs := &syncbuf.Buffer{}
	srv := authtest.Start(t, authtest.WithAllowedResources(gatewayResource, upstreamResource),
		authtest.WithExchange(authserver.ExchangeConfig{
			Clients:          []authserver.ExchangeClient{{ID: "gateway", Secret: exchangeSecret}},
			TrustedActorKeys: agentd.set,
		}),
		authtest.WithConfig(func(c *authserver.Config) { c.Logs = logs }))
	ctx := context.Background()
	app := authserver.Client{ID: "app", Secret: "app-secret-0123456789", RedirectURIs: []string{"http://127.0.0.1:9/cb"},
		Scopes: []string{"openid"}, Audience: []string{gatewayResource}}
	if err := srv.CreateClient(ctx, app); err != nil {
		t.Fatal(err)
	}
	user, err := srv.AuthorizationCodeToken(ctx, app, "alice", gatewayResource, []string{"openid"})
	if err != nil {
		t.Fatal(err)
	}
	// user ← writer ← planner: planner called writer, which acts for the user.
	actor := agentd.sign(t, map[string]any{"iss": "lush-agentd", "sub": "agent:writer", "act": map[string]any{"sub": "agent:planner"}})

	resp, err := exchange(ctx, srv, "gateway", exchangeSecret, user.AccessToken, actor, []string{upstreamResource})
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	c := claims(t, srv.ExchangeJWKSURL(), srv.ExchangeIssuer(), resp.AccessToken)
	if c["sub"] != "alice" || c["email"] != "alice@example.com" || !equal(audience(c), []string{upstreamResource}) {
		t.Errorf("claims = %v, want sub alice, email alice@example.com, aud [%s]", c, upstreamResource)
	}
	if g, _ := json.Marshal(c["groups"]); string(g) != `["engineering","admins"]` {
		t.Errorf("groups = %s", g)
	}
	if act, _ := json.Marshal(c["act"]); string(act) != `{"act":{"sub":"agent:planner"},"sub":"agent:writer"}` {
		t.Errorf("act = %s, want writer with planner nested", act)
	}
	if resp.IssuedTokenType != oidc.AccessTokenType || resp.TokenType != "Bearer" {
		t.Errorf("issued_token_type %q, token_type %q", resp.IssuedTokenType, resp.TokenType)
	}

	// Without an actor token: no act.
	resp, err = exchange(ctx, srv, "gateway", exchangeSecret, user.AccessToken, "", []string{upstreamResource})
	if err != nil {
		t.Fatalf("exchange without an actor: %v", err)
	}
	if c := claims(t, srv.ExchangeJWKSURL(), srv.ExchangeIssuer(), resp.AccessToken); c["act"] != nil || c["sub"] != "alice" {
		t.Errorf("claims without an actor = %v", c)
	}

	// The audience parameter works as resource does.
	te, err := tokenexchange.NewTokenExchangerClientCredentials(ctx, srv.ExchangeIssuer(), "gateway", exchangeSecret)
	if err != nil {
		t.Fatal(err)
	}
	byAudience, err := tokenexchange.ExchangeToken(ctx, te, user.AccessToken, oidc.AccessTokenType, "", "", nil, []string{upstreamResource}, nil, "")
	if err != nil {
		t.Fatalf("exchange with audience: %v", err)
	}
	if c := claims(t, srv.ExchangeJWKSURL(), srv.ExchangeIssuer(), byAudience.AccessToken); !equal(audience(c), []string{upstreamResource}) {
		t.Errorf("aud = %v, want [%s]", audience(c), upstreamResource)
	}

	// A resource allowed after the start.
	const late = "https://late.example.com/mcp"
	if _, err := exchange(ctx, srv, "gateway", exchangeSecret, user.AccessToken, "", []string{late}); err == nil || !strings.Contains(err.Error(), "invalid_target") {
		t.Errorf("exchange for a resource not allowed yet: %v, want invalid_target", err)
	}
	if err := srv.AllowResources(late); err != nil {
		t.Fatal(err)
	}
	if err := srv.AllowResources("not a url"); err == nil {
		t.Error("AllowResources(not a url): no error")
	}
	if resp, err := exchange(ctx, srv, "gateway", exchangeSecret, user.AccessToken, "", []string{late}); err != nil {
		t.Errorf("exchange for a resource allowed later: %v", err)
	} else if c := claims(t, srv.ExchangeJWKSURL(), srv.ExchangeIssuer(), resp.AccessToken); !equal(audience(c), []string{late}) {
		t.Errorf("aud = %v, want [%s]", audience(c), late)
	}

	exchanged := resp.AccessToken // issued by the exchange server itself: neither a subject nor an actor
	forger := newActorKey(t, "hydra")
	forged := forger.sign(t, map[string]any{"iss": srv.Issuer(), "sub": "alice", "jti": "x"})
	unsigned := strings.Join(strings.Split(user.AccessToken, ".")[:2], ".") + "."
	noneHeader := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + strings.Split(user.AccessToken, ".")[1] + "."
	refusals := []struct {
		name, id, secret, subject, actor string
		resource                         []string
		want                             string
		actorType                        oidc.TokenType
	}{
		{"the exchange server's token as subject", "gateway", exchangeSecret, exchanged, actor, []string{upstreamResource}, "not an access token of", ""},
		{"the exchange server's token as actor", "gateway", exchangeSecret, user.AccessToken, exchanged, []string{upstreamResource}, "actor_token: not signed by a trusted key", oidc.AccessTokenType},
		{"forged subject token", "gateway", exchangeSecret, forged, actor, []string{upstreamResource}, "subject_token is invalid", ""},
		{"unsigned subject token", "gateway", exchangeSecret, unsigned, actor, []string{upstreamResource}, "subject_token is invalid", ""},
		{"alg none subject token", "gateway", exchangeSecret, noneHeader, actor, []string{upstreamResource}, "subject_token is invalid", ""},
		{"an actor token as subject", "gateway", exchangeSecret, actor, "", []string{upstreamResource}, "subject_token is invalid", ""},
		{"untrusted actor", "gateway", exchangeSecret, user.AccessToken, stranger.sign(t, map[string]any{"sub": "agent:writer"}), []string{upstreamResource}, "actor_token is invalid", ""},
		{"expired actor", "gateway", exchangeSecret, user.AccessToken, agentd.sign(t, map[string]any{"sub": "agent:writer", "exp": time.Now().Add(-time.Hour).Unix()}), []string{upstreamResource}, "actor_token is invalid", ""},
		{"unknown client", "nobody", exchangeSecret, user.AccessToken, actor, []string{upstreamResource}, "invalid_client", ""},
		{"wrong secret", "gateway", "wrong-secret", user.AccessToken, actor, []string{upstreamResource}, "invalid_client", ""},
		{"audience not allowed", "gateway", exchangeSecret, user.AccessToken, actor, []string{"https://evil.example.com/mcp"}, "invalid_target", ""},
		{"no audience", "gateway", exchangeSecret, user.AccessToken, actor, nil, "invalid_target", ""},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			actorType := tc.actorType
			if actorType == "" && tc.actor != "" {
				actorType = oidc.JWTTokenType
			}
			resp, err := exchangeTyped(ctx, srv, tc.id, tc.secret, tc.subject, tc.actor, actorType, tc.resource)
			if err == nil {
				t.Fatalf("a %s was issued, want a refusal", resp.IssuedTokenType)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}

	t.Run("expired subject token", func(t *testing.T) {
		srv.SetExchangeClock(func() time.Time { return time.Now().Add(2 * time.Hour) })
		defer srv.SetExchangeClock(time.Now)
		actor := agentd.sign(t, map[string]any{"sub": "agent:writer", "exp": time.Now().Add(3 * time.Hour).Unix()})
		if _, err := exchange(ctx, srv, "gateway", exchangeSecret, user.AccessToken, actor, []string{upstreamResource}); err == nil ||
			!strings.Contains(err.Error(), "subject_token is invalid") {
			t.Errorf("err = %v, want subject_token is invalid", err)
		}
		if !logged(logs.String(), "subject token refused", `\"exp\" not satisfied`) {
			t.Errorf("the refusal's reason is not logged as an expired token:\n%s", logs.String())
		}
	})

	for _, secret := range []string{user.AccessToken, actor, exchangeSecret, app.Secret} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the servers' output holds a token or secret: %.20s…", secret)
		}
	}
}

func equal(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}

// logged reports whether a line of logs holds every one of parts.
func logged(logs string, parts ...string) bool {
	for _, line := range strings.Split(logs, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
