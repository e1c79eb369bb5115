package identity

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/httprc/v3/errsink"
	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/lush-agents/lush/internal/principal"
)

const (
	// unknownKidRefresh is how often a token with an unknown key id may make an issuer's JWKS
	// be fetched again: an attacker sending random key ids cannot make Lush hammer the issuer.
	unknownKidRefresh = time.Minute
	// fetchTimeout bounds one JWKS fetch.
	fetchTimeout = 15 * time.Second
	// initialFetchTimeout bounds New's wait for a JWKS (also bounded by New's context).
	initialFetchTimeout = 30 * time.Second
	// minRSABits is the smallest RSA key accepted.
	minRSABits = 2048
)

// issuer verifies the JWTs of one configured issuer.
type issuer struct {
	name         string
	field        string // auth.jwt[i], for messages
	allowed      []string
	audiences    []string
	leeway       time.Duration
	subjectClaim string
	groupsClaim  string
	kind         principal.Kind

	hmac   []byte     // HS* key_file: the shared secret
	static *keyring   // key_file with public keys
	remote *remoteSet // jwks_url
}

// vkey is a public key ready to verify with.
type vkey struct {
	kid, alg, use string
	family        string // RSA, EC, OKP
	curve         string // P-256, P-384, P-521, Ed25519
	raw           any
}

// fits reports whether the key may verify a token signed with alg.
func (k vkey) fits(alg string) bool {
	if (k.use != "" && k.use != "sig") || (k.alg != "" && k.alg != alg) || knownAlgorithms[alg] != k.family {
		return false
	}
	switch alg {
	case "ES256":
		return k.curve == "P-256"
	case "ES384":
		return k.curve == "P-384"
	case "ES512":
		return k.curve == "P-521"
	case "EdDSA":
		return k.curve == "Ed25519"
	}
	return true
}

// keyring is the usable keys of one key set.
type keyring struct {
	src  jwk.Set // the set the ring was built from (nil for PEM files)
	keys []vkey
}

func (a *Authenticator) newIssuer(ctx context.Context, i int, c JWTConfig) (*issuer, error) {
	is := &issuer{
		name:         c.Issuer,
		field:        fmt.Sprintf("auth.jwt[%d]", i),
		allowed:      c.Algorithms,
		audiences:    c.Audiences,
		leeway:       c.Leeway,
		subjectClaim: c.SubjectClaim,
		groupsClaim:  c.GroupsClaim,
		kind:         principal.Kind(c.PrincipalKind),
	}
	if len(is.allowed) == 0 {
		is.allowed = defaultAlgorithms
	}
	if is.leeway == 0 {
		is.leeway = DefaultLeeway
	}
	if is.subjectClaim == "" {
		is.subjectClaim = "sub"
	}
	if is.groupsClaim == "" {
		is.groupsClaim = "groups"
	}
	if is.kind == "" {
		is.kind = principal.User
	}
	if c.KeyFile != "" {
		if knownAlgorithms[is.allowed[0]] == "HMAC" {
			secret, err := loadSecret(c.KeyFile, is.allowed)
			if err != nil {
				return nil, fmt.Errorf("%s.key_file: %w", is.field, err)
			}
			is.hmac = secret
			return is, nil
		}
		ring, err := loadKeyFile(c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s.key_file: %w", is.field, err)
		}
		if !ring.fitsAny(is.allowed) {
			return nil, fmt.Errorf("%s.key_file: %s holds no key usable with %s: %s", is.field, c.KeyFile, strings.Join(is.allowed, ", "), ring.describe())
		}
		is.static = ring
		return is, nil
	}
	refresh := c.JWKSRefresh
	if refresh == 0 {
		refresh = DefaultJWKSRefresh
	}
	if a.jwks == nil {
		f, err := newJWKSFetcher(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s.jwks_url: %w", is.field, err)
		}
		a.jwks = f
	}
	rs, err := a.jwks.register(ctx, c.JWKSURL, refresh)
	if err != nil {
		return nil, fmt.Errorf("%s.jwks_url: %w", is.field, err)
	}
	if ring := rs.current(); !ring.fitsAny(is.allowed) {
		return nil, fmt.Errorf("%s.jwks_url: the JWKS at %s has no signing key usable with %s: %s", is.field, c.JWKSURL, strings.Join(is.allowed, ", "), ring.describe())
	}
	is.remote = rs
	return is, nil
}

func (r *keyring) fitsAny(algs []string) bool {
	for _, k := range r.keys {
		for _, alg := range algs {
			if k.fits(alg) {
				return true
			}
		}
	}
	return false
}

func (r *keyring) describe() string {
	if len(r.keys) == 0 {
		return "it has no usable public keys"
	}
	var kinds []string
	for _, k := range r.keys {
		d := k.family
		if k.curve != "" {
			d += " " + k.curve
		}
		if k.alg != "" {
			d += " (alg " + k.alg + ")"
		}
		kinds = append(kinds, d)
	}
	slices.Sort(kinds)
	return "it holds " + strings.Join(slices.Compact(kinds), ", ")
}

func (is *issuer) ring() *keyring {
	if is.static != nil {
		return is.static
	}
	return is.remote.current()
}

func (is *issuer) allows(alg string) bool { return slices.Contains(is.allowed, alg) }

// verifyJWT verifies a JWT from a configured issuer and maps its claims to a Caller.
func (a *Authenticator) verifyJWT(ctx context.Context, tok string, parts []string, hdr joseHeader) (Caller, *Error) {
	payload, err := b64(parts[1])
	if err != nil {
		return Caller{}, fail(CodeInvalidToken, "the token's payload is not base64url")
	}
	cl, err := decodeObject(payload)
	if err != nil {
		return Caller{}, fail(CodeInvalidToken, "the token's payload is not a JSON object: %v", err)
	}
	iss, ok, err := cl.str("iss")
	switch {
	case err != nil:
		return Caller{}, fail(CodeInvalidToken, "the token's %v", err)
	case !ok || iss == "":
		return Caller{}, fail(CodeInvalidToken, "the token has no iss claim: send a token from an issuer configured under auth.jwt")
	}
	is := a.issuers[iss]
	if is == nil {
		return Caller{}, fail(CodeInvalidToken, "issuer %s is not configured: add it under auth.jwt or auth.oauth, or send a token from a configured issuer", shown(iss))
	}
	switch {
	case hdr.bad != "":
		return Caller{}, fail(CodeInvalidToken, "%s", hdr.bad)
	case strings.EqualFold(hdr.Alg, "none"):
		return Caller{}, fail(CodeInvalidToken, "unsigned tokens (alg none) are never accepted: send a signed token")
	case !is.allows(hdr.Alg):
		return Caller{}, fail(CodeInvalidToken, "algorithm %s is not allowed for issuer %s (allowed: %s): add it to %s.algorithms if the issuer really signs with it", shown(hdr.Alg), shown(iss), strings.Join(is.allowed, ", "), is.field)
	}
	verified, e := a.verifySignature(ctx, is, tok, hdr)
	if e != nil {
		return Caller{}, e
	}
	if !bytes.Equal(verified, payload) {
		return Caller{}, fail(CodeInvalidToken, "the token's payload is not canonical base64url")
	}

	if _, _, e := checkTimes(cl, a.now(), is.leeway, "token"); e != nil {
		return Caller{}, e
	}
	aud, ok, err := cl.audience()
	switch {
	case err != nil:
		return Caller{}, fail(CodeInvalidToken, "the token's %v", err)
	case !ok:
		return Caller{}, fail(CodeInvalidToken, "the token has no aud claim; issuer %s must issue tokens for one of %s", shown(iss), strings.Join(is.audiences, ", "))
	case !intersects(aud, is.audiences):
		return Caller{}, fail(CodeInvalidToken, "the token's audience %s does not include any of %s configured for issuer %s: request a token for one of them, or add the audience to %s.audiences", shownList(aud), strings.Join(is.audiences, ", "), shown(iss), is.field)
	}

	return claimsCaller(cl, "token", is.field, is.subjectClaim, string(is.kind), is.groupsClaim, MethodJWT)
}

// claimsCaller is the caller a verified token's claims name: <kind>:<subject claim>, with the
// groups of the groups claim. what names the token in messages ("token"), field the config entry
// to fix.
func claimsCaller(cl claims, what, field, subjectClaim, kind, groupsClaim string, method Method) (Caller, *Error) {
	subject, ok, err := cl.str(subjectClaim)
	switch {
	case err != nil:
		return Caller{}, fail(CodeInvalidToken, "the %s's %v: set %s.subject_claim to a string claim", what, err, field)
	case !ok || subject == "":
		return Caller{}, fail(CodeInvalidToken, "the %s has no %s claim: set %s.subject_claim to the claim that names the caller", what, shown(subjectClaim), field)
	}
	id := kind + ":" + subject
	if _, err := principal.Parse(id); err != nil {
		return Caller{}, fail(CodeInvalidToken, "the %s's %s claim does not form a principal: %v", what, shown(subjectClaim), err)
	}
	groups, e := tokenGroups(cl, groupsClaim)
	if e != nil {
		return Caller{}, e
	}
	sub, _, _ := cl.str("sub")
	if sub == "" {
		sub = subject
	}
	return Caller{ID: id, Groups: groups, Method: method, Subject: sub}, nil
}

// tokenGroups reads the groups claim: an array of strings, or a string of names separated by
// spaces or commas. Each name n becomes group:n.
func tokenGroups(cl claims, claim string) ([]string, *Error) {
	if _, ok := cl[claim]; !ok {
		return []string{}, nil
	}
	var names []string
	if s, _, err := cl.str(claim); err == nil {
		names = strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
	} else if list, _, err := cl.strs(claim); err == nil {
		names = list
	} else {
		return nil, fail(CodeInvalidToken, "the token's %s claim must be an array of strings or a space or comma separated string", shown(claim))
	}
	if len(names) > maxGroups {
		return nil, fail(CodeInvalidToken, "the token's %s claim has more than %d groups", shown(claim), maxGroups)
	}
	groups := make([]string, 0, len(names))
	for i, n := range names {
		g := "group:" + strings.TrimSpace(n)
		if err := checkGroup(g); err != nil {
			return nil, fail(CodeInvalidToken, "the token's %s claim, element %d: %v", shown(claim), i, err)
		}
		groups = append(groups, g)
	}
	return normGroups(groups), nil
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func shownList(xs []string) string {
	if len(xs) > 5 {
		xs = append(xs[:5:5], "…")
	}
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = shown(x)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// verifySignature checks the token's signature with the issuer's keys and returns the verified
// payload. The key is chosen by Lush (kid, type, curve, alg), never taken from the token, and the
// algorithm must fit the key, so an RSA public key can never serve as an HMAC secret.
func (a *Authenticator) verifySignature(ctx context.Context, is *issuer, tok string, hdr joseHeader) ([]byte, *Error) {
	alg, ok := jwa.LookupSignatureAlgorithm(hdr.Alg)
	if !ok {
		return nil, fail(CodeInvalidToken, "unknown algorithm %s", shown(hdr.Alg))
	}
	bad := fail(CodeInvalidToken, "the token's signature does not verify with the keys of issuer %s: it was altered or signed by another key", shown(is.name))
	if is.hmac != nil {
		if knownAlgorithms[hdr.Alg] != "HMAC" {
			return nil, bad
		}
		p, err := jws.VerifyCompactFast(is.hmac, []byte(tok), alg)
		if err != nil {
			return nil, bad
		}
		return p, nil
	}
	ring := is.ring()
	cands, kidKnown := ring.candidates(hdr.Kid, hdr.Alg)
	if !kidKnown && is.remote != nil && is.remote.refreshForUnknownKid(ctx, a.now()) {
		ring = is.ring()
		cands, kidKnown = ring.candidates(hdr.Kid, hdr.Alg)
	}
	switch {
	case !kidKnown:
		return nil, fail(CodeInvalidToken, "the token's key id %s is not among the keys of issuer %s: if the issuer has just rotated its keys, retry in a minute", shown(hdr.Kid), shown(is.name))
	case len(cands) == 0:
		return nil, fail(CodeInvalidToken, "issuer %s has no key that verifies %s tokens%s", shown(is.name), hdr.Alg, kidNote(hdr.Kid))
	}
	for _, k := range cands {
		if p, err := jws.VerifyCompactFast(k.raw, []byte(tok), alg); err == nil {
			return p, nil
		}
	}
	return nil, bad
}

func kidNote(kid string) string {
	if kid == "" {
		return ""
	}
	return " with key id " + shown(kid)
}

// candidates returns the keys that may verify a token with this kid and alg. kidKnown is false
// when the token names a key id that no key has (keys without an id match any kid).
func (r *keyring) candidates(kid, alg string) (out []vkey, kidKnown bool) {
	kidKnown = kid == ""
	for _, k := range r.keys {
		if kid != "" && k.kid != "" && k.kid != kid {
			continue
		}
		kidKnown = true
		if k.fits(alg) {
			out = append(out, k)
		}
	}
	return out, kidKnown
}

// ringFrom keeps the usable public signing keys of a JWKS; others (encryption keys, symmetric
// keys, unsupported types, weak RSA) are skipped.
func ringFrom(set jwk.Set) *keyring {
	r := &keyring{src: set}
	if set == nil {
		return r
	}
	for i := range set.Len() {
		k, ok := set.Key(i)
		if !ok {
			continue
		}
		if vk, err := fromJWK(k); err == nil {
			r.keys = append(r.keys, vk)
		}
	}
	return r
}

func fromJWK(k jwk.Key) (vkey, error) {
	if k.KeyType() == jwa.OctetSeq() {
		return vkey{}, errors.New("a symmetric (oct) key: HMAC secrets are never taken from a key set")
	}
	pub, err := k.PublicKey()
	if err != nil {
		return vkey{}, fmt.Errorf("no public key: %w", err)
	}
	var raw any
	if err := jwk.Export(pub, &raw); err != nil {
		return vkey{}, fmt.Errorf("unusable key: %w", err)
	}
	vk, err := fromRaw(raw)
	if err != nil {
		return vkey{}, err
	}
	vk.kid, _ = k.KeyID()
	if alg, ok := k.Algorithm(); ok {
		vk.alg = alg.String()
	}
	vk.use, _ = k.KeyUsage()
	return vk, nil
}

func fromRaw(raw any) (vkey, error) {
	switch k := raw.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return vkey{}, fmt.Errorf("an RSA key of %d bits (at least %d are required)", k.N.BitLen(), minRSABits)
		}
		return vkey{family: "RSA", raw: k}, nil
	case *ecdsa.PublicKey:
		return vkey{family: "EC", curve: k.Curve.Params().Name, raw: k}, nil
	case ed25519.PublicKey:
		return vkey{family: "OKP", curve: "Ed25519", raw: k}, nil
	default:
		return vkey{}, fmt.Errorf("an unsupported key type %T", raw)
	}
}

// loadKeyFile reads public keys from PEM (PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE blocks) or
// from a JWKS (or single JWK) JSON file. Private and symmetric keys are refused: the gateway
// only verifies.
func loadKeyFile(path string) (*keyring, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	trimmed := bytes.TrimSpace(data)
	ring := &keyring{}
	if bytes.HasPrefix(trimmed, []byte("{")) {
		set, err := jwk.Parse(trimmed)
		if err != nil {
			return nil, fmt.Errorf("%s is not a valid JWKS: %w", path, err)
		}
		for i := range set.Len() {
			k, _ := set.Key(i)
			if priv, err := jwk.IsPrivateKey(k); err == nil && priv {
				return nil, fmt.Errorf("%s: key %d is a private key: give the gateway the public keys only", path, i)
			}
			vk, err := fromJWK(k)
			if err != nil {
				return nil, fmt.Errorf("%s: key %d is %v", path, i, err)
			}
			ring.keys = append(ring.keys, vk)
		}
		ring.src = set
	} else {
		rest := data
		for n := 0; ; n++ {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			raw, err := pemPublicKey(block)
			if err != nil {
				return nil, fmt.Errorf("%s: PEM block %d: %w", path, n, err)
			}
			vk, err := fromRaw(raw)
			if err != nil {
				return nil, fmt.Errorf("%s: PEM block %d is %v", path, n, err)
			}
			ring.keys = append(ring.keys, vk)
		}
	}
	if len(ring.keys) == 0 {
		return nil, fmt.Errorf("%s holds no public key: give PEM public keys or a JWKS", path)
	}
	return ring, nil
}

func pemPublicKey(b *pem.Block) (any, error) {
	switch {
	case b.Type == "PUBLIC KEY":
		return x509.ParsePKIXPublicKey(b.Bytes)
	case b.Type == "RSA PUBLIC KEY":
		return x509.ParsePKCS1PublicKey(b.Bytes)
	case b.Type == "CERTIFICATE":
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		return c.PublicKey, nil
	case strings.Contains(b.Type, "PRIVATE KEY"):
		return nil, errors.New("a private key: give the gateway the public key only")
	default:
		return nil, fmt.Errorf("unexpected block type %q: use PUBLIC KEY or CERTIFICATE", b.Type)
	}
}

// loadSecret reads an HMAC secret file: its bytes, without trailing line breaks.
func loadSecret(path string, algs []string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read secret: %w", err)
	}
	trimmed := bytes.TrimSpace(data)
	if bytes.HasPrefix(trimmed, []byte("-----BEGIN")) || bytes.HasPrefix(trimmed, []byte("{")) {
		return nil, fmt.Errorf("%s holds a PEM or JWK key, but the algorithms are HMAC (%s): an HMAC key file holds the raw shared secret, and a public key is never used as one", path, strings.Join(algs, ", "))
	}
	secret := bytes.TrimRight(data, "\r\n")
	need := 32
	for _, a := range algs {
		switch a {
		case "HS384":
			need = max(need, 48)
		case "HS512":
			need = max(need, 64)
		}
	}
	if len(secret) < need {
		return nil, fmt.Errorf("%s holds a %d-byte secret; %s needs at least %d bytes (e.g. openssl rand -base64 %d)", path, len(secret), strings.Join(algs, ", "), need, need)
	}
	return secret, nil
}

// jwksFetcher owns the jwk.Cache that keeps every issuer's JWKS fresh.
type jwksFetcher struct {
	cache     *jwk.Cache
	client    *http.Client
	transport *http.Transport
	errs      chan error // background fetch failures, read while register waits for a first fetch
	closed    atomic.Bool
	mu        sync.Mutex            // serialises register (New, and OAuth discovery in the background)
	sets      map[string]*remoteSet // by URL
}

func newJWKSFetcher(ctx context.Context) (*jwksFetcher, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	f := &jwksFetcher{transport: tr, errs: make(chan error, 8), sets: map[string]*remoteSet{}}
	f.client = &http.Client{
		Transport: tr,
		Timeout:   fetchTimeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("more than 5 redirects")
			}
			if req.URL.Scheme != "https" && !(req.URL.Scheme == "http" && isLoopbackHost(req.URL.Hostname())) {
				return fmt.Errorf("redirect to %s is not https", req.URL.Redacted())
			}
			return nil
		},
	}
	sink := errsink.NewFunc(func(_ context.Context, err error) {
		select {
		case f.errs <- err:
		default:
		}
	})
	// The cache's goroutines belong to the Authenticator (stopped by Close), not to ctx.
	cache, err := jwk.NewCache(context.WithoutCancel(ctx), httprc.NewClient(
		httprc.WithHTTPClient(f.client), httprc.WithWorkers(2), httprc.WithErrorSink(sink)))
	if err != nil {
		return nil, fmt.Errorf("start the JWKS cache: %w", err)
	}
	f.cache = cache
	return f, nil
}

// register adds a JWKS URL to the cache and waits for its first fetch.
func (f *jwksFetcher) register(ctx context.Context, u string, refresh time.Duration) (rs *remoteSet, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rs := f.sets[u]; rs != nil {
		return rs, nil
	}
	if f.closed.Load() {
		return nil, errors.New("the authenticator is closed")
	}
	defer func() {
		if err != nil && f.cache.IsRegistered(context.WithoutCancel(ctx), u) {
			f.cache.Unregister(context.WithoutCancel(ctx), u) // a later discovery registers it again
		}
	}()
	for drained := false; !drained; {
		select {
		case <-f.errs:
		default:
			drained = true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, initialFetchTimeout)
	defer cancel()
	if err := f.cache.Register(ctx, u,
		jwk.WithConstantInterval(refresh), jwk.WithMinInterval(unknownKidRefresh), jwk.WithWaitReady(false),
		jwk.WithHTTPClient(f.client)); err != nil {
		return nil, fmt.Errorf("register %s: %w", u, err)
	}
	res, err := f.cache.LookupResource(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("register %s: %w", u, err)
	}
	ready := make(chan error, 1)
	go func() { ready <- res.Ready(ctx) }() // ends when ctx does (cancelled on return)
	select {
	case err := <-ready:
		if err != nil {
			return nil, fmt.Errorf("fetch %s: gave up waiting (at most %s): %w", u, initialFetchTimeout, err)
		}
	case err := <-f.errs:
		return nil, fmt.Errorf("fetch %s: %w", u, err)
	}
	rs = &remoteSet{url: u, res: res, f: f}
	f.sets[u] = rs
	return rs, nil
}

func (f *jwksFetcher) close() error {
	f.closed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := f.cache.Shutdown(ctx)
	f.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("stop the JWKS cache: %w", err)
	}
	return nil
}

// remoteSet is one JWKS URL in the cache.
type remoteSet struct {
	url  string
	res  interface{ Resource() jwk.Set }
	f    *jwksFetcher
	ring atomic.Pointer[keyring]

	mu         sync.Mutex
	lastForced time.Time
	inflight   chan struct{} // closed when the forced refresh in progress ends
}

// current returns the keys of the last good fetch: a failed fetch keeps the keys (the cache
// keeps the last set), and so does a fetch whose set has no usable key, which is far more likely
// an issuer's glitch than a deliberate rotation to nothing.
func (r *remoteSet) current() *keyring {
	set := r.res.Resource()
	prev := r.ring.Load()
	if prev != nil && prev.src == set {
		return prev
	}
	kr := ringFrom(set)
	if len(kr.keys) == 0 && prev != nil {
		kr.keys = prev.keys
	}
	r.ring.Store(kr)
	return kr
}

// refreshForUnknownKid fetches the JWKS again, at most once per unknownKidRefresh; requests
// arriving during that fetch wait for it. It reports whether the keys may have changed.
func (r *remoteSet) refreshForUnknownKid(ctx context.Context, now time.Time) bool {
	r.mu.Lock()
	if ch := r.inflight; ch != nil {
		r.mu.Unlock()
		select {
		case <-ch:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !r.lastForced.IsZero() && now.Sub(r.lastForced) < unknownKidRefresh {
		r.mu.Unlock()
		return false
	}
	if r.f.closed.Load() {
		r.mu.Unlock()
		return false
	}
	r.lastForced = now
	ch := make(chan struct{})
	r.inflight = ch
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	_, err := r.f.cache.Refresh(ctx, r.url)
	cancel()

	r.mu.Lock()
	r.inflight = nil
	close(ch)
	r.mu.Unlock()
	return err == nil
}
