package vaultserver

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"sync"
	"time"
)

// namespace is one Vault namespace: the root namespace, or the single child
// namespace configured with WithNamespace.
type namespace struct {
	path string // "" for root, "team/" (with trailing slash) otherwise
	id   string // "root", or a 5-character ID like Vault's
}

func (n *namespace) isRoot() bool { return n.path == "" }

// name is the namespace path without its trailing slash ("" for root).
func (n *namespace) name() string { return strings.TrimSuffix(n.path, "/") }

// token is a Vault service token.
type token struct {
	id          string
	accessor    string
	ns          *namespace
	policies    []string // sanitized: lower-case, sorted, de-duplicated
	parent      string   // id of the parent token; "" for orphans
	path        string   // creation path, e.g. "auth/token/create"
	displayName string
	meta        map[string]string
	entityID    string
	numUses     int // remaining uses; 0 = unlimited

	issued         time.Time
	creationTTL    time.Duration // the TTL the token was created with; 0 = never expires
	explicitMaxTTL time.Duration
	roleMaxTTL     time.Duration // max TTL imposed by the auth method's role; 0 = system max
	expire         time.Time     // zero for non-expiring tokens
	lastRenewal    time.Time
	renewable      bool
	revoked        bool
}

// lease is a dynamic secret's lease.
type lease struct {
	id          string
	ns          *namespace
	owner       string // id of the token that created it
	issued      time.Time
	expire      time.Time
	lastRenewal time.Time
	ttl         time.Duration // role default TTL, used when renewing without an increment
	maxTTL      time.Duration // role max TTL (0 = system max)
	revoked     bool
}

// state is everything the server knows. Every method on *state expects
// st.mu to be held by the caller; only ServeHTTP and the exported Server
// helpers take it.
type state struct {
	mu sync.Mutex

	offset time.Duration // added to time.Now by Advance
	down   bool          // sealed: every request fails with 503

	root   *namespace
	child  *namespace // nil without WithNamespace
	main   *namespace // where engines, auth methods and policies live
	mounts map[string][]*mount
	// policies by namespace ID, then by name; "root" is implicit.
	policies map[string]map[string]*policy

	tokens    map[string]*token // by token ID
	accessors map[string]*token // by accessor
	leases    map[string]*lease // by lease ID
	requests  []Request
}

func (st *state) now() time.Time { return time.Now().Add(st.offset) }

// tokenValid reports whether t, and every ancestor of it, is neither revoked
// nor expired: revoking or expiring a parent revokes its children, as in
// Vault.
func (st *state) tokenValid(t *token, now time.Time) bool {
	for t != nil { // parents are created before children, so this ends
		if t.revoked || (!t.expire.IsZero() && !now.Before(t.expire)) {
			return false
		}
		if t.parent == "" {
			return true
		}
		t = st.tokens[t.parent]
	}
	return false // the parent is gone
}

// leaseValid reports whether l is live: not revoked, not expired, and owned
// by a live token (Vault revokes a token's leases with the token).
func (st *state) leaseValid(l *lease, now time.Time) bool {
	if l == nil || l.revoked || !now.Before(l.expire) {
		return false
	}
	return st.tokenValid(st.tokens[l.owner], now)
}

// newToken registers a fresh token.
func (st *state) newToken(t *token) *token {
	suffix := ""
	if !t.ns.isRoot() {
		suffix = "." + t.ns.id
	}
	for {
		t.id = "hvs." + randomBase62(24) + suffix
		t.accessor = randomBase62(24) + suffix
		if st.tokens[t.id] == nil && st.accessors[t.accessor] == nil {
			break
		}
	}
	st.tokens[t.id] = t
	st.accessors[t.accessor] = t
	return t
}

// tokenParams describes a token to mint.
type tokenParams struct {
	ns             *namespace
	policies       []string
	noDefault      bool
	parent         string
	path           string
	displayName    string
	meta           map[string]string
	entityID       string
	ttl            time.Duration
	explicitMaxTTL time.Duration
	roleMaxTTL     time.Duration
	renewable      bool
	numUses        int
}

// mint creates a token the way Vault's token store does: policies are
// sanitized ("default" added unless noDefault, "root" alone if present), a
// zero TTL means the system default unless the token is a root token, and
// the TTL is capped by the effective max TTL.
func (st *state) mint(p tokenParams, now time.Time) (*token, []string) {
	policies := sanitizePolicies(p.policies, !p.noDefault)
	isRoot := len(policies) == 1 && policies[0] == "root"
	ttl := p.ttl
	var warnings []string
	switch {
	case ttl == 0 && isRoot && p.explicitMaxTTL == 0:
		// A non-expiring root token.
	default:
		if ttl == 0 {
			ttl = defaultLeaseTTL
		}
		if maxTTL := effectiveMax(p.explicitMaxTTL, p.roleMaxTTL); ttl > maxTTL {
			warnings = append(warnings, fmt.Sprintf("TTL of %q exceeded the effective max_ttl of %q; TTL value is capped accordingly", ttl, maxTTL))
			ttl = maxTTL
		}
	}
	t := &token{
		ns:             p.ns,
		policies:       policies,
		parent:         p.parent,
		path:           p.path,
		displayName:    p.displayName,
		meta:           p.meta,
		entityID:       p.entityID,
		numUses:        p.numUses,
		issued:         now,
		creationTTL:    ttl,
		explicitMaxTTL: p.explicitMaxTTL,
		roleMaxTTL:     p.roleMaxTTL,
		renewable:      p.renewable && ttl != 0,
	}
	if ttl != 0 {
		t.expire = now.Add(ttl)
	}
	return st.newToken(t), warnings
}

// effectiveMax is the max TTL that applies given optional explicit and role
// limits: the smallest non-zero of them and the system max.
func effectiveMax(limits ...time.Duration) time.Duration {
	m := maxLeaseTTL
	for _, l := range limits {
		if l > 0 && l < m {
			m = l
		}
	}
	return m
}

// calculateTTL mirrors Vault's framework.CalculateTTL for renewals: the new
// TTL is the increment (or the original TTL), capped so the lease does not
// outlive start+maxTTL. Times are truncated to the second like Vault does.
func calculateTTL(now, start time.Time, increment, original, maxTTL time.Duration) (time.Duration, []string, error) {
	ttl := increment
	if ttl <= 0 {
		ttl = original
	}
	if ttl <= 0 {
		ttl = defaultLeaseTTL
	}
	remaining := start.Truncate(time.Second).Add(maxTTL).Sub(now.Truncate(time.Second))
	if remaining <= 0 {
		return 0, nil, fmt.Errorf("past the max TTL, cannot renew")
	}
	var warnings []string
	if ttl > remaining {
		warnings = append(warnings, fmt.Sprintf("TTL of %q exceeded the effective max_ttl of %q; TTL value is capped accordingly", ttl, remaining))
		ttl = remaining
	}
	return ttl, warnings, nil
}

// sanitizePolicies mirrors Vault's policyutil.SanitizePolicies.
func sanitizePolicies(in []string, addDefault bool) []string {
	seen := map[string]bool{}
	for _, p := range in {
		p = strings.ToLower(strings.TrimSpace(p))
		if p == "" {
			continue
		}
		if p == "root" {
			return []string{"root"}
		}
		seen[p] = true
	}
	if addDefault {
		seen["default"] = true
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// accessorFor names the token presented with a request for the request log
// without revealing it: its accessor when the token is known, otherwise a
// short SHA-256 fingerprint.
func (st *state) accessorFor(raw string) string {
	if raw == "" {
		return ""
	}
	if t := st.tokens[raw]; t != nil {
		return t.accessor
	}
	sum := sha256.Sum256([]byte(raw))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// randomString returns n characters drawn uniformly from alphabet using
// crypto/rand.
func randomString(alphabet string, n int) string {
	var b strings.Builder
	limit := big.NewInt(int64(len(alphabet)))
	for range n {
		// crypto/rand.Int only fails if the system's random source does,
		// and since Go 1.24 crypto/rand crashes the program in that case.
		i, err := rand.Int(rand.Reader, limit)
		if err != nil {
			panic(fmt.Sprintf("vaultserver: crypto/rand: %v", err))
		}
		b.WriteByte(alphabet[i.Int64()])
	}
	return b.String()
}

func randomBase62(n int) string { return randomString(base62, n) }

// newUUID returns a random (version 4) UUID string, as Vault uses for
// request and entity IDs.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails since Go 1.24 (it crashes instead)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
