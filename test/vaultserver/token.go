package vaultserver

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// handleToken serves the token store, auth/token/.
func handleToken(st *state, req *request) response {
	switch req.rel {
	case "lookup-self":
		if req.op != opRead {
			return unsupportedOperation()
		}
		return req.reply(http.StatusOK, tokenData(req.token, req.now), nil)
	case "lookup":
		if req.op != opRead && req.op != opUpdate && req.op != opCreate {
			return unsupportedOperation()
		}
		t := req.token
		if raw, ok := req.body["token"]; ok {
			s, _ := raw.(string)
			t = st.tokens[s]
		}
		if t == nil || !st.tokenValid(t, req.now) {
			return errorResponse(http.StatusForbidden, "bad token")
		}
		return req.reply(http.StatusOK, tokenData(t, req.now), nil)
	case "renew-self":
		if !isWrite(req.op) {
			return unsupportedOperation()
		}
		return renewToken(req, req.token)
	case "renew":
		if !isWrite(req.op) {
			return unsupportedOperation()
		}
		s, _ := req.body["token"].(string)
		if s == "" {
			return badRequest("missing token")
		}
		t := st.tokens[s]
		if t == nil || !st.tokenValid(t, req.now) {
			return badRequest("token not found")
		}
		return renewToken(req, t)
	case "revoke-self":
		if !isWrite(req.op) {
			return unsupportedOperation()
		}
		st.revokeToken(req.token)
		return noContent()
	case "revoke":
		if !isWrite(req.op) {
			return unsupportedOperation()
		}
		s, _ := req.body["token"].(string)
		if s == "" {
			return badRequest("missing token")
		}
		if t := st.tokens[s]; t != nil {
			st.revokeToken(t)
		}
		return noContent()
	case "create", "create-orphan":
		if !isWrite(req.op) {
			return unsupportedOperation()
		}
		return createToken(st, req, req.rel == "create-orphan")
	}
	return unsupportedPath()
}

func isWrite(op operation) bool { return op == opCreate || op == opUpdate }

// tokenData is the data of a token lookup, with Vault's field names.
func tokenData(t *token, now time.Time) map[string]any {
	data := map[string]any{
		"accessor":         t.accessor,
		"creation_time":    t.issued.Unix(),
		"creation_ttl":     seconds(t.creationTTL),
		"display_name":     t.displayName,
		"entity_id":        t.entityID,
		"expire_time":      nil,
		"explicit_max_ttl": seconds(t.explicitMaxTTL),
		"id":               t.id,
		"meta":             t.meta,
		"num_uses":         t.numUses,
		"orphan":           t.parent == "",
		"path":             t.path,
		"policies":         t.policies,
		"ttl":              0,
		"type":             "service",
	}
	if !t.ns.isRoot() {
		data["namespace_path"] = t.ns.path
	}
	if !t.expire.IsZero() {
		data["expire_time"] = formatTime(t.expire)
		data["issue_time"] = formatTime(t.issued)
		data["ttl"] = seconds(t.expire.Sub(now.Round(time.Second)))
		data["renewable"] = t.renewable
		if !t.lastRenewal.IsZero() {
			data["last_renewal_time"] = t.lastRenewal.Unix()
			data["last_renewal"] = formatTime(t.lastRenewal)
		}
	}
	return data
}

// renewToken extends t's TTL like Vault's token renewal.
func renewToken(req *request, t *token) response {
	inc, err := durationField(req.body, "increment")
	if err != nil {
		return badRequest(err.Error())
	}
	if !t.renewable || t.expire.IsZero() {
		return badRequest("lease is not renewable")
	}
	ttl, warnings, err := calculateTTL(req.now, t.issued, inc, t.creationTTL, effectiveMax(t.explicitMaxTTL, t.roleMaxTTL))
	if err != nil {
		return badRequest(err.Error())
	}
	t.expire = req.now.Add(ttl)
	t.lastRenewal = req.now
	return req.replyAuth(t, ttl, warnings)
}

// createToken is auth/token/create and auth/token/create-orphan.
func createToken(st *state, req *request, orphan bool) response {
	parent := req.token
	b := req.body
	policies, err := stringListField(b, "policies")
	if err != nil {
		return badRequest(err.Error())
	}
	meta, err := stringMapField(b, "meta")
	if err != nil {
		return badRequest(err.Error())
	}
	noParent, err := boolField(b, "no_parent", false)
	if err != nil {
		return badRequest(err.Error())
	}
	noDefault, err := boolField(b, "no_default_policy", false)
	if err != nil {
		return badRequest(err.Error())
	}
	renewable, err := boolField(b, "renewable", true)
	if err != nil {
		return badRequest(err.Error())
	}
	ttl, err := durationField(b, "ttl")
	if err != nil {
		return badRequest(err.Error())
	}
	if ttl == 0 {
		if ttl, err = durationField(b, "lease"); err != nil { // deprecated alias
			return badRequest(err.Error())
		}
	}
	explicitMax, err := durationField(b, "explicit_max_ttl")
	if err != nil {
		return badRequest(err.Error())
	}
	numUses, err := intField(b, "num_uses")
	if err != nil {
		return badRequest(err.Error())
	}
	if numUses < 0 {
		return badRequest("number of uses cannot be negative")
	}
	if typ, _ := b["type"].(string); typ != "" && typ != "service" && typ != "default-service" {
		return badRequest(fmt.Sprintf("vaultserver: token type %q is not supported; only service tokens are", typ))
	}
	if period, err := durationField(b, "period"); err != nil || period != 0 {
		return badRequest("vaultserver: periodic tokens are not supported")
	}

	parentIsRoot := slices.Contains(parent.policies, "root")
	if noParent && !orphan && !parentIsRoot && st.capabilities(parent, req.ns, req.path)&capSudo == 0 {
		return badRequest("root or sudo privileges required to create orphan token")
	}
	if len(policies) == 0 {
		policies = parent.policies
	} else if !parentIsRoot {
		for _, p := range sanitizePolicies(policies, false) {
			if p != "default" && !slices.Contains(parent.policies, p) {
				return badRequest("child policies must be subset of parent")
			}
		}
	}
	childIsRoot := slices.Contains(sanitizePolicies(policies, false), "root")
	if childIsRoot && ttl == 0 && explicitMax == 0 && !parent.expire.IsZero() {
		return badRequest("expiring root tokens cannot create non-expiring root tokens")
	}

	displayName := "token"
	if dn, _ := b["display_name"].(string); dn != "" {
		displayName = "token-" + sanitizeDisplayName(dn)
	}
	parentID := parent.id
	if orphan || noParent {
		parentID = ""
	}
	t, warnings := st.mint(tokenParams{
		ns: req.ns, policies: policies, noDefault: noDefault, parent: parentID,
		path: "auth/token/" + req.rel, displayName: displayName, meta: meta,
		ttl: ttl, explicitMaxTTL: explicitMax, renewable: renewable, numUses: numUses,
	}, req.now)
	return req.replyAuth(t, t.creationTTL, warnings)
}

// sanitizeDisplayName lower-cases a display name and replaces anything but
// letters, digits and '-' with '-', as Vault's token store does.
func sanitizeDisplayName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '-'
	}, s)
}

// newAppRoleMount mounts the AppRole auth method at auth/name/.
func newAppRoleMount(name string, roles []appRoleRole) *mount {
	return &mount{
		path:  "auth/" + name + "/",
		typ:   "approle",
		login: true,
		handle: func(st *state, req *request) response {
			if req.rel != "login" {
				return unsupportedPath()
			}
			if !isWrite(req.op) {
				return unsupportedOperation()
			}
			return appRoleLogin(st, req, name, roles)
		},
	}
}

// appRoleLogin is POST auth/<mount>/login {"role_id","secret_id"}. A role
// configured with an empty secret ID logs in with the role ID alone, like an
// AppRole role with bind_secret_id=false.
func appRoleLogin(st *state, req *request, mountName string, roles []appRoleRole) response {
	roleID, _ := req.body["role_id"].(string)
	secretID, _ := req.body["secret_id"].(string)
	if roleID == "" {
		return badRequest("missing role_id")
	}
	var role *appRoleRole
	for i := range roles {
		if equal(roles[i].roleID, roleID) {
			role = &roles[i]
			break
		}
	}
	if role == nil {
		return badRequest("invalid role or secret ID")
	}
	if role.secretID != "" {
		if secretID == "" {
			return badRequest("missing secret_id")
		}
		if !equal(role.secretID, secretID) {
			return badRequest("invalid role or secret ID")
		}
	}
	t, warnings := st.mint(tokenParams{
		ns: req.ns, policies: role.policies, path: "auth/" + mountName + "/login",
		displayName: "approle", meta: map[string]string{"role_name": mountName},
		entityID: role.entityID, ttl: role.ttl, renewable: true,
	}, req.now)
	return req.replyAuth(t, t.creationTTL, warnings)
}

// newKubernetesMount mounts the Kubernetes auth method at auth/name/.
func newKubernetesMount(name string, roles []kubernetesRole) *mount {
	return &mount{
		path:  "auth/" + name + "/",
		typ:   "kubernetes",
		login: true,
		handle: func(st *state, req *request) response {
			if req.rel != "login" {
				return unsupportedPath()
			}
			if !isWrite(req.op) {
				return unsupportedOperation()
			}
			return kubernetesLogin(st, req, name, roles)
		},
	}
}

// kubernetesLogin is POST auth/<mount>/login {"role","jwt"}.
func kubernetesLogin(st *state, req *request, mountName string, roles []kubernetesRole) response {
	roleName, _ := req.body["role"].(string)
	jwt, _ := req.body["jwt"].(string)
	if roleName == "" {
		return badRequest("missing role")
	}
	if jwt == "" {
		return badRequest("missing jwt")
	}
	var role *kubernetesRole
	for i := range roles {
		if roles[i].role == roleName {
			role = &roles[i]
			break
		}
	}
	if role == nil {
		return badRequest(fmt.Sprintf("invalid role name %q", roleName))
	}
	if !equal(role.jwt, jwt) {
		return errorResponse(http.StatusForbidden, msgACLDenied)
	}
	saNamespace, saName := serviceAccount(jwt)
	displayName := "kubernetes-" + roleName
	if saName != "" {
		displayName = "kubernetes-" + saNamespace + "-" + saName
	}
	t, warnings := st.mint(tokenParams{
		ns: req.ns, policies: role.policies, path: "auth/" + mountName + "/login",
		displayName: displayName,
		meta: map[string]string{
			"role":                        roleName,
			"service_account_name":        saName,
			"service_account_namespace":   saNamespace,
			"service_account_secret_name": "",
			"service_account_uid":         "",
		},
		entityID: role.entityID, ttl: role.ttl, renewable: true,
	}, req.now)
	return req.replyAuth(t, t.creationTTL, warnings)
}

// serviceAccount reads the service account from a Kubernetes JWT's "sub"
// claim (system:serviceaccount:NAMESPACE:NAME) without verifying it.
func serviceAccount(jwt string) (namespace, name string) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return "", ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return "", ""
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return "", ""
	}
	rest, ok := strings.CutPrefix(claims.Sub, "system:serviceaccount:")
	if !ok {
		return "", ""
	}
	namespace, name, _ = strings.Cut(rest, ":")
	return namespace, name
}

// equal compares secrets in constant time.
func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
