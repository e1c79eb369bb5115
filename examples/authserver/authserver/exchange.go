package authserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The token-exchange server: zitadel/oidc's OP with a storage that knows only the configured
// clients, verifies subject tokens with Hydra's keys and actor tokens with the trusted keys, and
// issues JWT access tokens (see the package comment). The OP implements the grant; this file only
// answers its storage questions.

type exchangeOptions struct {
	cfg         ExchangeConfig
	allowed     *resourceList
	ttl         time.Duration
	hydraIssuer string
	hydraJWKS   string // Hydra's own public port (not through the front)
	logger      *slog.Logger
}

type exchangeServer struct {
	url     string
	srv     *http.Server
	ln      net.Listener
	storage *exchangeStorage
	served  chan struct{} // closed when Serve has returned
}

// maxActDepth bounds how deep an actor token's act chain may nest.
const maxActDepth = 16

// Prefixes of the token ids the verifiers return, so ValidateTokenExchangeRequest knows which
// verifier accepted a token (the OP also accepts tokens it issued itself).
const (
	hydraTokenPrefix = "hydra:"
	actorTokenPrefix = "actor:"
)

func startExchange(ctx context.Context, o exchangeOptions) (*exchangeServer, error) {
	var static jwk.Set
	if len(o.cfg.TrustedActorKeys) > 0 {
		set, err := jwk.Parse(o.cfg.TrustedActorKeys)
		if err != nil {
			return nil, fmt.Errorf("authserver: Exchange.TrustedActorKeys: not a JWK set: %w", err)
		}
		for i := range set.Len() {
			k, _ := set.Key(i)
			if isPrivate(k) {
				return nil, fmt.Errorf("authserver: Exchange.TrustedActorKeys: key %d is a private key: give only public keys", i)
			}
		}
		static = set
	}
	if o.cfg.TrustedActorJWKSURL != "" {
		if u, err := url.Parse(o.cfg.TrustedActorJWKSURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("authserver: Exchange.TrustedActorJWKSURL %q is not an http(s) URL", o.cfg.TrustedActorJWKSURL)
		}
	}
	ln, err := listen()
	if err != nil {
		return nil, fmt.Errorf("start the exchange server: %w", err)
	}
	issuer := "http://" + ln.Addr().String()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("start the exchange server: signing key: %w", err)
	}
	kid, err := randomHex(8)
	if err != nil {
		ln.Close()
		return nil, err
	}
	st := &exchangeStorage{
		opts:      o,
		clients:   map[string]ExchangeClient{},
		key:       key,
		kid:       kid,
		actorKeys: static,
		http:      &http.Client{Timeout: 10 * time.Second},
	}
	for _, c := range o.cfg.Clients {
		st.clients[c.ID] = c
	}
	var cryptoKey [32]byte
	if _, err := rand.Read(cryptoKey[:]); err != nil {
		ln.Close()
		return nil, fmt.Errorf("start the exchange server: %w", err)
	}
	provider, err := op.NewProvider(&op.Config{CryptoKey: cryptoKey, SupportedScopes: []string{"openid"}},
		st, op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("start the exchange server: %w", err)
	}
	var handler http.Handler = provider
	mux := http.NewServeMux()
	mux.Handle("/", handler)
	mux.HandleFunc("POST /oauth/token", func(w http.ResponseWriter, r *http.Request) {
		if err := resourceToAudienceValues(r); err != nil {
			writeOAuthError(w, http.StatusBadRequest, "invalid_request", err.Error())
			return
		}
		handler.ServeHTTP(w, r)
	})
	e := &exchangeServer{
		url:     issuer,
		srv:     &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:      ln,
		storage: st,
		served:  make(chan struct{}),
	}
	go func() {
		defer close(e.served)
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.logger.Error("authserver: exchange server", "err", err)
		}
	}()
	return e, nil
}

func (e *exchangeServer) close(ctx context.Context) error {
	err := e.srv.Shutdown(ctx)
	if err != nil {
		_ = e.srv.Close()
		err = fmt.Errorf("stop the exchange server: %w", err)
	}
	<-e.served
	return err
}

// isPrivate reports whether k holds private key material.
func isPrivate(k jwk.Key) bool {
	for _, name := range []string{"d", "p", "q", "k"} {
		if k.Has(name) {
			return true
		}
	}
	return false
}

// resourceToAudienceValues adds each RFC 8707 resource parameter of a token request as an
// audience value, the parameter zitadel's OP puts in the token's aud.
func resourceToAudienceValues(r *http.Request) error {
	body, err := readBounded(r.Body)
	if err != nil {
		return fmt.Errorf("token request body: %w", err)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return fmt.Errorf("token request body: not a form: %w", err)
	}
	if resources := form["resource"]; len(resources) > 0 {
		for _, res := range resources {
			if !slices.Contains(form["audience"], res) {
				form.Add("audience", res)
			}
		}
		body = []byte(form.Encode())
	}
	setBody(r, body)
	return nil
}

// exchangeStorage is the OP's storage: op.Storage, op.TokenExchangeStorage and
// op.TokenExchangeTokensVerifierStorage. Only token exchange is served; the other grants and
// endpoints answer that they are not supported.
type exchangeStorage struct {
	opts      exchangeOptions
	clients   map[string]ExchangeClient
	key       *ecdsa.PrivateKey
	kid       string
	actorKeys jwk.Set // nil without TrustedActorKeys
	http      *http.Client
	clock     atomic.Pointer[func() time.Time] // nil: time.Now (tests move it)
}

// now is the time tokens are checked against.
func (s *exchangeStorage) now() time.Time {
	if f := s.clock.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

var (
	_ op.Storage                            = (*exchangeStorage)(nil)
	_ op.TokenExchangeStorage               = (*exchangeStorage)(nil)
	_ op.TokenExchangeTokensVerifierStorage = (*exchangeStorage)(nil)
)

var errNotSupported = errors.New("not supported by the token-exchange server")

// --- clients

func (s *exchangeStorage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	c, ok := s.clients[id]
	if !ok {
		return nil, fmt.Errorf("client %q is not configured", id)
	}
	return &exchangeClient{id: c.ID, ttl: s.opts.ttl}, nil
}

func (s *exchangeStorage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	c, ok := s.clients[id]
	if !ok || subtle.ConstantTimeCompare([]byte(c.Secret), []byte(secret)) != 1 {
		return errors.New("unknown client or wrong secret")
	}
	return nil
}

// --- token exchange

func (s *exchangeStorage) ValidateTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) error {
	switch req.GetRequestedTokenType() {
	case "":
		req.SetRequestedTokenType(oidc.AccessTokenType)
	case oidc.AccessTokenType:
	default:
		return oidc.ErrInvalidRequest().WithDescription("requested_token_type: only %s is issued", oidc.AccessTokenType)
	}
	if !strings.HasPrefix(req.GetExchangeSubjectTokenIDOrToken(), hydraTokenPrefix) {
		return oidc.ErrInvalidRequest().WithDescription("subject_token: not an access token of %s", s.opts.hydraIssuer)
	}
	if req.GetExchangeActorTokenType() != "" && !strings.HasPrefix(req.GetExchangeActorTokenIDOrToken(), actorTokenPrefix) {
		return oidc.ErrInvalidRequest().WithDescription("actor_token: not signed by a trusted key")
	}
	aud := req.GetAudience()
	if len(aud) == 0 {
		return oidc.ErrInvalidTarget().WithDescription("audience or resource: name the resource the token is for")
	}
	for _, a := range aud {
		if !s.opts.allowed.contains(a) {
			return oidc.ErrInvalidTarget().WithDescription("audience %q is not an allowed resource", a)
		}
	}
	return nil
}

func (s *exchangeStorage) CreateTokenExchangeRequest(context.Context, op.TokenExchangeRequest) error {
	return nil
}

func (s *exchangeStorage) GetPrivateClaimsFromTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) (map[string]any, error) {
	claims := map[string]any{}
	sub := req.GetExchangeSubjectTokenClaims()
	for _, k := range []string{"email", "groups"} {
		if v, ok := sub[k]; ok {
			claims[k] = v
		}
	}
	if actor := req.GetExchangeActorTokenClaims(); actor != nil {
		act := map[string]any{"sub": req.GetExchangeActor()}
		if nested, ok := actor["act"]; ok {
			act["act"] = nested
		}
		claims["act"] = act
	}
	return claims, nil
}

func (s *exchangeStorage) SetUserinfoFromTokenExchangeRequest(_ context.Context, info *oidc.UserInfo, req op.TokenExchangeRequest) error {
	info.Subject = req.GetSubject()
	if email, ok := req.GetExchangeSubjectTokenClaims()["email"].(string); ok {
		info.Email = email
	}
	return nil
}

// VerifyExchangeSubjectToken accepts a JWT access token of the Hydra issuer, verified with
// Hydra's JWKS, unexpired. The OP answers only "subject_token is invalid", so the reason is
// logged (never the token).
func (s *exchangeStorage) VerifyExchangeSubjectToken(ctx context.Context, token string, tokenType oidc.TokenType) (string, string, map[string]any, error) {
	id, sub, claims, err := s.verifySubject(ctx, token, tokenType)
	if err != nil {
		s.opts.logger.Info("authserver: exchange: subject token refused", "err", err)
	}
	return id, sub, claims, err
}

func (s *exchangeStorage) verifySubject(ctx context.Context, token string, tokenType oidc.TokenType) (string, string, map[string]any, error) {
	if tokenType != oidc.AccessTokenType && tokenType != oidc.JWTTokenType {
		return "", "", nil, fmt.Errorf("subject_token_type %s: want an access token or a JWT", tokenType)
	}
	set, err := jwk.Fetch(ctx, s.opts.hydraJWKS, jwk.WithHTTPClient(s.http))
	if err != nil {
		return "", "", nil, fmt.Errorf("fetch the Hydra issuer's keys: %w", err)
	}
	claims, err := verifyJWT(token, set, jwt.WithIssuer(s.opts.hydraIssuer), jwt.WithClock(jwt.ClockFunc(s.now)))
	if err != nil {
		return "", "", nil, fmt.Errorf("subject token: %w", err)
	}
	sub, _ := claims["sub"].(string)
	jti, _ := claims["jti"].(string)
	if sub == "" {
		return "", "", nil, errors.New("subject token: no sub")
	}
	return hydraTokenPrefix + jti, sub, claims, nil
}

// VerifyExchangeActorToken accepts a JWT signed by a trusted actor key, unexpired, with a sub and
// an act chain no deeper than maxActDepth. The reason of a refusal is logged.
func (s *exchangeStorage) VerifyExchangeActorToken(ctx context.Context, token string, tokenType oidc.TokenType) (string, string, map[string]any, error) {
	id, sub, claims, err := s.verifyActor(ctx, token, tokenType)
	if err != nil {
		s.opts.logger.Info("authserver: exchange: actor token refused", "err", err)
	}
	return id, sub, claims, err
}

func (s *exchangeStorage) verifyActor(ctx context.Context, token string, tokenType oidc.TokenType) (string, string, map[string]any, error) {
	if tokenType != oidc.AccessTokenType && tokenType != oidc.JWTTokenType {
		return "", "", nil, fmt.Errorf("actor_token_type %s: want an access token or a JWT", tokenType)
	}
	set := jwk.NewSet()
	if s.actorKeys != nil {
		set = s.actorKeys
	}
	if s.opts.cfg.TrustedActorJWKSURL != "" {
		remote, err := jwk.Fetch(ctx, s.opts.cfg.TrustedActorJWKSURL, jwk.WithHTTPClient(s.http))
		if err != nil {
			return "", "", nil, fmt.Errorf("fetch the trusted actor keys: %w", err)
		}
		if s.actorKeys != nil {
			merged := jwk.NewSet()
			for _, from := range []jwk.Set{s.actorKeys, remote} {
				for i := range from.Len() {
					k, _ := from.Key(i)
					_ = merged.AddKey(k)
				}
			}
			remote = merged
		}
		set = remote
	}
	if set.Len() == 0 {
		return "", "", nil, errors.New("actor token: no trusted actor keys are configured")
	}
	claims, err := verifyJWT(token, set, jwt.WithClock(jwt.ClockFunc(s.now)))
	if err != nil {
		return "", "", nil, fmt.Errorf("actor token: %w", err)
	}
	sub, _ := claims["sub"].(string)
	if sub == "" {
		return "", "", nil, errors.New("actor token: no sub")
	}
	if d := actDepth(claims["act"]); d > maxActDepth {
		return "", "", nil, fmt.Errorf("actor token: act nests deeper than %d", maxActDepth)
	}
	jti, _ := claims["jti"].(string)
	return actorTokenPrefix + jti, sub, claims, nil
}

// verifyJWT verifies token's signature with set and its time claims (exp required), and returns
// its claims.
func verifyJWT(token string, set jwk.Set, opts ...jwt.ParseOption) (map[string]any, error) {
	if len(token) > 16<<10 {
		return nil, errors.New("longer than 16 KiB")
	}
	opts = append(opts,
		jwt.WithKeySet(set, jws.WithInferAlgorithmFromKey(true), jws.WithRequireKid(false)),
		jwt.WithValidate(true), jwt.WithRequiredClaim("exp"), jwt.WithAcceptableSkew(5*time.Second))
	tok, err := jwt.Parse([]byte(token), opts...)
	if err != nil {
		return nil, err
	}
	claims := map[string]any{}
	for _, k := range tok.Keys() {
		var v any
		if err := tok.Get(k, &v); err != nil {
			return nil, fmt.Errorf("claim %s: %w", k, err)
		}
		claims[k] = v
	}
	return claims, nil
}

// actDepth is how many act claims nest in act.
func actDepth(act any) int {
	d := 0
	for act != nil && d <= maxActDepth {
		m, ok := act.(map[string]any)
		if !ok {
			return d + 1
		}
		d++
		act = m["act"]
	}
	return d
}

// --- tokens

func (s *exchangeStorage) CreateAccessToken(context.Context, op.TokenRequest) (string, time.Time, error) {
	id, err := randomHex(16)
	if err != nil {
		return "", time.Time{}, err
	}
	return id, time.Now().Add(s.opts.ttl), nil
}

func (s *exchangeStorage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, oidc.ErrUnsupportedGrantType().WithDescription("refresh tokens are not issued")
}

func (s *exchangeStorage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}

func (s *exchangeStorage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

func (s *exchangeStorage) RevokeToken(context.Context, string, string, string) *oidc.Error {
	return oidc.ErrRequestNotSupported().WithDescription("tokens of the exchange server are not revocable")
}

func (s *exchangeStorage) TerminateSession(context.Context, string, string) error {
	return errNotSupported
}

// --- keys

type signingKey struct {
	key *ecdsa.PrivateKey
	kid string
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.ES256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.kid }

type publicKey struct{ signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.ES256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }

func (s *exchangeStorage) SigningKey(context.Context) (op.SigningKey, error) {
	return signingKey{key: s.key, kid: s.kid}, nil
}

func (s *exchangeStorage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.ES256}, nil
}

func (s *exchangeStorage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{signingKey{key: s.key, kid: s.kid}}}, nil
}

func (s *exchangeStorage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errNotSupported
}

// --- what the exchange server does not serve

func (s *exchangeStorage) CreateAuthRequest(context.Context, *oidc.AuthRequest, string) (op.AuthRequest, error) {
	return nil, oidc.ErrRequestNotSupported().WithDescription("the exchange server serves only token exchange")
}

func (s *exchangeStorage) AuthRequestByID(context.Context, string) (op.AuthRequest, error) {
	return nil, errNotSupported
}

func (s *exchangeStorage) AuthRequestByCode(context.Context, string) (op.AuthRequest, error) {
	return nil, errNotSupported
}

func (s *exchangeStorage) SaveAuthCode(context.Context, string, string) error { return errNotSupported }

func (s *exchangeStorage) DeleteAuthRequest(context.Context, string) error { return nil }

func (s *exchangeStorage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

func (s *exchangeStorage) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return errNotSupported
}

func (s *exchangeStorage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errNotSupported
}

func (s *exchangeStorage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return map[string]any{}, nil
}

func (s *exchangeStorage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errNotSupported
}

func (s *exchangeStorage) Health(context.Context) error { return nil }

// exchangeClient is a configured client as the OP sees it: client_secret_basic, token exchange
// only, JWT access tokens.
type exchangeClient struct {
	id  string
	ttl time.Duration
}

func (c *exchangeClient) GetID() string                       { return c.id }
func (c *exchangeClient) RedirectURIs() []string              { return nil }
func (c *exchangeClient) PostLogoutRedirectURIs() []string    { return nil }
func (c *exchangeClient) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *exchangeClient) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (c *exchangeClient) ResponseTypes() []oidc.ResponseType  { return nil }
func (c *exchangeClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeTokenExchange}
}
func (c *exchangeClient) LoginURL(string) string               { return "" }
func (c *exchangeClient) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *exchangeClient) IDTokenLifetime() time.Duration       { return c.ttl }
func (c *exchangeClient) DevMode() bool                        { return false }
func (c *exchangeClient) IsScopeAllowed(string) bool           { return false }
func (c *exchangeClient) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *exchangeClient) ClockSkew() time.Duration             { return 0 }
func (c *exchangeClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *exchangeClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
