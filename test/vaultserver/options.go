package vaultserver

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Option configures a Server at Start.
type Option func(*config)

type config struct {
	namespace  string
	kvMounts   []string
	appRoles   []appRoleRole
	kubernetes []kubernetesRole
	policies   []namedPolicy
	dynamic    []dynamicRole
}

type namedPolicy struct {
	name  string
	paths map[string][]string
}

type appRoleRole struct {
	mount    string
	roleID   string
	secretID string
	ttl      time.Duration
	policies []string
	entityID string
}

type kubernetesRole struct {
	mount    string
	role     string
	jwt      string
	ttl      time.Duration
	policies []string
	entityID string
}

type dynamicRole struct {
	name   string
	ttl    time.Duration
	maxTTL time.Duration
}

// WithNamespace puts every engine, auth method, policy and helper-minted
// token in the Vault Enterprise namespace ns, so clients must send
// "X-Vault-Namespace: ns" (vault/api's Client.SetNamespace; Server.Client
// does it) or use the path-prefix form /v1/ns/... . See the package
// documentation for what a request outside the namespace gets.
func WithNamespace(ns string) Option {
	return func(c *config) { c.namespace = ns }
}

// WithKV2Mount mounts another KV version 2 secrets engine at name/, in
// addition to the always-present secret/.
func WithKV2Mount(name string) Option {
	return func(c *config) { c.kvMounts = append(c.kvMounts, name) }
}

// WithAppRole enables the AppRole auth method at auth/mount/ (if not already)
// with a role whose role_id and secret_id are the given values. A login
// gets a renewable token with the role's policies plus "default" and a TTL of
// tokenTTL (0 means the system default, 768h). The role is reported as
// role_name=mount in the token's metadata.
func WithAppRole(mount, roleID, secretID string, tokenTTL time.Duration, policies ...string) Option {
	return func(c *config) {
		c.appRoles = append(c.appRoles, appRoleRole{
			mount: mount, roleID: roleID, secretID: secretID, ttl: tokenTTL,
			policies: append([]string(nil), policies...),
		})
	}
}

// WithKubernetes enables the Kubernetes auth method at auth/mount/ (if not
// already) with a role that accepts exactly the service account token jwt.
// The JWT is not verified; if it is a JWT whose "sub" claim is
// system:serviceaccount:NS:NAME, the token's display name and metadata name
// that service account as Vault would.
func WithKubernetes(mount, role, jwt string, tokenTTL time.Duration, policies ...string) Option {
	return func(c *config) {
		c.kubernetes = append(c.kubernetes, kubernetesRole{
			mount: mount, role: role, jwt: jwt, ttl: tokenTTL,
			policies: append([]string(nil), policies...),
		})
	}
}

// WithPolicy defines an ACL policy: Vault path patterns ("secret/data/app/*",
// "secret/data/+/config") to capabilities ("create", "read", "update",
// "delete", "list", "patch", "sudo", "deny"). Redefining "default" replaces
// the built-in default policy; "root" cannot be defined.
func WithPolicy(name string, paths map[string][]string) Option {
	return func(c *config) {
		cp := make(map[string][]string, len(paths))
		for k, v := range paths {
			cp[k] = append([]string(nil), v...)
		}
		c.policies = append(c.policies, namedPolicy{name: name, paths: cp})
	}
}

// WithDynamicRole adds a role to the database secrets engine at database/:
// reading database/creds/role mints fresh credentials under a lease of ttl
// (0 means the system default, 768h) renewable up to maxTTL after issue (0
// means the system max, 768h).
func WithDynamicRole(role string, ttl, maxTTL time.Duration) Option {
	return func(c *config) {
		c.dynamic = append(c.dynamic, dynamicRole{name: role, ttl: ttl, maxTTL: maxTTL})
	}
}

// validate normalizes names and rejects configurations Vault would refuse.
func (c *config) validate() error {
	var errs []error
	c.namespace = strings.Trim(c.namespace, "/")
	if c.namespace == "root" || strings.Contains(c.namespace, "..") || strings.ContainsAny(c.namespace, " *+") {
		errs = append(errs, fmt.Errorf("invalid namespace %q", c.namespace))
	}

	mountKinds := map[string]string{"secret": "kv", "database": "database", "sys": "system", "cubbyhole": "cubbyhole", "identity": "identity"}
	claim := func(path, kind string) {
		if path == "" || strings.Contains(path, "..") {
			errs = append(errs, fmt.Errorf("invalid mount path %q", path))
			return
		}
		if have, ok := mountKinds[path]; ok && (have != kind || kind == "kv") {
			errs = append(errs, fmt.Errorf("mount path %q is already in use by a %s mount", path, have))
			return
		}
		mountKinds[path] = kind
	}
	for i, m := range c.kvMounts {
		c.kvMounts[i] = strings.Trim(m, "/")
		if strings.HasPrefix(c.kvMounts[i], "auth/") {
			errs = append(errs, fmt.Errorf("KV mount %q: auth/ is reserved", m))
			continue
		}
		claim(c.kvMounts[i], "kv")
	}
	for i := range c.appRoles {
		r := &c.appRoles[i]
		r.mount = strings.Trim(r.mount, "/")
		claim("auth/"+r.mount, "approle")
		if r.roleID == "" {
			errs = append(errs, fmt.Errorf("approle %q: empty role_id", r.mount))
		}
		if r.ttl < 0 {
			errs = append(errs, fmt.Errorf("approle %q: negative token TTL", r.mount))
		}
		r.entityID = newUUID()
	}
	for i := range c.kubernetes {
		r := &c.kubernetes[i]
		r.mount = strings.Trim(r.mount, "/")
		claim("auth/"+r.mount, "kubernetes")
		if r.role == "" || r.jwt == "" {
			errs = append(errs, fmt.Errorf("kubernetes %q: role and jwt must be set", r.mount))
		}
		if r.ttl < 0 {
			errs = append(errs, fmt.Errorf("kubernetes %q: negative token TTL", r.mount))
		}
		r.entityID = newUUID()
	}
	if _, ok := mountKinds["auth/token"]; ok {
		errs = append(errs, errors.New("auth/token is the token store and cannot be an auth method mount"))
	}
	seenRoles := map[string]bool{}
	for _, d := range c.dynamic {
		switch {
		case d.name == "" || strings.Contains(d.name, "/"):
			errs = append(errs, fmt.Errorf("invalid database role name %q", d.name))
		case seenRoles[d.name]:
			errs = append(errs, fmt.Errorf("database role %q defined twice", d.name))
		case d.ttl < 0 || d.maxTTL < 0:
			errs = append(errs, fmt.Errorf("database role %q: negative TTL", d.name))
		case d.maxTTL > 0 && d.ttl > d.maxTTL:
			errs = append(errs, fmt.Errorf("database role %q: ttl cannot be greater than max_ttl", d.name))
		}
		seenRoles[d.name] = true
	}
	for _, p := range c.policies {
		if n := strings.ToLower(p.name); n == "" || n == "root" {
			errs = append(errs, fmt.Errorf("invalid policy name %q", p.name))
		}
	}
	return errors.Join(errs...)
}

// newState builds the server state from a validated configuration.
func newState(c *config) (*state, error) {
	st := &state{
		root:      &namespace{path: "", id: "root"},
		mounts:    map[string][]*mount{},
		policies:  map[string]map[string]*policy{},
		tokens:    map[string]*token{},
		accessors: map[string]*token{},
		leases:    map[string]*lease{},
	}
	st.main = st.root
	if c.namespace != "" {
		st.child = &namespace{path: c.namespace + "/", id: randomBase62(5)}
		st.main = st.child
	}
	for _, ns := range st.namespaces() {
		st.policies[ns.id] = map[string]*policy{"default": defaultPolicy()}
		st.addMount(ns, &mount{path: "sys/", typ: "system", handle: handleSys})
		st.addMount(ns, &mount{path: "auth/token/", typ: "token", handle: handleToken})
	}
	for _, np := range c.policies {
		p, err := newPolicy(strings.ToLower(np.name), np.paths)
		if err != nil {
			return nil, err
		}
		st.policies[st.main.id][p.name] = p
	}

	for _, name := range append([]string{"secret"}, c.kvMounts...) {
		st.addMount(st.main, newKVMount(name))
	}
	st.addMount(st.main, newDatabaseMount(c.dynamic))
	approles := map[string][]appRoleRole{}
	for _, r := range c.appRoles {
		approles[r.mount] = append(approles[r.mount], r)
	}
	for mnt, roles := range approles {
		st.addMount(st.main, newAppRoleMount(mnt, roles))
	}
	kube := map[string][]kubernetesRole{}
	for _, r := range c.kubernetes {
		kube[r.mount] = append(kube[r.mount], r)
	}
	for mnt, roles := range kube {
		st.addMount(st.main, newKubernetesMount(mnt, roles))
	}
	return st, nil
}

func (st *state) namespaces() []*namespace {
	if st.child == nil {
		return []*namespace{st.root}
	}
	return []*namespace{st.root, st.child}
}

// addMount registers m in ns, keeping the longest paths first so lookups
// find the most specific mount.
func (st *state) addMount(ns *namespace, m *mount) {
	list := append(st.mounts[ns.id], m)
	sort.SliceStable(list, func(i, j int) bool { return len(list[i].path) > len(list[j].path) })
	st.mounts[ns.id] = list
}

// mountFor finds the mount serving path in ns and the path relative to it.
func (st *state) mountFor(ns *namespace, path string) (*mount, string) {
	for _, m := range st.mounts[ns.id] {
		if rel, ok := strings.CutPrefix(path, m.path); ok {
			return m, rel
		}
		if path+"/" == m.path {
			return m, ""
		}
	}
	return nil, ""
}
