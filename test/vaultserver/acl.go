package vaultserver

import (
	"fmt"
	"strings"
)

// capability is a set of Vault ACL capabilities.
type capability uint16

const (
	capCreate capability = 1 << iota
	capRead
	capUpdate
	capDelete
	capList
	capSudo
	capPatch
	capDeny

	capAll = capCreate | capRead | capUpdate | capDelete | capList | capSudo | capPatch
)

// parseCapability maps a capability name as written in a Vault policy.
func parseCapability(name string) (capability, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "create":
		return capCreate, nil
	case "read":
		return capRead, nil
	case "update":
		return capUpdate, nil
	case "delete":
		return capDelete, nil
	case "list":
		return capList, nil
	case "sudo":
		return capSudo, nil
	case "patch":
		return capPatch, nil
	case "deny":
		return capDeny, nil
	}
	return 0, fmt.Errorf("invalid capability %q", name)
}

// operation is a Vault logical operation, derived from the HTTP method.
type operation string

const (
	opRead   operation = "read"
	opList   operation = "list"
	opCreate operation = "create"
	opUpdate operation = "update"
	opDelete operation = "delete"
	opPatch  operation = "patch"
	opHead   operation = "head"
)

// capability is the capability an operation needs.
func (o operation) capability() capability {
	switch o {
	case opRead:
		return capRead
	case opList:
		return capList
	case opCreate:
		return capCreate
	case opUpdate:
		return capUpdate
	case opDelete:
		return capDelete
	case opPatch:
		return capPatch
	}
	return 0
}

// policy is a named ACL policy: path patterns with capabilities.
type policy struct {
	name  string
	rules map[string]capability // pattern -> capabilities
}

// newPolicy builds a policy from WithPolicy's map, validating capabilities
// like Vault does when a policy is written.
func newPolicy(name string, paths map[string][]string) (*policy, error) {
	p := &policy{name: name, rules: map[string]capability{}}
	for pattern, caps := range paths {
		pattern = strings.TrimPrefix(strings.TrimSpace(pattern), "/")
		if pattern == "" {
			return nil, fmt.Errorf("policy %q: empty path", name)
		}
		if i := strings.Index(pattern, "*"); i >= 0 && i != len(pattern)-1 {
			return nil, fmt.Errorf("policy %q: path %q: '*' is only allowed at the end of a path", name, pattern)
		}
		var set capability
		for _, c := range caps {
			v, err := parseCapability(c)
			if err != nil {
				return nil, fmt.Errorf("policy %q: path %q: %w", name, pattern, err)
			}
			set |= v
		}
		p.rules[pattern] |= set
	}
	return p, nil
}

// defaultPolicy is the part of Vault's built-in "default" policy that is
// meaningful for this server.
func defaultPolicy() *policy {
	p, err := newPolicy("default", map[string][]string{
		"auth/token/lookup-self": {"read"},
		"auth/token/renew-self":  {"update"},
		"auth/token/revoke-self": {"update"},
		"sys/capabilities-self":  {"update"},
		"sys/renew":              {"update"},
		"sys/leases/renew":       {"update"},
		"sys/leases/lookup":      {"update"},
		"cubbyhole/*":            {"create", "read", "update", "delete", "list"},
		"sys/wrapping/wrap":      {"update"},
		"sys/wrapping/lookup":    {"update"},
		"sys/wrapping/unwrap":    {"update"},
		"sys/tools/hash":         {"update"},
		"sys/tools/hash/*":       {"update"},
	})
	if err != nil {
		panic(err) // the literal above is valid
	}
	return p
}

// capabilities returns what token t may do on path in namespace ns.
//
// As in Vault: the root policy allows everything in the token's namespace
// and below; rules with the same pattern from several policies are merged;
// the single highest-priority matching rule decides; "deny" wins over
// everything. A token from the root namespace is evaluated against the
// namespace-qualified path; a token from a child namespace gets nothing in
// the root namespace.
func (st *state) capabilities(t *token, ns *namespace, path string) capability {
	switch {
	case t.ns == ns:
	case t.ns.isRoot():
		path = ns.path + path
	default:
		return 0
	}
	merged := map[string]capability{}
	for _, name := range t.policies {
		if name == "root" {
			return capAll
		}
		p := st.policies[t.ns.id][name]
		if p == nil {
			continue // Vault ignores policies that do not exist
		}
		for pattern, caps := range p.rules {
			merged[pattern] |= caps
		}
	}
	best := ""
	found := false
	for pattern := range merged {
		if !globMatch(pattern, path) {
			continue
		}
		if !found || lowerPriority(best, pattern) {
			best, found = pattern, true
		}
	}
	if !found {
		return 0
	}
	caps := merged[best]
	if caps&capDeny != 0 {
		return capDeny
	}
	return caps
}

// globMatch reports whether a Vault policy path pattern matches path: "+"
// matches exactly one path segment and a trailing "*" matches any suffix.
func globMatch(pattern, path string) bool {
	prefix, glob := strings.CutSuffix(pattern, "*")
	pSegs := strings.Split(prefix, "/")
	segs := strings.Split(path, "/")
	if !glob && len(segs) != len(pSegs) {
		return false
	}
	if len(segs) < len(pSegs) {
		return false
	}
	for i, ps := range pSegs {
		last := i == len(pSegs)-1
		switch {
		case ps == "+" && !(glob && last):
			// any single segment
		case glob && last:
			// The partial segment before '*': a string prefix. A '+' here
			// ("a/+*") matches the whole segment.
			if ps != "+" && !strings.HasPrefix(segs[i], ps) {
				return false
			}
		case ps != segs[i]:
			return false
		}
	}
	return true
}

// lowerPriority reports whether pattern a has lower priority than pattern b
// according to Vault's documented rules: the first wildcard appears
// earlier; it ends in "*" and the other does not; it has more "+"
// segments; it is shorter; it is lexicographically smaller.
func lowerPriority(a, b string) bool {
	wa, wb := firstWildcard(a), firstWildcard(b)
	if wa != wb {
		return wa < wb
	}
	ga, gb := strings.HasSuffix(a, "*"), strings.HasSuffix(b, "*")
	if ga != gb {
		return ga
	}
	pa, pb := plusSegments(a), plusSegments(b)
	if pa != pb {
		return pa > pb
	}
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

func firstWildcard(p string) int {
	if i := strings.IndexAny(p, "+*"); i >= 0 {
		return i
	}
	return len(p)
}

func plusSegments(p string) int {
	n := 0
	for s := range strings.SplitSeq(p, "/") {
		if s == "+" {
			n++
		}
	}
	return n
}
