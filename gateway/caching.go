package gateway

import (
	"encoding/json"
	"time"
)

// Caching hints (protocol 2026-07-28, SEP-2549): list results and resources/read carry ttlMs and
// cacheScope. What the gateway answers is decided for the caller, so its scope is always
// "private": a shared cache must not hand it to another caller. A list's ttlMs is the shortest
// TTL the upstream servers it draws on gave for that list, and 0 (do not reuse) when one of them
// gave none or the list holds entries of no server (local and built-in tools, agents), which
// change with the deployed build.

// protocolCachingHints is the first protocol version with caching hints.
const protocolCachingHints = "2026-07-28"

const cacheScopePrivate = "private"

// listHints adds the caching hints to a list result (method) drawn from the servers refs (""
// for an entry of no server), for a request whose version has them.
func (c *call) listHints(res map[string]any, method string, refs []string) map[string]any {
	if c.req.Protocol < protocolCachingHints {
		return res
	}
	ttl := shortestTTL(refs, func(ref string) (time.Duration, bool) { return c.g.listTTL(ref, method) })
	res["ttlMs"] = ttl.Milliseconds()
	res["cacheScope"] = cacheScopePrivate
	return res
}

// shortestTTL is the shortest of the TTLs of refs, 0 when one has none (or refs is empty).
func shortestTTL(refs []string, ttlOf func(ref string) (time.Duration, bool)) time.Duration {
	var ttl time.Duration
	for i, ref := range refs {
		t, ok := ttlOf(ref)
		if !ok || t < 0 {
			return 0
		}
		if i == 0 || t < ttl {
			ttl = t
		}
	}
	return ttl
}

// listTTL is the TTL the server ref gave for its answer to a list method.
func (g *Gateway) listTTL(ref, method string) (time.Duration, bool) {
	if ref == "" {
		return 0, false
	}
	lists, ok := g.pool.Lists(ref)
	if !ok {
		return 0, false
	}
	h, ok := lists.Cache[method]
	return h.TTL, ok && h.TTLSet
}

// readHints sets the caching hints of a resources/read result: the server's ttlMs when it gave a
// valid one (else 0), and cacheScope "private" whatever it said, for a request whose version has
// them. A result that is not an object is returned as it is.
func (c *call) readHints(res any) any {
	raw, ok := res.(json.RawMessage)
	if !ok || c.req.Protocol < protocolCachingHints {
		return res
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return res
	}
	var ttl int64
	if json.Unmarshal(obj["ttlMs"], &ttl) != nil || ttl < 0 {
		obj["ttlMs"] = json.RawMessage("0")
	}
	obj["cacheScope"], _ = json.Marshal(cacheScopePrivate)
	out, err := json.Marshal(obj)
	if err != nil {
		return res
	}
	return json.RawMessage(out)
}
