package identity

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/lush-agents/lush/internal/principal"
	"github.com/lush-agents/lush/internal/toolref"
)

// Delegation is what a delegation token asserts: agentd lets Agent act for Principal, reached
// through Chain. The token carries the principal's own groups, so an agent acting for a caller
// never holds more than the caller does.
//
// Delegation tokens are signed by agentd (Ed25519, alg EdDSA, typ "lush-delegation+jwt") and
// verified by the gateway. Claims: iss "lush-agentd", aud, sub (principal id), groups, agent,
// chain, hops (when not 0), iat, nbf, exp, jti.
type Delegation struct {
	Principal string
	Groups    []string
	Agent     string
	Chain     []string // must end with Agent
	Hops      int      // agent calls before Chain's first that Lush was told of (Caller.Hops), 0..64
	TTL       time.Duration
	// Subject is the caller's OAuth access token, remembered by the signer's SubjectTokens (if
	// any) under the token's id; never part of the token.
	Subject SubjectToken
}

// maxChain bounds a delegation chain (the policy's max_call_depth is far smaller).
const maxChain = 64

// Signer signs delegation tokens with agentd's private key. It is safe for concurrent use.
type Signer struct {
	key      ed25519.PrivateKey
	kid      string
	audience string
	now      func() time.Time
	subjects *SubjectTokens // KeepSubjectTokens
}

// NewSigner returns a signer for tokens to audience ("" means DefaultDelegationAudience). A key
// that is not an Ed25519 private key makes Sign fail.
func NewSigner(key ed25519.PrivateKey, audience string) *Signer {
	if audience == "" {
		audience = DefaultDelegationAudience
	}
	s := &Signer{key: key, audience: audience, now: time.Now}
	if len(key) == ed25519.PrivateKeySize {
		s.kid, _ = KeyIDOf(key.Public().(ed25519.PublicKey))
	}
	return s
}

// KeyID is the key id (the RFC 7638 JWK thumbprint of the public key) tokens carry in kid.
func (s *Signer) KeyID() string { return s.kid }

type delegationClaims struct {
	Iss    string   `json:"iss"`
	Aud    string   `json:"aud"`
	Sub    string   `json:"sub"`
	Groups []string `json:"groups"`
	Agent  string   `json:"agent"`
	Chain  []string `json:"chain"`
	Hops   int      `json:"hops,omitempty"`
	Iat    int64    `json:"iat"`
	Nbf    int64    `json:"nbf"`
	Exp    int64    `json:"exp"`
	Jti    string   `json:"jti"`
}

// Sign returns a compact delegation token. It refuses an invalid principal, group, agent or
// chain, and a TTL that is not positive or is longer than MaxDelegationTTL.
func (s *Signer) Sign(d Delegation) (string, error) {
	if len(s.key) != ed25519.PrivateKeySize || s.kid == "" {
		return "", errors.New("sign delegation: the signer's key is not an Ed25519 private key")
	}
	if err := checkDelegation(d.Principal, d.Groups, d.Agent, d.Chain); err != nil {
		return "", fmt.Errorf("sign delegation: %w", err)
	}
	if d.Hops < 0 || d.Hops > maxChain {
		return "", fmt.Errorf("sign delegation: hops %d: must be 0 to %d", d.Hops, maxChain)
	}
	switch {
	case d.TTL < time.Second:
		return "", fmt.Errorf("sign delegation: TTL %s: must be at least 1s", d.TTL)
	case d.TTL > MaxDelegationTTL:
		return "", fmt.Errorf("sign delegation: TTL %s is more than the maximum %s: delegation tokens are short-lived", d.TTL, MaxDelegationTTL)
	}
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", fmt.Errorf("sign delegation: token id: %w", err)
	}
	now := s.now().Unix()
	if d.Subject.Set() && s.subjects != nil {
		s.subjects.remember(base64.RawURLEncoding.EncodeToString(jti[:]), d.Subject, s.now().Add(d.TTL))
	}
	payload, err := json.Marshal(delegationClaims{
		Iss: DelegationIssuer, Aud: s.audience, Sub: d.Principal, Groups: normGroups(d.Groups),
		Agent: d.Agent, Chain: d.Chain, Hops: d.Hops, Iat: now, Nbf: now, Exp: now + int64(d.TTL/time.Second),
		Jti: base64.RawURLEncoding.EncodeToString(jti[:]),
	})
	if err != nil {
		return "", fmt.Errorf("sign delegation: %w", err)
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.TypeKey, DelegationType); err != nil {
		return "", fmt.Errorf("sign delegation: %w", err)
	}
	if err := hdr.Set(jws.KeyIDKey, s.kid); err != nil {
		return "", fmt.Errorf("sign delegation: %w", err)
	}
	tok, err := jws.Sign(payload, jws.WithKey(jwa.EdDSA(), s.key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", fmt.Errorf("sign delegation: %w", err)
	}
	return string(tok), nil
}

// checkDelegation checks the identity a delegation token asserts.
func checkDelegation(sub string, groups []string, agent string, chain []string) error {
	if _, err := principal.Parse(sub); err != nil {
		return fmt.Errorf("principal: %w", err)
	}
	if len(groups) > maxGroups {
		return fmt.Errorf("more than %d groups", maxGroups)
	}
	for _, g := range groups {
		if err := checkGroup(g); err != nil {
			return fmt.Errorf("groups: %w", err)
		}
	}
	if !toolref.ValidAgentName(agent) {
		return fmt.Errorf("agent %s is not an agent name (lower-case letters, digits and '-', starting with a letter)", shown(agent))
	}
	switch {
	case len(chain) == 0:
		return errors.New("the chain is empty: it lists the agents from the outermost caller to the agent, inclusive")
	case len(chain) > maxChain:
		return fmt.Errorf("the chain has %d agents, more than %d", len(chain), maxChain)
	case chain[len(chain)-1] != agent:
		return fmt.Errorf("the chain ends with %s, not with the agent %s", shown(chain[len(chain)-1]), shown(agent))
	}
	for i, c := range chain {
		if !toolref.ValidAgentName(c) {
			return fmt.Errorf("chain element %d, %s, is not an agent name", i, shown(c))
		}
	}
	return nil
}

// KeyIDOf is the RFC 7638 thumbprint (SHA-256, base64url) of an Ed25519 public key: the kid of
// the tokens its private half signs (delegation tokens, and the actor tokens of token exchange).
func KeyIDOf(pub ed25519.PublicKey) (string, error) {
	k, err := jwk.Import(pub)
	if err != nil {
		return "", err
	}
	tp, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

// Names of the files GenerateKey writes.
const (
	PrivateKeyFile = "delegation.key"
	PublicKeyFile  = "delegation.pub"
)

// GenerateKey creates an Ed25519 key pair for signing delegation tokens and writes it to dir
// (created 0700 if missing) as PEM: the private key (PKCS #8, mode 0600) in delegation.key and
// the public key (PKIX, mode 0644) in delegation.pub. It never overwrites existing files.
func GenerateKey(dir string) (privPath, pubPath string, err error) {
	return GenerateKeyPair(dir, PrivateKeyFile, PublicKeyFile)
}

// GenerateKeyPair creates an Ed25519 key pair as GenerateKey does, in the files privName and
// pubName of dir (for other signers: the actor tokens of token exchange).
func GenerateKeyPair(dir, privName, pubName string) (privPath, pubPath string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generate key %s: %w", privName, err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", "", fmt.Errorf("generate key %s: %w", privName, err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", "", fmt.Errorf("generate key %s: %w", privName, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("generate key %s: %w", privName, err)
	}
	privPath, pubPath = filepath.Join(dir, privName), filepath.Join(dir, pubName)
	for _, p := range []string{privPath, pubPath} {
		if _, err := os.Lstat(p); err == nil {
			return "", "", fmt.Errorf("generate key: %s exists: keys are never overwritten; move the old pair away or choose another directory", p)
		}
	}
	if err := writeNew(privPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600); err != nil {
		return "", "", fmt.Errorf("generate key %s: %w", privName, err)
	}
	if err := writeNew(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		os.Remove(privPath)
		return "", "", fmt.Errorf("generate key %s: %w", privName, err)
	}
	return privPath, pubPath, nil
}

// writeNew creates path (failing if it exists) with perm and writes data.
func writeNew(path string, data []byte, perm fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil { // the umask may have removed bits; never added any
		f.Close()
		os.Remove(path)
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// LoadPrivateKey reads an Ed25519 private key (PEM, PKCS #8) written by GenerateKey or
// GenerateKeyPair: a delegation key, or the actor key of token exchange. It refuses a file that
// its group or other users can read.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load Ed25519 key: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("load Ed25519 key: %s is not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("load Ed25519 key: %s is accessible to its group or other users (mode %04o): run chmod 600 %s", path, perm, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load Ed25519 key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("load Ed25519 key: %s holds no PEM \"PRIVATE KEY\" block (PKCS #8)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("load Ed25519 key: %s: the PKCS #8 key does not parse", path)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("load Ed25519 key: %s holds a %T, not an Ed25519 key", path, k)
	}
	return priv, nil
}

// loadPublicKey reads an Ed25519 public key (PEM, PKIX).
func loadPublicKey(path string) (ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	switch {
	case block == nil:
		return nil, fmt.Errorf("%s holds no PEM block: give the PUBLIC KEY file agentd's key pair came with", path)
	case block.Type != "PUBLIC KEY":
		return nil, fmt.Errorf("%s holds a %q block, not a PUBLIC KEY: give the gateway the public key only", path, block.Type)
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: the public key does not parse", path)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s holds a %T, not an Ed25519 key", path, k)
	}
	return pub, nil
}

// delegationVerifier verifies delegation tokens.
type delegationVerifier struct {
	keys     map[string]ed25519.PublicKey // by key id
	maxTTL   time.Duration
	audience string
}

func newDelegationVerifier(c DelegationConfig) (*delegationVerifier, error) {
	v := &delegationVerifier{keys: map[string]ed25519.PublicKey{}, maxTTL: c.MaxTTL, audience: c.Audience}
	if v.maxTTL == 0 {
		v.maxTTL = DefaultDelegationMaxTTL
	}
	if v.audience == "" {
		v.audience = DefaultDelegationAudience
	}
	for i, p := range c.PublicKeys {
		f := fmt.Sprintf("auth.delegation.public_keys[%d]", i)
		pub, err := loadPublicKey(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		kid, err := KeyIDOf(pub)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if _, dup := v.keys[kid]; dup {
			return nil, fmt.Errorf("%s: %s holds a key already listed", f, p)
		}
		v.keys[kid] = pub
	}
	for i, pub := range c.Keys {
		kid, err := KeyIDOf(pub)
		if err != nil {
			return nil, fmt.Errorf("auth.delegation.keys[%d]: %w", i, err)
		}
		v.keys[kid] = pub
	}
	return v, nil
}

func (v *delegationVerifier) verify(tok string, parts []string, hdr joseHeader, now time.Time) (Caller, *Error) {
	switch {
	case hdr.bad != "":
		return Caller{}, fail(CodeInvalidToken, "delegation token: %s", hdr.bad)
	case hdr.Alg != "EdDSA":
		return Caller{}, fail(CodeInvalidToken, "delegation tokens are signed with EdDSA, not %s", shown(hdr.Alg))
	case hdr.Kid == "":
		return Caller{}, fail(CodeInvalidToken, "the delegation token has no kid: agentd names its key in every token")
	}
	pub, ok := v.keys[hdr.Kid]
	if !ok {
		return Caller{}, fail(CodeInvalidToken, "the delegation token is signed by key %s, which is not in auth.delegation.public_keys: add agentd's public key", shown(hdr.Kid))
	}
	verified, err := jws.VerifyCompactFast(pub, []byte(tok), jwa.EdDSA())
	if err != nil {
		return Caller{}, fail(CodeInvalidToken, "the delegation token's signature does not verify with key %s: it was altered or signed by another key", shown(hdr.Kid))
	}
	payload, err := b64(parts[1])
	if err != nil || string(payload) != string(verified) {
		return Caller{}, fail(CodeInvalidToken, "the delegation token's payload is not canonical base64url")
	}
	cl, err := decodeObject(payload)
	if err != nil {
		return Caller{}, fail(CodeInvalidToken, "the delegation token's payload is not a JSON object: %v", err)
	}
	if iss, _, _ := cl.str("iss"); iss != DelegationIssuer {
		return Caller{}, fail(CodeInvalidToken, "the delegation token's iss is not %s", DelegationIssuer)
	}
	exp, iat, e := checkTimes(cl, now, DefaultLeeway, "delegation token")
	if e != nil {
		return Caller{}, e
	}
	switch {
	case iat.IsZero():
		return Caller{}, fail(CodeInvalidToken, "the delegation token has no iat claim")
	case exp.Sub(iat) > v.maxTTL:
		return Caller{}, fail(CodeInvalidToken, "the delegation token lives %s, longer than auth.delegation.max_ttl (%s): agentd must issue shorter-lived tokens", exp.Sub(iat), v.maxTTL)
	case !exp.After(iat):
		return Caller{}, fail(CodeInvalidToken, "the delegation token expires before it was issued")
	}
	aud, _, err := cl.audience()
	if err != nil || !slices.Contains(aud, v.audience) {
		return Caller{}, fail(CodeInvalidToken, "the delegation token is not for audience %s: agentd must sign tokens for auth.delegation.audience", shown(v.audience))
	}
	sub, _, err1 := cl.str("sub")
	agent, _, err2 := cl.str("agent")
	chain, _, err3 := cl.strs("chain")
	groups, hasGroups, err4 := cl.strs("groups")
	jti, _, err5 := cl.str("jti")
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return Caller{}, fail(CodeInvalidToken, "the delegation token's %v", err)
	}
	if !hasGroups {
		groups = nil
	}
	if err := checkDelegation(sub, groups, agent, chain); err != nil {
		return Caller{}, fail(CodeInvalidToken, "the delegation token: %v", err)
	}
	if jti == "" || len(jti) > 128 {
		return Caller{}, fail(CodeInvalidToken, "the delegation token has no valid jti")
	}
	hops := 0
	if raw, ok := cl["hops"]; ok {
		if err := json.Unmarshal(raw, &hops); err != nil || hops < 0 || hops > maxChain {
			return Caller{}, fail(CodeInvalidToken, "the delegation token's hops is not a whole number from 0 to %d", maxChain)
		}
	}
	return Caller{
		ID: sub, Groups: normGroups(groups), Method: MethodDelegation, Subject: sub,
		Agent: agent, Chain: slices.Clone(chain), TokenID: jti, Hops: hops,
	}, nil
}
