package vaultserver

import (
	"net/http"
	"strings"
	"time"
)

// newDatabaseMount mounts the dynamic secrets engine at database/, shaped
// like Vault's database secrets engine: reading creds/ROLE mints a username
// and password under a new renewable lease.
func newDatabaseMount(roles []dynamicRole) *mount {
	byName := make(map[string]dynamicRole, len(roles))
	for _, r := range roles {
		byName[r.name] = r
	}
	return &mount{
		path: "database/",
		typ:  "database",
		handle: func(st *state, req *request) response {
			role, ok := strings.CutPrefix(req.rel, "creds/")
			if !ok || role == "" || strings.Contains(role, "/") {
				return unsupportedPath()
			}
			if req.op != opRead {
				return unsupportedOperation()
			}
			r, ok := byName[role]
			if !ok {
				return badRequest("unknown role: " + role)
			}
			return issueCredentials(st, req, r)
		},
	}
}

const lowerAlnum = "abcdefghijklmnopqrstuvwxyz0123456789"

// issueCredentials mints credentials for role r under a lease owned by the
// requesting token.
func issueCredentials(st *state, req *request, r dynamicRole) response {
	maxTTL := effectiveMax(r.maxTTL)
	ttl := r.ttl
	if ttl == 0 {
		ttl = defaultLeaseTTL
	}
	if ttl > maxTTL {
		ttl = maxTTL
	}
	suffix := ""
	if !req.ns.isRoot() {
		suffix = "." + req.ns.id
	}
	l := &lease{
		ns: req.ns, owner: req.token.id,
		issued: req.now, expire: req.now.Add(ttl),
		ttl: r.ttl, maxTTL: r.maxTTL,
	}
	for {
		l.id = req.path + "/" + randomBase62(24) + suffix
		if st.leases[l.id] == nil {
			break
		}
	}
	st.leases[l.id] = l
	e := req.envelope(map[string]any{
		"username": "v-" + r.name + "-" + randomString(lowerAlnum, 20),
		"password": "A1a-" + randomBase62(16),
	}, nil)
	e.LeaseID, e.Renewable, e.LeaseDuration = l.id, true, seconds(ttl)
	return response{status: http.StatusOK, body: e}
}

// handleSys serves the sys/ paths other than sys/health (which dispatch
// answers before authentication).
func handleSys(st *state, req *request) response {
	switch req.rel {
	case "leases/renew", "renew":
		if !isWrite(req.op) {
			return unsupportedOperation()
		}
		return renewLease(st, req)
	case "leases/revoke", "revoke":
		if !isWrite(req.op) {
			return unsupportedOperation()
		}
		id, _ := req.body["lease_id"].(string)
		if id == "" {
			return badRequest("lease_id must be specified")
		}
		if l := st.leases[id]; l != nil && l.ns == req.ns {
			l.revoked = true
		}
		return noContent() // revoking an unknown lease succeeds, as in Vault
	case "leases/lookup":
		if !isWrite(req.op) {
			return unsupportedOperation()
		}
		id, _ := req.body["lease_id"].(string)
		if id == "" {
			return badRequest("missing param lease_id")
		}
		l := st.leases[id]
		if l == nil || l.ns != req.ns || !st.leaseValid(l, req.now) {
			return badRequest("invalid lease")
		}
		var lastRenewal any
		if !l.lastRenewal.IsZero() {
			lastRenewal = formatTime(l.lastRenewal)
		}
		return req.reply(http.StatusOK, map[string]any{
			"id":           l.id,
			"issue_time":   formatTime(l.issued),
			"expire_time":  formatTime(l.expire),
			"last_renewal": lastRenewal,
			"renewable":    true,
			"ttl":          seconds(l.expire.Sub(req.now.Round(time.Second))),
		}, nil)
	}
	return unsupportedPath()
}

// renewLease is sys/leases/renew {"lease_id","increment"}.
func renewLease(st *state, req *request) response {
	id, _ := req.body["lease_id"].(string)
	if id == "" {
		return badRequest("lease_id must be specified")
	}
	inc, err := durationField(req.body, "increment")
	if err != nil {
		return badRequest(err.Error())
	}
	l := st.leases[id]
	if l == nil || l.ns != req.ns || !st.leaseValid(l, req.now) {
		// Vault deletes revoked and expired leases, so they are not found.
		return badRequest("lease not found")
	}
	ttl, warnings, err := calculateTTL(req.now, l.issued, inc, l.ttl, effectiveMax(l.maxTTL))
	if err != nil {
		return badRequest(err.Error())
	}
	l.expire = req.now.Add(ttl)
	l.lastRenewal = req.now
	e := req.envelope(nil, warnings)
	e.LeaseID, e.Renewable, e.LeaseDuration = l.id, true, seconds(ttl)
	return response{status: http.StatusOK, body: e}
}
