package vault

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Credential types, as declared in lush.yaml mcp_credentials.
const (
	TypeBearer = "bearer" // a token sent as Authorization: Bearer <token>
	TypeOAuth  = "oauth"  // an OAuth access token, sent as a bearer token
	TypeAPIKey = "api_key"
	TypeBasic  = "basic"
	TypeEnv    = "env" // environment variables of a stdio server
)

// Types lists the credential types.
var Types = []string{TypeBearer, TypeOAuth, TypeAPIKey, TypeBasic, TypeEnv}

// DefaultAPIKeyHeader carries an api_key credential when neither the declaration nor the
// credential names a header.
const DefaultAPIKeyHeader = "X-API-Key"

// Credential is a secret an upstream call needs. Its secret fields never leave the process except
// in the request or the environment they are meant for: printing, logging or encoding a
// Credential shows only its type and source.
type Credential struct {
	Type     string
	Token    string            // bearer, oauth
	Header   string            // api_key: the header that carries Key
	Key      string            // api_key
	Username string            // basic
	Password string            // basic
	Env      map[string]string // env: variable -> value
	Source   string            // where it came from, for messages: "file .lush/credentials.local", "vault secret/data/…"
	// Obtained is how it was obtained, for the decision record: exchange, stored_grant,
	// client_credentials or static (a stored credential; "" means static).
	Obtained string
	// Act is the acting chain an exchanged token carries (outermost actor first), for the record.
	Act []string
	// A stored OAuth grant (flow authorization_code): the refresh token (secret), when Token
	// expires (zero: unknown), and the authorization server that issued them.
	RefreshToken string
	Expiry       time.Time
	Issuer       string
}

// Provenance is how the credential was obtained: Obtained, or static for a stored credential.
func (c Credential) Provenance() string {
	if c.Obtained == "" {
		return "static"
	}
	return c.Obtained
}

// Headers are the HTTP headers that present the credential to a remote server.
func (c Credential) Headers() map[string]string {
	switch c.Type {
	case TypeBearer, TypeOAuth:
		return map[string]string{"Authorization": "Bearer " + c.Token}
	case TypeAPIKey:
		h := c.Header
		if h == "" {
			h = DefaultAPIKeyHeader
		}
		return map[string]string{http.CanonicalHeaderKey(h): c.Key}
	case TypeBasic:
		return map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(c.Username+":"+c.Password))}
	}
	return nil
}

// Environ is the credential as KEY=value pairs for a stdio server's environment, sorted.
func (c Credential) Environ() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		out = append(out, k+"="+c.Env[k])
	}
	return out
}

// Fingerprint identifies the credential's secret material without revealing it: an HMAC under
// key (a random per-process key), so that equal credentials share an upstream connection and a
// changed one gets a new one. It is not stable across processes and never logged.
func (c Credential) Fingerprint(key []byte) string {
	m := hmac.New(sha256.New, key)
	for _, f := range []string{c.Type, c.Token, c.Header, c.Key, c.Username, c.Password} {
		fmt.Fprintf(m, "%d:%s;", len(f), f)
	}
	for _, kv := range c.Environ() {
		fmt.Fprintf(m, "%d:%s;", len(kv), kv)
	}
	return hex.EncodeToString(m.Sum(nil))
}

// secrets lists the credential's secret values, for scrubbing messages that might echo them.
func (c Credential) secrets() []string {
	var out []string
	for _, s := range []string{c.Token, c.Key, c.Password, c.RefreshToken} {
		if s != "" {
			out = append(out, s)
		}
	}
	for _, v := range c.Env {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Scrub replaces every secret value of c in s with "[redacted]". Use it on text from an
// upstream (an error message) before it is logged or shown.
func (c Credential) Scrub(s string) string {
	for _, v := range c.secrets() {
		if len(v) >= 4 { // shorter values would redact ordinary text; they are not worth hiding this way
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// The methods below have value receivers so that a Credential and a *Credential print the same.

// String shows the type and source, never the secret.
func (c Credential) String() string {
	return fmt.Sprintf("%s credential from %s", c.Type, c.Source)
}

// GoString keeps %#v from printing the fields.
func (c Credential) GoString() string { return c.String() }

// Format makes every verb (%v, %+v, %s, %q, %x…) print String, so no formatting path reaches the
// fields.
func (c Credential) Format(f fmt.State, _ rune) { fmt.Fprint(f, c.String()) }

// LogValue makes slog print String.
func (c Credential) LogValue() slog.Value { return slog.StringValue(c.String()) }

// MarshalJSON encodes only the type and source.
func (c Credential) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"type":%q,"source":%q}`, c.Type, c.Source), nil
}

// MarshalText is what encoders that prefer text (YAML, some loggers) use.
func (c Credential) MarshalText() ([]byte, error) { return []byte(c.String()), nil }
