package identity

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lush-agents/lush/internal/principal"
)

// Identities that Envoy verified, for the ext_authz server (docs/mesh.md): the payload of a JWT
// that Envoy's jwt_authn filter verified, and the SPIFFE id of a peer certificate that Envoy's TLS
// handshake verified. Lush does not verify them again; it maps them to principals.

// More authentication methods, for callers that Envoy authenticated.
const (
	MethodEnvoyJWT Method = "envoy_jwt" // jwt_authn metadata
	MethodSPIFFE   Method = "spiffe"    // the peer certificate's SPIFFE id
)

// EnvoyConfig maps Envoy-verified identities to principals (the `ext_authz.identity` section).
type EnvoyConfig struct {
	JWTMetadata *JWTMetadataConfig `yaml:"jwt_metadata"`
	SPIFFE      []SPIFFEMapping    `yaml:"spiffe"`
}

// JWTMetadataConfig says where Envoy's jwt_authn filter puts a verified token's payload
// (payload_in_metadata) and how its claims name the caller.
type JWTMetadataConfig struct {
	Filter        string `yaml:"filter"`         // metadata namespace; default envoy.filters.http.jwt_authn
	Key           string `yaml:"key"`            // payload_in_metadata; default jwt_payload
	SubjectClaim  string `yaml:"subject_claim"`  // default "sub"
	PrincipalKind string `yaml:"principal_kind"` // "user" (default) or "serviceaccount"
	GroupsClaim   string `yaml:"groups_claim"`   // default "groups"
}

// SPIFFEMapping maps SPIFFE ids to a principal: either one id exactly, or every id under a prefix,
// where {name} in Principal stands for the rest of the id.
type SPIFFEMapping struct {
	ID        string   `yaml:"id"`
	Prefix    string   `yaml:"prefix"`
	Principal string   `yaml:"principal"` // e.g. serviceaccount:notes-bot, or serviceaccount:{name} with prefix
	Groups    []string `yaml:"groups"`
}

// Defaults of JWTMetadataConfig.
const (
	DefaultJWTMetadataFilter = "envoy.filters.http.jwt_authn"
	DefaultJWTMetadataKey    = "jwt_payload"
)

// WithDefaults fills in the defaults.
func (c JWTMetadataConfig) WithDefaults() JWTMetadataConfig {
	if c.Filter == "" {
		c.Filter = DefaultJWTMetadataFilter
	}
	if c.Key == "" {
		c.Key = DefaultJWTMetadataKey
	}
	if c.SubjectClaim == "" {
		c.SubjectClaim = "sub"
	}
	if c.PrincipalKind == "" {
		c.PrincipalKind = string(principal.User)
	}
	if c.GroupsClaim == "" {
		c.GroupsClaim = "groups"
	}
	return c
}

// Validate names every bad field, under prefix (e.g. "ext_authz.identity").
func (c EnvoyConfig) Validate(prefix string) error {
	var errs []string
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if j := c.JWTMetadata; j != nil {
		if k := j.PrincipalKind; k != "" && k != string(principal.User) && k != string(principal.ServiceAccount) {
			add(prefix+".jwt_metadata.principal_kind", "must be user or serviceaccount, not %q", k)
		}
	}
	for i, m := range c.SPIFFE {
		f := fmt.Sprintf("%s.spiffe[%d]", prefix, i)
		switch {
		case (m.ID == "") == (m.Prefix == ""):
			add(f, "set exactly one of id (one SPIFFE id) and prefix (every id under it)")
		case !strings.HasPrefix(m.ID+m.Prefix, "spiffe://"):
			add(f, "%q is not a SPIFFE id: it must start with spiffe://", m.ID+m.Prefix)
		}
		p := m.Principal
		if m.Prefix != "" {
			p = strings.ReplaceAll(p, "{name}", "x")
		} else if strings.Contains(p, "{name}") {
			add(f+".principal", "{name} stands for the rest of the id after prefix: use it with prefix, not id")
		}
		checkPrincipal(add, f+".principal", p)
		checkGroups(add, f+".groups", m.Groups)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// FromJWTPayload is the caller a jwt_authn-verified payload names. The payload is the verified
// token's claims as Envoy decoded them.
func (c JWTMetadataConfig) FromJWTPayload(payload map[string]any) (Caller, error) {
	c = c.WithDefaults()
	cl := claims{}
	for k, v := range payload {
		raw, err := json.Marshal(v)
		if err != nil {
			return Caller{}, fail(CodeInvalidToken, "the verified token's claim %s cannot be read", shown(k)).tried(MethodEnvoyJWT)
		}
		cl[k] = raw
	}
	caller, e := claimsCaller(cl, "verified token", "ext_authz.identity.jwt_metadata", c.SubjectClaim, c.PrincipalKind, c.GroupsClaim, MethodEnvoyJWT)
	if e != nil {
		return Caller{}, e.tried(MethodEnvoyJWT)
	}
	return caller, nil
}

// FromSPIFFE is the caller a peer's SPIFFE id names: the first mapping that matches (an exact id
// before any prefix). It reports false when no mapping matches.
func (c EnvoyConfig) FromSPIFFE(id string) (Caller, bool, error) {
	match := -1
	for i, m := range c.SPIFFE {
		if m.ID != "" && m.ID == id {
			match = i
			break
		}
		if match < 0 && m.Prefix != "" && strings.HasPrefix(id, m.Prefix) && len(id) > len(m.Prefix) {
			match = i
		}
	}
	if match < 0 {
		return Caller{}, false, nil
	}
	m := c.SPIFFE[match]
	p := m.Principal
	if m.Prefix != "" {
		p = strings.ReplaceAll(p, "{name}", strings.TrimPrefix(id, m.Prefix))
	}
	pr, err := principal.Parse(p)
	if err == nil && pr.Kind == principal.ServiceAccount && !principal.ValidServiceAccountName(pr.Name) {
		err = fmt.Errorf("%q is not a service account name (lower-case letters, digits, '-', '_' and '.')", pr.Name)
	}
	if err != nil {
		return Caller{}, true, fail(CodeInvalidToken, "the peer's SPIFFE id %s does not form a principal under ext_authz.identity.spiffe[%d]: %v", shown(id), match, err).tried(MethodSPIFFE)
	}
	return Caller{ID: p, Groups: normGroups(m.Groups), Method: MethodSPIFFE, Subject: id}, true, nil
}
