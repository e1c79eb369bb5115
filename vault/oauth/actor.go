package oauth

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/lush-agents/lush/internal/identity"
)

// ActorTokenTTL is how long an actor token is valid: it is used at once, in one exchange.
const ActorTokenTTL = time.Minute

// AgentPrefix makes an agent name a subject of actor tokens and act claims: agent:<name>.
const AgentPrefix = "agent:"

// actorSigner signs actor tokens (RFC 8693 section 2.1): a JWT whose sub is the agent that
// calls, with the agents it acts for nested in act claims (outermost caller deepest), so an
// authorization server that copies the actor token's identity into the issued token's act claim
// shows the whole chain.
type actorSigner struct {
	key      ed25519.PrivateKey
	kid      string
	issuer   string
	audience string
}

func newActorSigner(path, issuer, audience string) (*actorSigner, error) {
	key, err := identity.LoadPrivateKey(path)
	if err != nil {
		return nil, err
	}
	kid, err := identity.KeyIDOf(key.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, err
	}
	return &actorSigner{key: key, kid: kid, issuer: issuer, audience: audience}, nil
}

// act is a nested act claim.
type act struct {
	Sub string `json:"sub"`
	Act *act   `json:"act,omitempty"`
}

// nest builds the act claim of chain (outermost first) minus its last agent: the agent before
// the last acts first, and so on outwards.
func nest(chain []string) *act {
	var a *act
	for _, name := range chain {
		a = &act{Sub: AgentPrefix + name, Act: a}
	}
	return a
}

func (s *actorSigner) sign(chain []string, now time.Time) (string, error) {
	if len(chain) == 0 {
		return "", errors.New("no agent to name")
	}
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", err
	}
	claims := map[string]any{
		"iss": s.issuer, "aud": s.audience, "sub": AgentPrefix + chain[len(chain)-1],
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ActorTokenTTL).Unix(),
		"jti": base64.RawURLEncoding.EncodeToString(jti[:]),
	}
	if a := nest(chain[:len(chain)-1]); a != nil {
		claims["act"] = a
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.KeyIDKey, s.kid); err != nil {
		return "", err
	}
	if err := hdr.Set(jws.TypeKey, "JWT"); err != nil {
		return "", err
	}
	tok, err := jws.Sign(payload, jws.WithKey(jwa.EdDSA(), s.key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", err
	}
	return string(tok), nil
}

// actChain is the act chain a token exchanged for chain carries, outermost actor first.
func actChain(chain []string) []string {
	var out []string
	for _, name := range slices.Backward(chain) {
		out = append(out, AgentPrefix+name)
	}
	return out
}

// actClaim reads the act claim of an issued JWT access token, for the record of how the
// credential was obtained (the token is not verified here: the upstream does that). Nil when
// the token is not a JWT or has no act claim.
func actClaim(tok string) []string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || len(parts[1]) > 64<<10 {
		return nil
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	var cl struct {
		Act *act `json:"act"`
	}
	if json.Unmarshal(payload, &cl) != nil {
		return nil
	}
	var out []string
	for a := cl.Act; a != nil && len(out) < 32; a = a.Act {
		out = append(out, a.Sub)
	}
	return out
}

// ActorJWKS returns the public half of the actor key in keyFile as a JWK set (kid = the key's RFC
// 7638 thumbprint, as actor tokens name it): what the authorization server that exchanges tokens
// must trust for actor tokens. `lushctl auth actor-key` prints it.
func ActorJWKS(keyFile string) (jwks []byte, kid string, err error) {
	priv, err := identity.LoadPrivateKey(keyFile)
	if err != nil {
		return nil, "", fmt.Errorf("actor key: %w", err)
	}
	k, err := jwk.Import(priv.Public())
	if err != nil {
		return nil, "", fmt.Errorf("actor key: %w", err)
	}
	if kid, err = identity.KeyIDOf(priv.Public().(ed25519.PublicKey)); err != nil {
		return nil, "", fmt.Errorf("actor key: %w", err)
	}
	if err := errors.Join(k.Set(jwk.KeyIDKey, kid), k.Set(jwk.AlgorithmKey, jwa.EdDSA()), k.Set(jwk.KeyUsageKey, "sig")); err != nil {
		return nil, "", fmt.Errorf("actor key: %w", err)
	}
	set := jwk.NewSet()
	if err := set.AddKey(k); err != nil {
		return nil, "", fmt.Errorf("actor key: %w", err)
	}
	jwks, err = json.MarshalIndent(set, "", "  ")
	if err != nil {
		return nil, "", fmt.Errorf("actor key: %w", err)
	}
	return append(jwks, '\n'), kid, nil
}
