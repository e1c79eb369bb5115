package a2acard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/lush-agents/lush/internal/toolref"
)

// The defaults of a Cache: how many cards, and how many bytes of cards, it keeps; how long it
// keeps a card whose answer says nothing (Cache-Control), and the longest it keeps any.
const (
	DefaultCacheEntries = 256
	DefaultCacheBytes   = 32 << 20
	DefaultTTL          = 5 * time.Minute
	MaxTTL              = 30 * time.Minute
)

// Cache keeps the Agent Cards a gateway fetched, per reference and credential, so a call to a
// remote A2A agent does not fetch its card first every time. A card is kept for the max-age its
// answer's Cache-Control gives (at most MaxTTL), DefaultTTL when it gives none, and not at all
// for no-store, no-cache or max-age=0. The cache is bounded in entries and in bytes; when it is
// full the card that expires first goes. The zero Cache is ready to use; it is safe for
// concurrent use.
type Cache struct {
	Entries int              // DefaultCacheEntries when 0
	Bytes   int              // DefaultCacheBytes when 0
	Now     func() time.Time // time.Now when nil (tests set it)

	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
	size    int // the bytes of the cards kept
}

// cacheKey names a card: the reference, and a digest of the credential headers it was fetched
// with ("" without any), since an agent may show another card to another caller. The
// credential itself is never kept.
type cacheKey struct{ ref, cred string }

type cacheEntry struct {
	card    *a2a.AgentCard
	size    int
	expires time.Time
}

// Get is the card of ref for a caller with the credential headers: the cached one while it is
// fresh, else a fetched one (Fetch), kept as its Cache-Control allows. fresh reports that the
// card was fetched by this call.
func (c *Cache) Get(ctx context.Context, ref toolref.Ref, headers map[string]string) (card *a2a.AgentCard, fresh bool, err error) {
	key := cacheKey{ref: ref.String(), cred: credentialDigest(headers)}
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.card, false, nil
	}
	card, size, header, err := fetch(ctx, ref, headers)
	if err != nil {
		return nil, true, err
	}
	if ttl := TTL(header); ttl > 0 {
		c.put(key, cacheEntry{card: card, size: size, expires: now.Add(ttl)}, now)
	} else {
		c.Forget(ref, headers)
	}
	return card, true, nil
}

// Forget drops the card of ref for the credential headers, so the next Get fetches it: for a
// card whose endpoint stopped answering.
func (c *Cache) Forget(ref toolref.Ref, headers map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(cacheKey{ref: ref.String(), cred: credentialDigest(headers)})
}

// Len is the number of cards kept.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

func (c *Cache) put(key cacheKey, e cacheEntry, now time.Time) {
	maxEntries, maxBytes := c.Entries, c.Bytes
	if maxEntries <= 0 {
		maxEntries = DefaultCacheEntries
	}
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	if e.size > maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[cacheKey]cacheEntry{}
	}
	c.remove(key)
	for len(c.entries) >= maxEntries || c.size+e.size > maxBytes {
		c.evict(now)
	}
	c.entries[key] = e
	c.size += e.size
}

// evict drops every expired card or, when none has expired, the one that expires first. A full
// cache holds at most DefaultCacheEntries-ish cards, so the scan is short.
func (c *Cache) evict(now time.Time) {
	var first cacheKey
	var firstExp time.Time
	expired := false
	for k, e := range c.entries {
		if !now.Before(e.expires) {
			c.remove(k)
			expired = true
			continue
		}
		if firstExp.IsZero() || e.expires.Before(firstExp) {
			first, firstExp = k, e.expires
		}
	}
	if !expired && !firstExp.IsZero() {
		c.remove(first)
	}
}

func (c *Cache) remove(key cacheKey) {
	if e, ok := c.entries[key]; ok {
		c.size -= e.size
		delete(c.entries, key)
	}
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// TTL is how long a card may be kept, from its answer's Cache-Control: max-age capped at
// MaxTTL; 0 (not kept) for no-store, no-cache or max-age=0; DefaultTTL when it says neither.
func TTL(h http.Header) time.Duration {
	ttl := DefaultTTL
	for _, v := range h.Values("Cache-Control") {
		for d := range strings.SplitSeq(v, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(d), "=")
			switch strings.ToLower(name) {
			case "no-store", "no-cache":
				return 0
			case "max-age":
				n, err := strconv.ParseInt(strings.Trim(value, `"`), 10, 64)
				if err != nil || n <= 0 {
					return 0 // unreadable: do not keep it rather than guess
				}
				if n > int64(MaxTTL/time.Second) {
					ttl = MaxTTL
				} else {
					ttl = time.Duration(n) * time.Second
				}
			}
		}
	}
	return ttl
}

// credentialDigest identifies the credential headers without keeping them.
func credentialDigest(headers map[string]string) string {
	if len(headers) == 0 {
		return ""
	}
	names := make([]string, 0, len(headers))
	for k := range headers {
		names = append(names, k)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, k := range names {
		h.Write([]byte(http.CanonicalHeaderKey(k)))
		h.Write([]byte{0})
		h.Write([]byte(headers[k]))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
